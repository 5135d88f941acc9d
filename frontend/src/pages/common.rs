//! What the pages share: which tree to open, the tab's title, "not found", the side pane's
//! splitter, and the reads of the selected node (its kind view, its events and agents).

use leptos::prelude::*;
use simtree_shared::NodeView as KindView;

use crate::api::{self, ApiError};
use crate::model::NodeView;
use crate::route::Route;
use crate::state::{Link, Tree, ctx, set_title};

/// The tree to open: the route's, else the last one used.
pub(super) fn initial_tree(route_id: Option<u64>) -> Option<u64> {
    route_id.or_else(|| api::storage_get("devui:lastTreeId").and_then(|s| s.parse().ok()))
}

/// The page title names the tree and what it simulates.
pub(super) fn title_effect(tree: Tree, page: &'static str) {
    Effect::new(move |_| {
        let title = match tree.id.get() {
            Some(id) => {
                let sc = tree.scenario.get();
                if sc.is_empty() {
                    format!("{page} · tree {id} · simtree")
                } else {
                    format!("{sc} · tree {id} · {page} · simtree")
                }
            }
            None => format!("{page} · simtree"),
        };
        set_title(&title);
    });
}

/// "Tree N not found", instead of an empty canvas.
#[component]
pub(super) fn NotFound(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div id="not-found" class="empty-state">
            <h2>{move || ctx.tr("notFound.title")} " " {move || tree.id.get().map(|i| format!("#{i}"))}</h2>
            <p>{move || ctx.tr("notFound.body")}</p>
            <Link route=Route::Home>{move || ctx.tr("nav.home")}</Link>
        </div>
    }
}

/// A vertical splitter: dragging it resizes the side pane (remembered in localStorage).
#[component]
pub(super) fn Splitter(width: RwSignal<f64>) -> impl IntoView {
    let drag = StoredValue::new(false);
    let moves = window_event_listener(leptos::ev::mousemove, move |ev| {
        if drag.get_value() {
            let vw = web_sys::window()
                .and_then(|w| w.inner_width().ok())
                .and_then(|v| v.as_f64())
                .unwrap_or(1400.0);
            let w = (vw - f64::from(ev.client_x())).clamp(300.0, vw * 0.7);
            width.set(w);
        }
    });
    let ups = window_event_listener(leptos::ev::mouseup, move |_| {
        if drag.get_value() {
            drag.set_value(false);
            api::storage_set("devui:sideWidth", &format!("{:.0}", width.get_untracked()));
        }
    });
    on_cleanup(move || {
        moves.remove();
        ups.remove();
    });
    view! { <div class="splitter" title="Drag to resize" on:mousedown=move |ev| { ev.prevent_default(); drag.set_value(true) }></div> }
}

pub(super) fn side_width() -> RwSignal<f64> {
    RwSignal::new(
        api::storage_get("devui:sideWidth")
            .and_then(|s| s.parse().ok())
            .unwrap_or(440.0),
    )
}

pub(super) async fn fetch_node(tree: u64, node: u64) -> Result<NodeView, ApiError> {
    let events = api::sim_events(tree, node).await?;
    let state = api::sim_state(tree, node).await?;
    Ok(NodeView::from_rest(node, events, &state))
}

/// The kind-specific view of the selected node, re-read when it changes or its run finishes.
pub(super) fn node_view_signal(tree: Tree) -> RwSignal<Option<KindView>> {
    let view = RwSignal::new(None::<KindView>);
    Effect::new(move |_| {
        tree.last_msg.track();
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            let v = api::node_view(t, n).await.ok();
            if tree.selected.get_untracked() == Some(n) {
                view.set(v);
            }
        });
    });
    view
}
