//! The inspector: what the selected node is, its status, progress, failure reason and key figure.

use leptos::prelude::*;
use simtree_shared::{NodeInfo, NodeStatus, NodeView as KindView, Op};

use crate::api;
use crate::graph::{node_summary, status_key, status_name};
use crate::state::{Tree, ctx};

/// What the selected node is: what made it, its status and failure reason, and a key figure.
#[component]
pub(super) fn Inspector(tree: Tree, node_view: RwSignal<Option<KindView>>) -> impl IntoView {
    let ctx = ctx();
    let info = RwSignal::new(None::<NodeInfo>);
    Effect::new(move |_| {
        tree.last_msg.track();
        ctx.spent.track();
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            let v = api::node_info(t, n).await.ok();
            if tree.selected.get_untracked() == Some(n) {
                info.set(v);
            }
        });
    });
    let status = move || {
        let n = tree.selected.get()?;
        Some(tree.graph.with(|g| g.status_of(n)))
    };
    let reason = move || {
        let n = tree.selected.get()?;
        tree.graph.with(|g| g.errors.get(&n).cloned()).or_else(|| info.with(|i| i.as_ref()?.error.clone()))
    };
    // A failed (cancelled, interrupted) run can be run again: the same turns from its parent.
    let retry = move || {
        let n = tree.selected.get()?;
        let ended = matches!(status()?, NodeStatus::Failed | NodeStatus::Cancelled | NodeStatus::Interrupted);
        if !ended {
            return None;
        }
        tree.graph.with(|g| {
            let turns = g.ops.get(&n)?.iter().find_map(|op| match op {
                Op::Advance { turns } => Some(*turns),
                _ => None,
            })?;
            Some((g.parent_of(n)?, turns))
        })
    };
    let run_again = move |_| {
        let (Some(t), Some((parent, turns))) = (tree.id.get_untracked(), retry()) else {
            return;
        };
        tree.follow.set(Some(parent));
        tree.run(async move {
            let child = api::advance(t, parent, turns).await?.child;
            tree.follow.set(None);
            tree.selected.set(Some(child));
            Ok(())
        });
    };
    let figure = move || {
        node_view.with(|v| {
            Some(match v.as_ref()? {
                KindView::Trading(v) => format!(
                    "{}{} {}/{} · {} {}",
                    // The last decision's date; before the first, the date it will be made.
                    match (&v.current_date, &v.next_date) {
                        (Some(d), _) => format!("{d} · "),
                        (None, Some(d)) => format!("{} {d} · ", ctx.tr("inspector.starts")),
                        (None, None) => String::new(),
                    },
                    ctx.tr("inspector.decisions"),
                    v.next_decision_point,
                    v.decision_points,
                    ctx.tr("inspector.equity"),
                    crate::ops::grouped(v.portfolio_value)
                ),
                KindView::Abm(v) => format!("{} {}", ctx.tr("inspector.step"), v.steps),
                KindView::Social(v) => format!("{}: {}", ctx.tr("inspector.scene"), v.scene),
            })
        })
    };
    let tokens = move || {
        info.with(|i| {
            let u = &i.as_ref()?.usage;
            let calls = Some(u.calls).filter(|c| *c > 0)?;
            Some(format!(
                "{calls} {} · {} {}{}",
                ctx.tr("usage.calls"),
                u.prompt_tokens + u.completion_tokens,
                ctx.tr("usage.tokens"),
                crate::ops::money_text(u, ctx.tr("usage.saved"), ctx.tr("usage.cacheable"))
            ))
        })
    };
    view! {
        <section id="inspector" class="panel inspector">
            <Show when=move || tree.selected.get().is_some() fallback=move || view! { <p class="muted">{move || ctx.tr("inspector.none")}</p> }>
                <h3>
                    {move || format!("{} #{}", ctx.tr("inspector.node"), tree.selected.get().unwrap_or(0))}
                    <span id="node-status" class=move || format!("badge {}", status_name(status().unwrap_or_default()))>
                        {move || ctx.tr(status_key(status().unwrap_or_default()))}
                    </span>
                </h3>
                <p id="node-made" class="made">
                    {move || tree.selected.get().map(|n| tree.graph.with(|g| node_summary(g, n, ctx.lang.get())))}
                </p>
                {move || {
                    let (label, t) = tree.progress_of(tree.selected.get()?)?;
                    Some(view! {
                        <p id="node-progress" class="progress-line">
                            <span>{label}</span>
                            " "
                            <progress max=t.total value=t.done></progress>
                        </p>
                    })
                }}
                {move || reason().map(|r| view! { <p id="node-reason" class="reason">{r}</p> })}
                <Show when=move || retry().is_some()>
                    <button id="retry-btn" disabled=move || tree.busy.get() on:click=run_again>
                        {move || ctx.tr("inspector.retry")}
                    </button>
                </Show>
                {move || figure().map(|f| view! { <p id="node-figure" class="figure">{f}</p> })}
                {move || tokens().map(|t| view! { <p id="node-usage" class="muted">{t}</p> })}
            </Show>
        </section>
    }
}
