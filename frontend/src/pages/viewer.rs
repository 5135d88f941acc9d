//! The read-only viewer of one node (`/sim/:tree?node=N`).

use leptos::prelude::*;

use super::agents::AgentsPanel;
use super::common::fetch_node;
use super::events::EventsPanel;
use crate::api::ApiError;
use crate::model::NodeView;
use crate::route::Route;
use crate::state::{Link, ctx, set_title};

/// The read-only viewer of one node (`/sim/:tree?node=N`): REST once, no sockets.
#[component]
pub fn SimViewer(tree_id: Option<u64>, node: u64) -> impl IntoView {
    let ctx = ctx();
    let node_view = RwSignal::new(NodeView::default());
    let error = RwSignal::new(None::<String>);
    let stick = RwSignal::new(true);
    set_title(&tree_id.map_or_else(|| "Simulation · simtree".into(), |t| format!("node {node} · tree {t} · simtree")));
    if let Some(t) = tree_id {
        leptos::task::spawn_local(async move {
            match fetch_node(t, node).await {
                Ok(v) => node_view.set(v),
                Err(ApiError::NotFound(_)) => {
                    error.set(Some(ctx.tr("notFound.node").replace("{{id}}", &node.to_string())))
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(e) => error.set(Some(e.to_string())),
            }
        });
    }
    view! {
        <div class="page viewer">
            <h2 id="viewer-title">
                {move || ctx.tr("sim.title")} " " {tree_id.map(|t| format!("{t} · node {node}"))}
            </h2>
            <p>
                {tree_id.map(|t| view! { <Link route=Route::SimTree(Some(t)) id="viewer-tree-link">{move || ctx.tr("nav.tree")}</Link> })}
            </p>
            {move || error.get().map(|e| view! { <p id="viewer-error" class="error">{e}</p> })}
            {tree_id.is_none().then(|| view! { <TreePicker /> })}
            <div class="viewer-cols">
                <div id="viewer-events">
                    <h3>{move || ctx.tr("sim.events")}</h3>
                    <EventsPanel view_state=node_view stick viewer=true />
                </div>
                <div>
                    <h3>{move || ctx.tr("sim.agent")}</h3>
                    <AgentsPanel view_state=node_view stick />
                </div>
            </div>
        </div>
    }
}

/// `/sim` without a tree: what the page is for and the trees whose roots it can show (nothing
/// else would be on it).
#[component]
fn TreePicker() -> impl IntoView {
    let ctx = ctx();
    let trees = RwSignal::new(None::<Vec<simtree_shared::TreeInfo>>);
    leptos::task::spawn_local(async move {
        match crate::api::trees().await {
            Ok(list) => {
                trees.try_set(Some(list));
            }
            Err(e) => ctx.error(e),
        }
    });
    view! {
        <div id="viewer-pick">
            <p>{move || ctx.tr("sim.pick")}</p>
            {move || trees.get().map(|list| {
                if list.is_empty() {
                    return view! {
                        <p id="viewer-no-trees" class="muted">
                            {move || ctx.tr("sim.noTrees")} " "
                            <Link route=Route::SimTree(None)>{move || ctx.tr("nav.tree")}</Link>
                        </p>
                    }
                    .into_any();
                }
                view! {
                    <ul id="viewer-trees">
                        {list
                            .into_iter()
                            .map(|t| {
                                let label = format!("{} (#{}) · {}", t.name, t.id, t.scenario);
                                view! {
                                    <li data-tree=t.id.to_string()>
                                        <Link route=Route::Sim { tree: Some(t.id), node: t.root }>{label}</Link>
                                    </li>
                                }
                            })
                            .collect_view()}
                    </ul>
                }
                .into_any()
            })}
        </div>
    }
}
