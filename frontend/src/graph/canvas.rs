//! The canvas layer of the graph, for trees above [`super::DENSE`] laid-out nodes: the scene
//! ([`super::paint`]) rebuilt once per change of the layout or the graph, painted at most once
//! per animation frame however many input events arrived, in the theme's colours; and the
//! tooltip of the hovered node (the canvas has no elements to carry one).

use leptos::html;
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use super::node_summary;
use super::paint::{self, Frame, Palette, Scene};
use super::state::GraphState;

#[component]
pub(super) fn CanvasLayer(g: GraphState) -> impl IntoView {
    let GraphState { tree, ctx, layout, view_t, size, hover, on_canvas, .. } = g;
    let canvas = NodeRef::<html::Canvas>::new();
    // at most one paint per animation frame.
    let palette = RwSignal::new(Palette::read());
    Effect::new(move |prev: Option<()>| {
        if ctx.theme.get().is_none() {
            ctx.system_dark.track();
        }
        if prev.is_some() {
            palette.set(Palette::read());
        }
    });
    let scene = StoredValue::new_local(None::<Scene>);
    let frame_pending = StoredValue::new(false);
    // Bumped by a frame that shows a running node: its pulse needs the next frame painted too
    // (and only then: nothing is repainted while nothing moves).
    let pulse_tick = RwSignal::new(0_u64);
    let in_view = StoredValue::new(None::<usize>);
    let drawn_marks = StoredValue::new(String::new());
    let paint = move || {
        frame_pending.set_value(false);
        let Some(el) = canvas.get_untracked() else { return };
        if !on_canvas.get_untracked() {
            return;
        }
        let started = window().performance().map(|p| p.now());
        let (width, height) = size.get_untracked();
        let Some((c2d, dpr)) = paint::context(&el, width, height) else {
            return;
        };
        layout.with_untracked(|l| {
            tree.graph.with_untracked(|g| {
                let fresh = scene.with_value(Option::is_none);
                if fresh {
                    let built = Scene::build(l, g);
                    let _ = el.set_attribute("data-nodes", &built.count.to_string());
                    scene.set_value(Some(built));
                    crate::mark("scene");
                }
                let tag = tree.tag.get_untracked();
                let drawn = tree.marks.with_untracked(|marks| {
                    tree.lit.with_untracked(|lit| {
                        let frame = Frame {
                            t: view_t.get_untracked(),
                            width,
                            height,
                            selected: tree.selected.get_untracked(),
                            compare: tree.compare_with.get_untracked(),
                            now: started.unwrap_or_default(),
                            lang: ctx.lang.get_untracked(),
                            marks,
                            lit,
                            tag: tag.as_deref(),
                        };
                        palette.with_untracked(|p| {
                            scene.with_value(|s| s.as_ref().map(|s| paint::draw(&c2d, dpr, s, p, l, g, &frame)))
                        })
                    })
                });
                if fresh {
                    crate::mark("painted");
                }
                let drawn = drawn.unwrap_or_default();
                // How many nodes the view shows (tests read it: the canvas has no node elements).
                if in_view.get_value() != Some(drawn.in_view) {
                    in_view.set_value(Some(drawn.in_view));
                    let _ = el.set_attribute("data-in-view", &drawn.in_view.to_string());
                }
                // The notebook's marks it drew, likewise (titles, stars, hits, dimmed nodes).
                let text = drawn.marks_text();
                if drawn_marks.with_value(|m| *m != text) {
                    let _ = el.set_attribute("data-marks", &text);
                    drawn_marks.set_value(text);
                }
                if drawn.pulsing {
                    pulse_tick.update(|t| *t += 1);
                }
            })
        });
        // The benchmark reads how long the last paint took (script time, before rasterising).
        if let (Some(t0), Some(p)) = (started, window().performance()) {
            let _ = js_sys::Reflect::set(&window(), &"simtreeGraphPaintMs".into(), &(p.now() - t0).into());
        }
    };
    let schedule = move || {
        if frame_pending.get_value() {
            return;
        }
        frame_pending.set_value(true);
        let cb = Closure::once_into_js(paint);
        if window().request_animation_frame(cb.unchecked_ref()).is_err() {
            frame_pending.set_value(false);
        }
    };
    Effect::new(move |_| {
        layout.with(|_| ());
        tree.graph.track();
        scene.set_value(None);
        schedule();
    });
    Effect::new(move |_| {
        view_t.track();
        size.track();
        tree.selected.track();
        tree.compare_with.track();
        palette.track();
        pulse_tick.track();
        // The op labels under the nodes are in the page's language; titles and stars are the
        // notebook's.
        ctx.lang.track();
        tree.marks.track();
        tree.lit.track();
        tree.tag.track();
        if on_canvas.get() {
            schedule();
        }
    });

    view! {
            <canvas class="graph-canvas" node_ref=canvas role="img" aria-label=move || ctx.tr("graph.canvas") style:display=move || if on_canvas.get() { "block" } else { "none" }></canvas>
            {move || hover.get().map(|(id, x, y)| view! {
                <div class="graph-tip" style=format!("left:{:.0}px;top:{:.0}px", x + 14.0, y + 14.0)>
                    {tree.graph.with_untracked(|g| node_summary(g, id, ctx.lang.get_untracked()))}
                </div>
            })}
    }
}
