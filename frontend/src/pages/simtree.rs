//! The SimTree page: the graph pane beside the inspector, ops, branch editor, compare, sweeps,
//! explorations, node details, data and create panels.

use leptos::prelude::*;

use super::common::{NotFound, Splitter, follow_address, node_view_signal, side_width, title_effect};
use super::compare_panel::ComparePanel;
use super::create::CreatePanel;
use super::details::NodeDetails;
use super::inspector::Inspector;
use super::live_text::LiveReply;
use super::notebook::{FindBar, NotePanel, TreeAbout};
use super::ops_panel::OpsPanel;
use super::tree_bar::TreeBar;
use crate::branch::BranchEditor;
use crate::graph::{GraphView, Legend, Stats};
use crate::route::Route;
use crate::state::{Conn, Tree};

#[component]
pub fn SimTreePage(tree_id: Option<u64>) -> impl IntoView {
    let tree = Tree::new();
    follow_address(tree, tree_id, Route::SimTree);
    title_effect(tree, "SimTree");
    let node_view = node_view_signal(tree);
    let width = side_width();
    view! {
        <Show when=move || tree.conn.get() != Conn::NotFound fallback=move || view! { <NotFound tree /> }>
            // The side pane's width is the splitter's live value: the one style set inline.
            <div class="page simtree workspace" style=move || format!("--side:{:.0}px", width.get())>
                <div class="graph-pane">
                    <TreeBar tree />
                    <FindBar tree />
                    <GraphView tree />
                    <div class="graph-foot">
                        <Stats tree />
                        <Legend tree />
                    </div>
                </div>
                <Splitter width />
                <div class="side">
                    // Made once the tree is drawn: on a first load they cost as much as the graph.
                    <Show when=move || tree.shown.get()>
                        // No tree open: creating one comes first.
                        <Show when=move || tree.id.get().is_none()>
                            <CreatePanel studio=false tree=tree />
                        </Show>
                        <Inspector tree node_view />
                        <NotePanel tree />
                        <super::scene_about::ScenePanel tree node_view />
                        <LiveReply tree />
                        <OpsPanel tree node_view details=true />
                        <BranchEditor tree node_view />
                        <ComparePanel tree />
                        <crate::sweep_view::SweepPanel tree />
                        <crate::explore_view::ExplorePanel tree />
                        <NodeDetails tree view_state=node_view />
                        <crate::data::DataPanel tree node_view />
                        <TreeAbout tree />
                        <Show when=move || tree.id.get().is_some()>
                            <CreatePanel studio=false tree=tree />
                        </Show>
                    </Show>
                </div>
            </div>
        </Show>
    }
}
