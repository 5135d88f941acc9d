//! The ops panel: advance, parallel and chain runs, run leaves, stop, details, delete.

use leptos::prelude::*;
use simtree_shared::{NodeStatus, NodeView as KindView};

use crate::api::{self, ApiError};
use crate::estimate::{EstimateLine, debounced_estimate};
use crate::model::{FanOut, parse_count};
use crate::ops::finished_reason;
use crate::route::Route;
use crate::state::{Tree, ctx};

/// The runs the ops panel starts from the selected node.
#[derive(Clone, Copy)]
pub(super) enum Advance {
    /// One child, run this many turns.
    One(u64),
    /// This many one-turn children, each under the last.
    Chain(u64),
    /// (turns, count, same seed): that many children side by side.
    Multi(u64, u64, bool),
}

/// Run leaves, advance, parallel run, chain run, stop, details, delete (with confirmation).
#[component]
pub(super) fn OpsPanel(tree: Tree, node_view: RwSignal<Option<KindView>>, details: bool) -> impl IntoView {
    let ctx = ctx();
    let leaves = RwSignal::new("1".to_string());
    let steps = RwSignal::new("1".to_string());
    let size = RwSignal::new("2".to_string());
    let chain = RwSignal::new("5".to_string());
    let confirm_delete = RwSignal::new(false);
    let same_seed = RwSignal::new(false);
    // The last fan-out's note (its children came out identical), shown beside the form.
    let fanout_note = RwSignal::new(None::<String>);
    // The fan-out this panel started and waits for (its children are what "Stop all" stops).
    let fan = RwSignal::new(None::<FanOut>);
    Effect::new(move |_| {
        tree.selected.track();
        confirm_delete.set(false);
    });
    let sel_status = move || tree.selected.get().map(|n| tree.graph.with(|g| g.status_of(n)));
    let running = move || sel_status() == Some(NodeStatus::Running);
    let no_tree = move || tree.id.get().is_none() || tree.busy.get();
    let finished = move || node_view.with(|v| v.as_ref().and_then(finished_reason));
    let no_sel = move || tree.id.get().is_none() || tree.selected.get().is_none() || tree.busy.get() || running();
    let no_advance = move || no_sel() || finished().is_some();
    let sel = move || tree.selected.get_untracked().unwrap_or(0);
    // What the parallel run would cost, asked again as its values change.
    let fanout_estimate = debounced_estimate(move || {
        // A running node cannot be run from (the server says 409): nothing to estimate.
        if no_advance() {
            return None;
        }
        let (t, parent) = (tree.id.get()?, tree.selected.get()?);
        let body = simtree_shared::MultiRequest {
            parent,
            turns: parse_count(&steps.get(), 1),
            count: i64::try_from(parse_count(&size.get(), 2)).unwrap_or(i64::MAX),
            same_seed: same_seed.get(),
        };
        Some((t, "advance_multi", serde_json::to_value(body).ok()?))
    });
    let input = move |id: &'static str, sig: RwSignal<String>| {
        view! { <input id=id type="number" min="1" prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev)) /> }
    };
    // Advance-like requests: the view follows the first child attached under the parent (a
    // single run's reply names its child; a parallel run's children are followed by the socket).
    let advance = move |run: Advance| {
        let (Some(t), parent) = (tree.id.get_untracked(), sel()) else {
            return;
        };
        tree.follow.set(Some(parent));
        tree.run(async move {
            let child = match run {
                Advance::One(turns) => Some(api::advance(t, parent, turns).await?.child),
                Advance::Chain(turns) => Some(api::advance_chain(t, parent, turns).await?.child),
                Advance::Multi(turns, count, same) => {
                    fanout_note.set(None);
                    fan.set(Some(tree.graph.with_untracked(|g| FanOut::start(g, [parent]))));
                    let reply = api::advance_multi(t, parent, turns, count, same).await;
                    fan.try_set(None);
                    fanout_note.try_set(reply?.note);
                    None
                }
            };
            if let Some(child) = child {
                tree.follow.set(None);
                tree.selected.set(Some(child));
            }
            Ok(())
        });
    };
    // What "Stop all" stops: the running children of the fan-out in flight from here, else those
    // of the selected node when it has more than one (a fan-out started elsewhere).
    let stoppable = move || {
        tree.graph.with(|g| match fan.with(|f| f.as_ref().map(|f| f.running(g))) {
            Some(children) => children,
            None => tree.selected.get().map(|n| g.running_children(n)).filter(|c| c.len() > 1).unwrap_or_default(),
        })
    };
    let stop_all = move |_| {
        let Some(t) = tree.id.get_untracked() else { return };
        for node in stoppable() {
            leptos::task::spawn_local(async move {
                match api::cancel(t, node).await {
                    // It ended on its own meanwhile: nothing left to stop.
                    Ok(_) | Err(ApiError::Http(409, _)) => {}
                    Err(e) => ctx.error(e),
                }
            });
        }
    };
    view! {
        <section class="panel ops">
            <h3>{move || ctx.tr("ops.title")}</h3>
            {move || finished().map(|r| view! { <p id="finished-note" class="note">{format!("{}: {r}", ctx.tr("ops.cannotAdvance"))}</p> })}
            <div class="row">
                <label>{move || format!("{} ({})", ctx.tr("simtree.stepCount"), ctx.tr(tree.kind.get().units()))}</label>
                {input("steps-input", steps)}
                <button id="advance-btn" class="primary" disabled=no_advance on:click=move |_| {
                    let turns = parse_count(&steps.get(), 1);
                    advance(Advance::One(turns));
                }>{move || ctx.tr("ops.advance")}</button>
            </div>
            <div class="row">
                <label>{move || format!("{} ({})", ctx.tr("simtree.parallelSize"), ctx.tr("unit.runs"))}</label>
                {input("parallel-input", size)}
                <button id="parallel-btn" disabled=no_advance on:click=move |_| {
                    let turns = parse_count(&steps.get(), 1);
                    let count = parse_count(&size.get(), 2);
                    advance(Advance::Multi(turns, count, same_seed.get()));
                }>{move || ctx.tr("simtree.parallelRun")}</button>
            </div>
            <div class="row">
                <label title=move || ctx.tr("ops.sameSeedHint")>
                    <input
                        id="same-seed"
                        type="checkbox"
                        prop:checked=move || same_seed.get()
                        on:change=move |ev| same_seed.set(event_target_checked(&ev))
                    />
                    " "
                    {move || ctx.tr("ops.sameSeed")}
                </label>
            </div>
            <EstimateLine id="fanout-estimate" estimate=fanout_estimate />
            {move || fanout_note.get().map(|n| view! {
                <p id="fanout-note" class="note">{n}</p>
            })}
            <div class="row">
                <label>{move || format!("{} ({})", ctx.tr("simtree.chainLength"), ctx.tr("unit.nodes"))}</label>
                {input("chain-input", chain)}
                <button id="chain-btn" disabled=no_advance on:click=move |_| {
                    let turns = parse_count(&chain.get(), 5);
                    advance(Advance::Chain(turns));
                }>{move || ctx.tr("simtree.chainRun")}</button>
            </div>
            <div class="row">
                <label>{move || format!("{} ({})", ctx.tr("simtree.runLeaves"), ctx.tr(tree.kind.get().units()))}</label>
                {input("leaves-input", leaves)}
                <button id="run-leaves-btn" disabled=no_tree on:click=move |_| {
                    let turns = parse_count(&leaves.get(), 1);
                    let Some(t) = tree.id.get_untracked() else { return };
                    if tree.busy.get_untracked() {
                        return;
                    }
                    fan.set(Some(tree.graph.with_untracked(FanOut::of_leaves)));
                    tree.run(async move {
                        let reply = api::advance_frontier(t, turns, false).await;
                        fan.try_set(None);
                        reply.map(|_| ())
                    })
                }>{move || ctx.tr("simtree.run")}</button>
            </div>
            <Show when=move || !stoppable().is_empty()>
                <div class="row">
                    <button id="stop-all-btn" class="danger" on:click=stop_all>
                        {move || format!("{} ({})", ctx.tr("ops.stopAll"), stoppable().len())}
                    </button>
                </div>
            </Show>
            <div class="row">
                <Show when=running>
                    <button id="stop-btn" class="danger" on:click=move |_| {
                        let (Some(t), node) = (tree.id.get_untracked(), sel()) else { return };
                        leptos::task::spawn_local(async move {
                            if let Err(e) = api::cancel(t, node).await {
                                ctx.error(e);
                            }
                        });
                    }>{move || ctx.tr("ops.stop")}</button>
                </Show>
                <Show when=move || details>
                    <button id="details-btn" disabled=no_sel on:click=move |_| {
                        if let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) {
                            ctx.navigate(Route::Sim { tree: Some(t), node: n });
                        }
                    }>{move || ctx.tr("common.viewDetails")}</button>
                </Show>
                <button
                    id="delete-btn"
                    class="danger-outline"
                    disabled=move || no_sel() || tree.selected.get() == Some(tree.graph.with(|g| g.root))
                    on:click=move |_| confirm_delete.set(true)
                >{move || ctx.tr("simtree.deleteSubtree")}</button>
            </div>
            <Show when=move || confirm_delete.get()>
                <div id="confirm-delete" class="confirm">
                    <span>{move || {
                        let n = sel();
                        let count = tree.graph.with(|g| g.descendants(n).len());
                        ctx.tr("confirm.delete").replace("{{id}}", &n.to_string()).replace("{{n}}", &count.to_string())
                    }}</span>
                    <button id="confirm-delete-yes" class="danger" on:click=move |_| {
                        confirm_delete.set(false);
                        let (Some(t), node) = (tree.id.get_untracked(), sel()) else { return };
                        tree.run(async move {
                            api::delete_node(t, node).await?;
                            tree.refresh();
                            Ok(())
                        });
                    }>{move || ctx.tr("common.delete")}</button>
                    <button id="confirm-delete-no" on:click=move |_| confirm_delete.set(false)>{move || ctx.tr("common.cancel")}</button>
                </div>
            </Show>
        </section>
    }
}
