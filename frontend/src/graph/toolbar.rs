//! The graph's toolbar: search by id or op text (Enter jumps to the next match), fold or unfold
//! the selected subtree, top-down or left-to-right, the tag filter (`tags.rs`), the edge-type
//! filter (`edge_filter.rs`), the keyboard
//! map's help, and the zoom and fit buttons.

use leptos::prelude::*;

use super::edge_filter::EdgeFilterSelect;
use super::keys::KEYS;
use super::state::GraphState;
use super::tags::TagFilter;
use crate::layout::Direction;

#[component]
pub(super) fn Toolbar(g: GraphState) -> impl IntoView {
    let GraphState { tree, ctx, collapsed, direction, search_box, search_note, help, edge_view, .. } = g;
    // How many levels "collapse to depth" leaves open.
    let depth = RwSignal::new("2".to_string());
    view! {
                <div class="graph-tools">
                    <input
                        id="graph-search"
                        type="search"
                        node_ref=search_box
                        placeholder=move || ctx.tr("graph.search")
                        on:keydown=move |ev: web_sys::KeyboardEvent| {
                            if ev.key() == "Enter" {
                                g.search(event_target_value(&ev));
                            } else if ev.key() == "Escape"
                                && let Some(el) = search_box.get_untracked()
                            {
                                let _ = el.blur();
                            }
                        }
                        on:input=move |_| search_note.set(String::new())
                    />
                    <span id="search-note" class="muted">{move || search_note.get()}</span>
                    <button
                        id="collapse-btn"
                        title=move || ctx.tr("keys.collapse")
                        disabled=move || tree.selected.get().is_none_or(|n| tree.graph.with(|g| g.is_leaf(n)))
                        on:click=move |_| g.toggle_collapse()
                    >
                        {move || if tree.selected.get().is_some_and(|n| collapsed.with(|c| c.contains(&n))) { "⊞" } else { "⊟" }}
                    </button>
                    <input
                        id="depth-input"
                        class="depth"
                        type="number"
                        min="1"
                        title=move || ctx.tr("graph.depth")
                        prop:value=move || depth.get()
                        on:input=move |ev| depth.set(event_target_value(&ev))
                    />
                    <button
                        id="collapse-depth-btn"
                        title=move || ctx.tr("graph.collapseDepth")
                        on:click=move |_| g.collapse_to(crate::model::parse_count(&depth.get_untracked(), 2))
                    >
                        "≤"
                    </button>
                    <button id="expand-all-btn" title=move || ctx.tr("graph.expandAll") on:click=move |_| g.expand_all()>
                        "⊞⊞"
                    </button>
                    <button
                        id="direction-btn"
                        title=move || ctx.tr("graph.direction")
                        data-direction=move || direction.get().code()
                        on:click=move |_| g.flip_direction()
                    >
                        {move || if direction.get() == Direction::Down { "⇄" } else { "⇅" }}
                    </button>
                    <TagFilter tree />
                    <EdgeFilterSelect view=edge_view />
                    <button id="help-btn" title=move || ctx.tr("keys.help") on:click=move |_| help.update(|h| *h = !*h)>"?"</button>
                </div>
                <Show when=move || help.get()>
                    <div id="graph-help" class="graph-help" role="dialog">
                        <h4>{move || ctx.tr("graph.keys")}</h4>
                        <dl>
                            {KEYS
                                .iter()
                                .map(|&(key, what)| view! { <dt><kbd>{key}</kbd></dt><dd>{move || ctx.tr(what)}</dd> })
                                .collect_view()}
                        </dl>
                        <button id="help-close" on:click=move |_| help.set(false)>{move || ctx.tr("common.close")}</button>
                    </div>
                </Show>
                <div class="zoom-controls">
                    <button id="zoom-in" title=move || ctx.tr("graph.zoomIn") on:click=move |_| g.zoom(1.25)>"+"</button>
                    <button id="zoom-out" title=move || ctx.tr("graph.zoomOut") on:click=move |_| g.zoom(0.8)>"−"</button>
                    // Drawn, not a character: few system fonts have "⤢", and looking for one that
                    // does cost a first load 20–70 ms of the page's first layout.
                    <button id="fit" title=move || ctx.tr("graph.fit") on:click=move |_| g.fit_now()>
                        <svg class="icon" viewBox="0 0 16 16" aria-hidden="true">
                            <path d="M2 6V2h4M10 2h4v4M14 10v4h-4M6 14H2v-4" fill="none" stroke="currentColor" stroke-width="1.6"></path>
                        </svg>
                    </button>
                </div>
    }
}
