//! The graph toolbar's edge-type filter: dims what sweeps and explorations made (their edges and
//! every node below them), so the hand-made branches stand out in a tree a search filled. The
//! same rule as the server's `GET …/graph?edges=…` ([`simtree_shared::edges`]).

use std::collections::HashSet;

use leptos::prelude::*;
use simtree_shared::EdgeType;
use simtree_shared::edges::{EdgeFilter, kept_nodes};

use crate::state::{Tree, ctx};

/// What the filter dims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EdgeView {
    #[default]
    All,
    NoJobs,
    NoExplore,
    NoSweep,
}

impl EdgeView {
    pub const ALL: [EdgeView; 4] = [EdgeView::All, EdgeView::NoJobs, EdgeView::NoExplore, EdgeView::NoSweep];

    pub fn code(self) -> &'static str {
        match self {
            EdgeView::All => "all",
            EdgeView::NoJobs => "no-jobs",
            EdgeView::NoExplore => "no-explore",
            EdgeView::NoSweep => "no-sweep",
        }
    }

    fn key(self) -> &'static str {
        match self {
            EdgeView::All => "graph.edgesAll",
            EdgeView::NoJobs => "graph.edgesNoJobs",
            EdgeView::NoExplore => "graph.edgesNoExplore",
            EdgeView::NoSweep => "graph.edgesNoSweep",
        }
    }

    fn hidden(self) -> &'static [EdgeType] {
        match self {
            EdgeView::All => &[],
            EdgeView::NoJobs => &[EdgeType::Sweep, EdgeType::Explore],
            EdgeView::NoExplore => &[EdgeType::Explore],
            EdgeView::NoSweep => &[EdgeType::Sweep],
        }
    }
}

/// The nodes `view` dims in `tree`'s graph: those reached only through a hidden edge type.
pub fn dimmed(tree: Tree, view: RwSignal<EdgeView>) -> Memo<HashSet<u64>> {
    Memo::new(move |_| {
        let hidden = view.get().hidden();
        if hidden.is_empty() {
            return HashSet::new();
        }
        let keep = EdgeFilter::all_but(hidden);
        tree.graph.with(|g| {
            let kept = kept_nodes(g.root, &g.edges, |t| keep.keeps(t));
            g.nodes.keys().copied().filter(|n| !kept.contains(n)).collect()
        })
    })
}

#[component]
pub(super) fn EdgeFilterSelect(view: RwSignal<EdgeView>) -> impl IntoView {
    let ctx = ctx();
    view! {
        <select
            id="edge-filter"
            title=move || ctx.tr("graph.edgeFilter")
            prop:value=move || view.get().code()
            on:change=move |ev| {
                let v = event_target_value(&ev);
                view.set(EdgeView::ALL.into_iter().find(|e| e.code() == v).unwrap_or_default());
            }
        >
            {EdgeView::ALL
                .into_iter()
                .map(|e| view! { <option value=e.code() selected=move || view.get() == e>{move || ctx.tr(e.key())}</option> })
                .collect_view()}
        </select>
    }
}
