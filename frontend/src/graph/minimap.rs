//! The minimap: every node of the tree as one dot (one per minimap pixel), the viewport as a
//! rectangle; clicking or dragging centres the main view there.

use std::collections::HashSet;

use leptos::prelude::*;

use super::state::GraphState;
use super::{MH, MW};
use crate::layout::ViewTransform;

/// An overview of the whole tree: every node as one dot in a single path, the viewport as a
/// rectangle; clicking or dragging centres the main view there.
#[component]
pub(super) fn Minimap(g: GraphState) -> impl IntoView {
    let GraphState { layout, view_t, size, .. } = g;
    let mini = Memo::new(move |_| layout.with(|l| ViewTransform::fit(l, MW, MH)));
    // One dot per minimap pixel: the frame moves on every pan frame and the browser repaints the
    // minimap under it, so 20,000 stacked dots there cost 100 ms a frame; a few hundred do not.
    let dots = Memo::new(move |_| {
        let t = mini.get();
        layout.with(|l| {
            let mut seen = HashSet::new();
            let mut d = String::new();
            for &(x, y) in l.pos.values() {
                let (mx, my) = ((x * t.scale + t.tx).round(), (y * t.scale + t.ty).round());
                if seen.insert((mx as i32, my as i32)) {
                    d.push_str(&format!("M{mx} {my}h0"));
                }
            }
            d
        })
    });
    let frame = move || {
        let m = mini.get();
        let (w, h) = size.get();
        let (x0, y0, x1, y1) = view_t.get().world_view(w, h);
        (x0 * m.scale + m.tx, y0 * m.scale + m.ty, (x1 - x0) * m.scale, (y1 - y0) * m.scale)
    };
    let dragging = StoredValue::new(false);
    let centre = move |ev: &web_sys::MouseEvent| {
        let m = mini.get_untracked();
        let wx = (f64::from(ev.offset_x()) - m.tx) / m.scale;
        let wy = (f64::from(ev.offset_y()) - m.ty) / m.scale;
        let (w, h) = size.get_untracked();
        view_t.update(|t| *t = t.centre_on(wx, wy, w, h));
    };
    view! {
        <svg
            class="minimap"
            width=MW
            height=MH
            on:mousedown=move |ev: web_sys::MouseEvent| {
                ev.stop_propagation();
                dragging.set_value(true);
                centre(&ev);
            }
            on:mousemove=move |ev: web_sys::MouseEvent| if dragging.get_value() { centre(&ev) }
            on:mouseup=move |_| dragging.set_value(false)
            on:mouseleave=move |_| dragging.set_value(false)
            on:click=move |ev: web_sys::MouseEvent| ev.stop_propagation()
        >
            <rect class="minimap-bg" width="100%" height="100%"></rect>
            <path class="minimap-dots" d=move || dots.get()></path>
            <rect
                class="minimap-frame"
                x=move || frame().0
                y=move || frame().1
                width=move || frame().2.max(2.0)
                height=move || frame().3.max(2.0)
            ></rect>
        </svg>
    }
}
