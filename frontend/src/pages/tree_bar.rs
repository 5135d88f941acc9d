//! The bar above the graph: the open tree, its scenario, LLM usage, the connection; under it the
//! tree's provenance line (the server's, as `GET /devui/simtree/{tree}` states it).

use leptos::prelude::*;

use simtree_shared::{PromptLayout, TreeInfo};

use crate::api;
use crate::graph::UsageLine;
use crate::route::{Route, Start};
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
    // What the tree was made from, as its provenance names it: the scenario (at its library
    // version) and the dataset it trades on — not an episode's or a model's internal id — and
    // a prompt layout other than the default.
    let info = tree_info_signal(tree);
    let chip = move || {
        info.with(|i| {
            let i = i.as_ref()?;
            let p = i.provenance.as_ref()?;
            let mut c = p.scenario.clone();
            if let Some(v) = p.version {
                c.push_str(&format!("@{v}"));
            }
            if let Some(d) = &p.dataset {
                c.push_str(&format!(" · {} {d}", ctx.tr("tree.dataset")));
            }
            if i.prompt_layout == Some(PromptLayout::StateLast) {
                c.push_str(&format!(" · {}", ctx.tr("tree.stateLast")));
            }
            Some(c)
        })
    };
    view! {
        <div class="tree-bar">
            <span id="tree-name" class="tree-name">
                {move || match (tree.id.get(), tree.name.get()) {
                    (None, _) => ctx.tr("tree.none").to_string(),
                    (Some(i), name) if name.is_empty() => format!("{} {i}", ctx.tr("tree.label")),
                    (Some(i), name) => format!("{name} (#{i})"),
                }}
                {move || chip().map(|c| view! { <span id="tree-chip" class="chip">{c}</span> })}
                {move || tree.id.get().map(open_document)}
            </span>
            <span class="spacer"></span>
            <UsageLine tree />
            <span id="conn" class=move || format!("conn {}", conn().0)>{move || conn().1}</span>
            <ProvenanceLine info />
        </div>
    }
}

/// A link to the New page holding the document tree `t` was made from (`/new?tree=N`), to edit
/// a copy or make another tree of it.
fn open_document(t: u64) -> impl IntoView {
    let ctx = ctx();
    let route = Route::New { kind: None, from: Some(Start::Tree(t)) };
    view! {
        <a id="open-document" class="chip-link" href=route.href() on:click=move |ev: web_sys::MouseEvent| {
            ev.prevent_default();
            ctx.navigate(route.clone());
        }>{move || ctx.tr("tree.openDocument")}</a>
    }
}

/// The open tree's `GET /devui/simtree/{tree}` (its provenance and scene), read again whenever
/// another tree opens.
pub(super) fn tree_info_signal(tree: Tree) -> RwSignal<Option<TreeInfo>> {
    let info = RwSignal::new(None::<TreeInfo>);
    Effect::new(move |_| {
        let Some(t) = tree.id.get() else {
            info.set(None);
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(got) = api::tree_info(t).await
                && tree.id.get_untracked() == Some(t)
            {
                info.try_set(Some(got));
            }
        });
    });
    info
}

/// The open tree's provenance on one line (scenario@version and document hash, dataset, player,
/// seed, prices, simtree), selected whole on a click so it can be copied into notes.
#[component]
fn ProvenanceLine(info: RwSignal<Option<TreeInfo>>) -> impl IntoView {
    let line =
        Memo::new(move |_| info.with(|i| i.as_ref().and_then(|i| i.provenance.as_ref()).map(|p| p.line.clone())));
    view! {
        <Show when=move || line.get().is_some()>
            <code id="provenance" class="provenance" title="provenance: select to copy">
                {move || line.get().unwrap_or_default()}
            </code>
        </Show>
    }
}
