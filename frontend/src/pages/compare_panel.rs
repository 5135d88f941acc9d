//! The compare panel: the selected node against another, read like a diff from their common
//! ancestor ([`crate::compare`]): the k-th event of each on one row, the first that differs
//! marked, bookkeeping entries hidden unless asked; two trading nodes' figures with their
//! difference.

use leptos::prelude::*;
use simtree_shared::trading::EpisodeMetrics;
use simtree_shared::{LogEntry, NodeView as KindView};

use crate::api::{self, ApiError};
use crate::chart::pct;
use crate::compare::{Comparison, compare};
use crate::model::event_line;
use crate::state::{Tree, ctx};

/// Compare the selected node with another: LCA, events since it side by side, first divergence.
#[component]
pub(super) fn ComparePanel(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let other = RwSignal::new(String::new());
    let result = RwSignal::new(None::<(u64, u64, Comparison)>);
    let views = RwSignal::new(None::<(KindView, KindView)>);
    Effect::new(move |_| {
        if let Some(n) = tree.compare_with.get() {
            other.set(n.to_string());
        }
    });
    // A new selection makes the last comparison stale.
    Effect::new(move |_| {
        tree.selected.track();
        result.set(None);
        views.set(None);
    });
    let run = move |_| {
        let (Some(t), Some(a)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        let Ok(b) = other.get().trim().parse::<u64>() else {
            ctx.error(ApiError::Client(ctx.tr("compare.enterId").into()));
            return;
        };
        tree.compare_with.set(Some(b));
        let ctx2 = ctx;
        leptos::task::spawn_local(async move {
            let r: Result<(), ApiError> = async {
                let la = api::node_logs(t, a).await?;
                let lb = api::node_logs(t, b).await?;
                let (pa, pb) = tree.graph.with_untracked(|g| (g.path_to(a), g.path_to(b)));
                let c = compare(&pa, &la, &pb, &lb, |e| event_line(e).is_some());
                result.set(Some((a, b, c)));
                let va = api::node_view(t, a).await?;
                let vb = api::node_view(t, b).await?;
                views.set(Some((va, vb)));
                Ok(())
            }
            .await;
            if let Err(e) = r {
                ctx2.error(e);
            }
        });
    };
    // Bookkeeping entries (context deltas, process starts and ends, action starts) are rows of
    // their own, hidden unless asked for.
    let bookkeeping = RwSignal::new(false);
    let text_of = |e: &LogEntry| {
        event_line(e).map_or_else(
            || e.kind.clone(),
            |l| format!("{} {}{}", l.label, l.agent.map(|a| a + ": ").unwrap_or_default(), l.text),
        )
    };
    let rows = move || {
        let all = bookkeeping.get();
        result.with(|r| {
            let Some((_, _, c)) = r else {
                return Vec::new();
            };
            c.rows
                .iter()
                .filter(|row| all || !row.bookkeeping())
                .map(|row| {
                    let left = row.left.map(|i| text_of(&c.left[i])).unwrap_or_default();
                    let right = row.right.map(|i| text_of(&c.right[i])).unwrap_or_default();
                    let number = row.event.map(|k| (k + 1).to_string()).unwrap_or_default();
                    let shown = number.clone();
                    view! {
                        <div class="crow" class:diverge=row.diverge class:internal=row.bookkeeping() data-event=number>
                            <span class="cnum">{shown}</span>
                            <div class="cell left">{left}</div>
                            <div class="cell right">{right}</div>
                        </div>
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    view! {
        <section class="panel compare">
            <h3>{move || ctx.tr("simtree.compare")}</h3>
            <div class="row">
                <label>{move || ctx.tr("simtree.compareWith")}</label>
                <input id="compare-input" prop:value=move || other.get() on:input=move |ev| other.set(event_target_value(&ev)) />
                <button id="compare-btn" disabled=move || tree.selected.get().is_none() on:click=run>{move || ctx.tr("simtree.compare")}</button>
            </div>
            <Show when=move || result.with(Option::is_some)>
                <div id="compare-view">
                    <p id="compare-summary">
                        {move || result.with(|r| r.as_ref().map(|(a, b, c)| {
                            let div = match c.first_divergence {
                                Some(i) => format!("{}: {} {}", ctx.tr("simtree.divergence"), ctx.tr("compare.event"), i + 1),
                                None => ctx.tr("simtree.noDivergence").to_string(),
                            };
                            format!("{a} ↔ {b} · {}: {} · {div}", ctx.tr("simtree.lca"), c.lca)
                        }))}
                    </p>
                    {move || views.with(|v| match v {
                        Some((KindView::Trading(va), KindView::Trading(vb))) => result.with(|r| {
                            let (a, b, _) = r.as_ref()?;
                            Some(metrics_delta((*a, &va.metrics), (*b, &vb.metrics)))
                        }),
                        _ => None,
                    })}
                    <label class="check">
                        <input id="compare-bookkeeping" type="checkbox" prop:checked=move || bookkeeping.get() on:change=move |ev| bookkeeping.set(event_target_checked(&ev)) />
                        {move || ctx.tr("compare.bookkeeping")}
                    </label>
                    <div id="compare-rows" class="compare-rows">
                        <div class="crow head">
                            <span class="cnum"></span>
                            <h4 id="compare-left-title">{move || result.with(|r| r.as_ref().map(|(a, _, _)| format!("{} #{a}", ctx.tr("inspector.node"))))}</h4>
                            <h4 id="compare-right-title">{move || result.with(|r| r.as_ref().map(|(_, b, _)| format!("{} #{b}", ctx.tr("inspector.node"))))}</h4>
                        </div>
                        {rows}
                    </div>
                </div>
            </Show>
        </section>
    }
}

/// The strategy's figures of two trading nodes side by side, with the difference (second minus
/// first; percentages in points).
fn metrics_delta(a: (u64, &EpisodeMetrics), b: (u64, &EpisodeMetrics)) -> impl IntoView + use<> {
    let ctx = ctx();
    let ((na, ma), (nb, mb)) = (a, b);
    // `decimals: None` shows a fraction as a percentage.
    let row = |label: &'static str, figure: fn(&EpisodeMetrics) -> Option<f64>, decimals: Option<usize>| {
        let show = move |x: Option<f64>| match decimals {
            None => pct(x),
            Some(d) => x.map_or_else(|| "–".into(), |x| format!("{x:.d$}")),
        };
        let (x, y) = (figure(ma), figure(mb));
        let delta = match (x, y) {
            (Some(x), Some(y)) => {
                let d = y - x;
                let sign = if d > 0.0 { "+" } else { "" };
                format!("{sign}{}", show(Some(d)))
            }
            _ => "–".into(),
        };
        view! { <tr><td>{move || ctx.tr(label)}</td><td>{show(x)}</td><td>{show(y)}</td><td class="delta">{delta}</td></tr> }
    };
    view! {
        <div id="compare-metrics">
            <table class="metrics">
                <tr><th>{move || ctx.tr("trading.strategy")}</th><th>{format!("#{na}")}</th><th>{format!("#{nb}")}</th><th>"Δ"</th></tr>
                {row("trading.totalReturn", |m| Some(m.strategy.total_return), None)}
                {row("trading.annualised", |m| Some(m.strategy.annualised_return), None)}
                {row("trading.volatility", |m| Some(m.strategy.volatility), None)}
                {row("trading.sharpe", |m| m.strategy.sharpe, Some(2))}
                {row("trading.maxDrawdown", |m| Some(m.strategy.max_drawdown), None)}
                {row("compare.trades", |m| Some(m.num_trades as f64), Some(0))}
                {row("compare.rejected", |m| Some(m.rejected_decisions as f64), Some(0))}
            </table>
        </div>
    }
}
