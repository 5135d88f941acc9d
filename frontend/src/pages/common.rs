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

/// The page title names the tree ("council-run — simtree"); until its name is read, its id and
/// what it simulates.
pub(super) fn title_effect(tree: Tree, page: &'static str) {
    Effect::new(move |_| {
        let name = tree.name.get();
        let title = match tree.id.get() {
            Some(_) if !name.trim().is_empty() => format!("{} — simtree", name.trim()),
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

/// The node the page's address names (`?node=N`), if any.
pub(super) fn url_node() -> Option<u64> {
    let search = web_sys::window()?.location().search().ok()?;
    crate::route::node_param(&search)
}

/// Connects the page's tree (the route's, else the last one used) at the node its address names,
/// and keeps the address on the selection: a new selection is a history entry (the first one
/// replaces the address it came with), and back / forward select the node they return to.
pub(super) fn follow_address(tree: Tree, route_id: Option<u64>, page: fn(Option<u64>) -> Route) {
    if let Some(id) = initial_tree(route_id) {
        tree.connect(id, url_node());
    }
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        let Some(w) = web_sys::window() else { return };
        let loc = w.location();
        let route = page(Some(t));
        let path = loc.pathname().unwrap_or_default();
        let here = url_node();
        if here == Some(n) && path == route.href() {
            return;
        }
        let Ok(history) = w.history() else { return };
        let href = route.at_node(n);
        // The address the page opened with (no node, or another tree's) is replaced, not kept.
        let _ = if here.is_none() || path != route.href() {
            history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&href))
        } else {
            history.push_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&href))
        };
    });
    let pops = window_event_listener(leptos::ev::popstate, move |_| {
        if let Some(n) = url_node()
            && tree.selected.get_untracked() != Some(n)
            && tree.graph.with_untracked(|g| g.nodes.contains_key(&n))
        {
            tree.selected.set(Some(n));
        }
    });
    on_cleanup(move || pops.remove());
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
            let vw = web_sys::window().and_then(|w| w.inner_width().ok()).and_then(|v| v.as_f64()).unwrap_or(1400.0);
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
    RwSignal::new(api::storage_get("devui:sideWidth").and_then(|s| s.parse().ok()).unwrap_or(440.0))
}

pub(super) async fn fetch_node(tree: u64, node: u64) -> Result<NodeView, ApiError> {
    let events = api::sim_events(tree, node).await?;
    let state = api::sim_state(tree, node).await?;
    Ok(NodeView::from_rest(node, events, &state))
}

/// The kind-specific view of the selected node, re-read when it changes or its run finishes.
pub(super) fn node_view_signal(tree: Tree) -> RwSignal<Option<KindView>> {
    let view = RwSignal::new(None::<KindView>);
    let read_for = StoredValue::new(None::<(u64, u64)>);
    Effect::new(move |_| {
        tree.last_msg.track();
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        // Another node: the last view is not this one's, and nothing may show it as such while
        // this node's is read (a form's "now" would be the other node's).
        if read_for.get_value() != Some((t, n)) {
            read_for.set_value(Some((t, n)));
            view.set(None);
        }
        // A running node's view is read when its run finishes (no 409s while it runs).
        if tree.is_running(n) {
            return;
        }
        leptos::task::spawn_local(async move {
            let v = api::node_view(t, n).await.ok();
            if tree.selected.get_untracked() == Some(n) {
                view.set(v);
            }
        });
    });
    view
}
