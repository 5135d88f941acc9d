//! The compare panel: the selected node against another, from their common ancestor.

use leptos::prelude::*;
use simtree_shared::NodeView as KindView;

use super::details::metrics_table;
use crate::api::{self, ApiError};
use crate::compare::{Comparison, compare};
use crate::model::event_line;
use crate::state::{Tree, ctx};

/// Root path of a node from the graph model (root first).
pub(super) fn path_of(tree: Tree, node: u64) -> Vec<u64> {
    tree.graph.with_untracked(|g| {
        let mut path = vec![node];
        while let Some(p) = path.last().and_then(|&n| g.parent_of(n)) {
            if path.contains(&p) {
                break;
            }
            path.push(p);
        }
        path.reverse();
        path
    })
}

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
                let c = compare(&path_of(tree, a), &la, &path_of(tree, b), &lb);
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
    let column = move |side: usize| {
        move || {
            result.with(|r| {
                let Some((_, _, c)) = r else {
                    return Vec::new();
                };
                let entries = if side == 0 { &c.left } else { &c.right };
                entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let diverge = c.first_divergence == Some(i);
                        // Bookkeeping entries (context deltas, process starts) stay in the
                        // comparison but read as such, muted.
                        let internal = event_line(e).is_none();
                        let text = event_line(e).map_or_else(
                            || e.kind.clone(),
                            |l| {
                                format!(
                                    "{} {}{}",
                                    l.label,
                                    l.agent.map(|a| a + ": ").unwrap_or_default(),
                                    l.text
                                )
                            },
                        );
                        view! { <li class:diverge=diverge class:internal=internal data-index=i.to_string()>{text}</li> }
                    })
                    .collect::<Vec<_>>()
            })
        }
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
                                Some(i) => format!("{}: #{i}", ctx.tr("simtree.divergence")),
                                None => ctx.tr("simtree.noDivergence").to_string(),
                            };
                            format!("{a} ↔ {b} · {}: {} · {div}", ctx.tr("simtree.lca"), c.lca)
                        }))}
                    </p>
                    {move || views.with(|v| match v {
                        Some((KindView::Trading(a), KindView::Trading(b))) => Some(view! {
                            <div id="compare-metrics" class="columns">
                                <div>{metrics_table(&a.metrics)}</div>
                                <div>{metrics_table(&b.metrics)}</div>
                            </div>
                        }),
                        _ => None,
                    })}
                    <div class="columns">
                        <div>
                            <h4 id="compare-left-title">{move || result.with(|r| r.as_ref().map(|(a, _, _)| format!("{} #{a}", ctx.tr("inspector.node"))))}</h4>
                            <ol id="compare-left">{column(0)}</ol>
                        </div>
                        <div>
                            <h4 id="compare-right-title">{move || result.with(|r| r.as_ref().map(|(_, b, _)| format!("{} #{b}", ctx.tr("inspector.node"))))}</h4>
                            <ol id="compare-right">{column(1)}</ol>
                        </div>
                    </div>
                </div>
            </Show>
        </section>
    }
}
