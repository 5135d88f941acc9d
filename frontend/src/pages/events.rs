//! The events list of a node (Studio and the viewer), kept scrolled to the bottom on request.

use leptos::html;
use leptos::prelude::*;

use crate::model::{EventLine, NodeView, event_line, viewer_line};
use crate::state::ctx;

pub(super) fn event_view(line: EventLine) -> impl IntoView {
    view! {
        <div class=format!("ev ev-{}", line.kind)>
            <span class="label">{line.label}</span>
            " "
            {line.agent.map(|a| view! { <b>{a}": "</b> })}
            {line.text}
        </div>
    }
}

/// Scrolls an element to its bottom after a change, while `stick` is on. The scroll waits for
/// the next frame: the effect runs before the new lines are in the DOM (on the first load the
/// whole log arrives at once, and scrolling then would stop short).
pub(super) fn stick_to_bottom<T>(stick: RwSignal<bool>, el: NodeRef<html::Div>, track: impl Fn() -> T + 'static) {
    Effect::new(move |_| {
        track();
        if stick.get() {
            request_animation_frame(move || {
                if let Some(el) = el.get_untracked() {
                    el.set_scroll_top(el.scroll_height());
                }
            });
        }
    });
}

/// The events list of a node.
#[component]
pub(super) fn EventsPanel(view_state: RwSignal<NodeView>, stick: RwSignal<bool>, viewer: bool) -> impl IntoView {
    let ctx = ctx();
    let el = NodeRef::<html::Div>::new();
    stick_to_bottom(stick, el, move || view_state.with(|v| v.events.len()));
    let lines = move || {
        view_state.with(|v| {
            v.events.iter().filter_map(|e| if viewer { viewer_line(e) } else { event_line(e) }).collect::<Vec<_>>()
        })
    };
    view! {
        <div id="events" class="events scroll" node_ref=el>
            {move || {
                let ls = lines();
                if ls.is_empty() {
                    view! { <p class="muted">{ctx.tr("common.noEvents")}</p> }.into_any()
                } else {
                    ls.into_iter().map(event_view).collect_view().into_any()
                }
            }}
        </div>
    }
}
