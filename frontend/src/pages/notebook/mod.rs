//! The lab notebook's panels (issue #27): a node's title, note, tags and star
//! ([`NotePanel`]), the tree's description ([`TreeAbout`]), search of one tree that lights its
//! hits in the graph and walks between them ([`FindBar`]) and of every tree ([`GlobalSearch`]),
//! a node's model calls beside its feed ([`FeedTabs`]) and interviews of an agent at a node
//! ([`AskBox`]). The tag filter sits in the graph's toolbar (`graph/tags.rs`); what the graph
//! draws of the notes is [`crate::notebook`]'s.
//!
//! Every text here came from a user or a model (titles, notes, snippets, prompts, answers): it
//! is put into the page as text, never as markup, and a search snippet's highlight is cut out by
//! [`crate::notebook::snippet_pieces`] into separate text nodes.

mod annotate;
mod ask;
mod calls;
mod describe;
mod find;
mod global;

pub use annotate::NotePanel;
pub use ask::AskBox;
pub use calls::FeedTabs;
pub use describe::TreeAbout;
pub use find::FindBar;
pub use global::GlobalSearch;

use leptos::prelude::*;
use simtree_shared::HitKind;

use crate::notebook::{snippet_pieces, without_tags};

/// Hits asked for per page: the most the server gives, so a search lights up as many nodes as
/// it can at once.
const PAGE: u64 = 200;

/// The i18n key of where a hit's text is.
fn kind_key(kind: HitKind) -> &'static str {
    match kind {
        HitKind::Event => "notebook.hitEvent",
        HitKind::Memory => "notebook.hitMemory",
        HitKind::Title => "notebook.hitTitle",
        HitKind::Note => "notebook.hitNote",
        HitKind::Tag => "notebook.hitTag",
        HitKind::Ask => "notebook.hitAsk",
        HitKind::Carried => "notebook.hitCarried",
    }
}

/// A search field typed into `query`: Enter calls `enter`, Escape `escape`.
fn search_box(
    id: &'static str,
    hint: &'static str,
    query: RwSignal<String>,
    enter: impl Fn() + 'static,
    escape: impl Fn() + 'static,
) -> impl IntoView {
    let ctx = crate::state::ctx();
    view! {
        <input
            id=id
            type="search"
            placeholder=move || ctx.tr(hint)
            prop:value=move || query.get()
            on:input=move |ev| query.set(event_target_value(&ev))
            on:keydown=move |ev: web_sys::KeyboardEvent| match ev.key().as_str() {
                "Enter" => enter(),
                "Escape" => escape(),
                _ => {}
            }
        />
    }
}

/// A snippet as text, its match (only the query's own words) in a `<mark>`.
fn snippet_view(snippet: &str, query: &str) -> impl IntoView + use<> {
    let pieces = snippet_pieces(&without_tags(snippet), query);
    view! {
        <span class="snippet">
            {pieces
                .into_iter()
                .map(|(text, hit)| if hit { view! { <mark>{text}</mark> }.into_any() } else { text.into_any() })
                .collect_view()}
        </span>
    }
}
