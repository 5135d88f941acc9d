//! The Studio page: graph and ops | the selected node's events, live over the node socket |
//! its agents; and its tree picker.

use leptos::prelude::*;
use simtree_shared::TreeMsg;

use super::agents::AgentsPanel;
use super::common::{NotFound, fetch_node, follow_address, node_view_signal, title_effect};
use super::create::CreatePanel;
use super::details::NodeDetails;
use super::events::EventsPanel;
use super::inspector::Inspector;
use super::live_text::LiveReply;
use super::notebook::{FeedTabs, NotePanel};
use super::ops_panel::OpsPanel;
use super::tree_bar::TreeBar;
use crate::api::{self, Socket};
use crate::branch::BranchEditor;
use crate::graph::{GraphView, Legend, Stats};
use crate::model::NodeView;
use crate::route::Route;
use crate::state::{Conn, Tree, ctx};

/// The tree picker of the studio.
#[component]
pub(super) fn TreeSelect(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let trees = RwSignal::new(Vec::<(u64, String)>::new());
    let reload = move || {
        leptos::task::spawn_local(async move {
            if let Ok(list) = api::trees().await {
                trees.set(list.into_iter().map(|t| (t.id, t.name)).collect());
            }
        })
    };
    reload();
    view! {
        <section class="panel">
            <h3>{move || ctx.tr("studio.selectTree")}</h3>
            <select
                id="tree-select"
                on:focus=move |_| reload()
                on:change=move |ev| {
                    if let Ok(id) = event_target_value(&ev).parse::<u64>() {
                        ctx.navigate(Route::Studio(Some(id)));
                    }
                }
                prop:value=move || tree.id.get().map(|i| i.to_string()).unwrap_or_default()
            >
                <option value="">"-"</option>
                <For
                    each=move || trees.get()
                    key=|t| t.clone()
                    children=move |(t, name)| view! { <option value=t.to_string() selected=move || tree.id.get() == Some(t)>{format!("{name} (#{t})")}</option> }
                />
            </select>
        </section>
    }
}

#[component]
pub fn StudioPage(tree_id: Option<u64>) -> impl IntoView {
    let ctx = ctx();
    let tree = Tree::new();
    follow_address(tree, tree_id, Route::Studio);
    title_effect(tree, "Studio");
    let kind_view = node_view_signal(tree);
    let node_view = RwSignal::new(NodeView::default());
    let stick = RwSignal::new(true);
    let socket = StoredValue::new_local(None::<Socket>);
    on_cleanup(move || socket.set_value(None));
    // (Not while the node runs: its socket brings the entries, its run_finish the REST truth.)
    let refetch = move |t: u64, n: u64| {
        if tree.is_running(n) {
            return;
        }
        leptos::task::spawn_local(async move {
            if let Ok(v) = fetch_node(t, n).await
                && tree.selected.get_untracked() == Some(n)
            {
                node_view.set(v);
            }
        });
    };
    // Selection changed: REST truth, then live deltas over the node socket.
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        socket.set_value(None);
        node_view.set(NodeView { node: n, ..Default::default() });
        refetch(t, n);
        if let Ok(s) = api::watch_node(t, n, move |entry| node_view.update(|v| v.apply(entry))) {
            socket.set_value(Some(s));
        }
    });
    // attached / run_finish of the selected node: re-read it; deleted: clear.
    Effect::new(move |_| {
        let Some(msg) = tree.last_msg.get() else {
            return;
        };
        let (Some(t), Some(sel)) = (tree.id.get_untracked(), tree.selected.get_untracked()) else {
            return;
        };
        match msg {
            TreeMsg::Attached(a) if a.node == sel => refetch(t, sel),
            TreeMsg::RunFinish { node, .. } if node == sel => refetch(t, sel),
            TreeMsg::Deleted { node } if node == sel => node_view.set(NodeView::default()),
            _ => {}
        }
    });
    view! {
        <Show when=move || tree.conn.get() != Conn::NotFound fallback=move || view! { <NotFound tree /> }>
        <div class="page studio">
            <div class="col">
                <TreeBar tree />
                <div class="studio-graph"><GraphView tree /></div>
                <Stats tree />
                <Legend tree />
                <Inspector tree node_view=kind_view />
                <NotePanel tree />
                <OpsPanel tree node_view=kind_view details=false />
                <BranchEditor tree node_view=kind_view />
                <TreeSelect tree />
                <CreatePanel studio=true tree=tree />
            </div>
            <div class="col">
                <FeedTabs tree>
                    <EventsPanel view_state=node_view stick viewer=false />
                </FeedTabs>
                <LiveReply tree />
                <NodeDetails tree view_state=kind_view />
            </div>
            <div class="col">
                <h3>
                    {move || ctx.tr("studio.agents")}
                    <label class="stick">
                        <input id="stick-bottom" type="checkbox" prop:checked=move || stick.get() on:change=move |ev| stick.set(event_target_checked(&ev)) />
                        {move || ctx.tr("common.stickBottom")}
                    </label>
                </h3>
                <AgentsPanel view_state=node_view stick ask_in=tree.id />
            </div>
        </div>
        </Show>
    }
}
