//! The bar above the graph: the open tree, its scenario, LLM usage, the connection.

use leptos::prelude::*;

use crate::graph::UsageLine;
use crate::state::{Conn, Tree, ctx};

/// The bar above the graph: which tree is open, its scenario, the connection.
#[component]
pub(super) fn TreeBar(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let conn = move || match tree.conn.get() {
        Conn::Live => ("live", ctx.tr("conn.live")),
        Conn::Connecting => ("connecting", ctx.tr("conn.connecting")),
        Conn::Lost => ("lost", ctx.tr("conn.lost")),
        Conn::NotFound => ("lost", ctx.tr("notFound.title")),
    };
    view! {
        <div class="tree-bar">
            <span id="tree-name" class="tree-name">
                {move || match (tree.id.get(), tree.name.get()) {
                    (None, _) => ctx.tr("tree.none").to_string(),
                    (Some(i), name) if name.is_empty() => format!("{} {i}", ctx.tr("tree.label")),
                    (Some(i), name) => format!("{name} (#{i})"),
                }}
                <Show when=move || !tree.scenario.get().is_empty()>
                    <span class="chip">{move || tree.scenario.get()}</span>
                </Show>
            </span>
            <span class="spacer"></span>
            <UsageLine tree />
            <span id="conn" class=move || format!("conn {}", conn().0)>{move || conn().1}</span>
        </div>
    }
}
