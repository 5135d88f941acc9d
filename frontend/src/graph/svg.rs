//! The SVG layer of the graph, for trees of up to [`super::DENSE`] laid-out nodes: one element
//! per visible node (culled to the view), edges coloured by their op, sweep fans, progress bars
//! of running nodes, level of detail (ids once there is room, op labels when close). It also
//! takes the pointer for both layers: drag to pan, wheel and double-click to zoom, click to
//! select (shift-click to compare), hover for the canvas's tooltip.

use std::collections::HashSet;

use leptos::prelude::*;

use super::state::GraphState;
use super::{dense, node_class, node_summary};
use crate::layout::{COL, LABEL_GAP, NODE, label_room};
use crate::model::edge_name;
use crate::notebook::lens_classes;
use crate::ops::{edge_style, fit_label};

/// The screen size of an op label's type and of a title's (bold), as `style.css` sets them.
pub(super) const OP_FONT: f64 = 10.0;
pub(super) const TITLE_FONT: f64 = 11.0;

#[component]
pub(super) fn SvgLayer(g: GraphState) -> impl IntoView {
    let GraphState { tree, ctx, layout, view_t, size, drag, moved, hover, on_canvas, dimmed, .. } = g;
    let parents: Memo<HashSet<u64>> = Memo::new(move |_| tree.graph.with(|g| g.edges.iter().map(|e| e.from).collect()));
    // tree does not even recompute it.
    let visible = Memo::new(move |_| {
        if layout.with(dense) {
            return Vec::new();
        }
        let t = view_t.get();
        let (w, h) = size.get();
        layout.with(|l| l.visible(t.world_view(w, h)))
    });
    let visible_edges = Memo::new(move |_| {
        let shown: HashSet<u64> = visible.get().into_iter().collect();
        layout.with(|l| {
            tree.graph.with(|g| {
                g.edges
                    .iter()
                    .filter(|e| {
                        (shown.contains(&e.from) || shown.contains(&e.to))
                            && l.pos.contains_key(&e.from)
                            && l.pos.contains_key(&e.to)
                    })
                    .map(|e| (e.from, e.to, edge_style(e.kind, g.ops.get(&e.to).map(Vec::as_slice)), e.kind))
                    .collect::<Vec<_>>()
            })
        })
    });
    let scale = Memo::new(move |_| view_t.with(|t| t.scale));
    // Each shown node's room for its label (world units), so that labels never overlap.
    let room = Memo::new(move |_| {
        let shown = visible.get();
        layout.with(|l| label_room(shown.iter().filter_map(|id| Some((*id, *l.pos.get(id)?)))))
    });
    let room_px = move |id: u64| room.with(|r| r.get(&id).copied()).unwrap_or(f64::INFINITY) * scale.get() - LABEL_GAP;
    // Level of detail: ids once neighbours are ~26 px apart, op labels once nodes are full size.
    let show_ids = Memo::new(move |_| COL * scale.get() >= 26.0);
    let show_ops = Memo::new(move |_| scale.get() >= 0.9);
    let lod_style = move || {
        let s = scale.get();
        // Nodes never shrink below a 4-px radius on screen.
        format!("--s:{s};--r:{}px", (NODE / 2.0).max(4.0 / s))
    };

    // The canvas: theme colours read once per theme change (the toggle's, or the system's while
    // the theme follows it), the scene rebuilt once per change of the layout or the graph, and
    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        // Lines (Firefox) are ~16 px; a mouse notch of 100 px zooms by about 1.35.
        let dy = if ev.delta_mode() == 1 { ev.delta_y() * 16.0 } else { ev.delta_y() };
        let factor = (-dy * 0.003).exp().clamp(0.5, 2.0);
        let (x, y) = g.local(ev.client_x(), ev.client_y());
        view_t.update(|t| *t = t.zoom_at(x, y, factor));
    };
    let pick_at = move |ev: &web_sys::MouseEvent| {
        let (x, y) = g.local(ev.client_x(), ev.client_y());
        if let Some(id) = g.node_at(x, y) {
            g.pick(id, ev.shift_key());
        }
    };

    let node = move |id: u64| {
        let pos = move || layout.with(|l| l.pos.get(&id).copied().unwrap_or((0.0, 0.0)));
        let hides = move || layout.with(|l| l.hidden.get(&id).copied());
        let class = move || {
            let leaf = !parents.with(|p| p.contains(&id));
            let (sel, cmp) = (tree.selected.get() == Some(id), tree.compare_with.get() == Some(id));
            let mut c = tree.graph.with(|g| node_class(g, id, sel, cmp, leaf));
            if hides().is_some() {
                c.push_str(" collapsed");
            }
            let lit = tree.lit.with(|l| l.contains(&id));
            c.push_str(&tree.tag.with(|t| tree.marks.with(|m| lens_classes(m, id, lit, t.as_deref()))));
            if dimmed.with(|d| d.contains(&id)) && !c.contains(" dim") {
                c.push_str(" dim");
            }
            c
        };
        // A user's title names the node: it is the label (the op stays in the tooltip).
        let title = move || tree.marks.with(|m| m.title(id).map(str::to_string));
        let tip = move || {
            let made = tree.graph.with(|g| node_summary(g, id, ctx.lang.get()));
            title().map_or(made.clone(), |t| format!("{t}\n{made}"))
        };
        let op_text = move || {
            tree.graph
                .with(|g| {
                    (g.root != id)
                        .then(|| g.made_label(id, ctx.lang.get()))
                        .flatten()
                        .and_then(|l| fit_label(&l, 22, room_px(id), OP_FONT))
                })
                .unwrap_or_default()
        };
        view! {
            <g
                class=class
                data-id=id.to_string()
                transform=move || { let (x, y) = pos(); format!("translate({x:.1},{y:.1})") }
                on:click=move |ev: web_sys::MouseEvent| {
                    ev.stop_propagation();
                    if moved.get_value() < 4.0 {
                        g.pick(id, ev.shift_key());
                    }
                }
            >
                <title>{tip}</title>
                <circle r=NODE / 2.0></circle>
                <Show when=move || show_ids.get()>
                    <text class="nid" text-anchor="middle" dy="0.35em">{id}</text>
                </Show>
                <Show
                    when=move || title().is_none()
                    fallback=move || view! {
                        <Show when=move || show_ids.get()>
                            <text class="ntitle" text-anchor="middle" y=NODE / 2.0 + 4.0 dominant-baseline="hanging">
                                {move || title().and_then(|t| fit_label(&t, 28, room_px(id), TITLE_FONT))}
                            </text>
                        </Show>
                    }
                >
                    <Show when=move || show_ops.get()>
                        <text class="nop" text-anchor="middle" y=NODE / 2.0 + 4.0 dominant-baseline="hanging">{op_text}</text>
                    </Show>
                </Show>
                <Show when=move || tree.marks.with(|m| m.starred(id))>
                    <text class="star" x=-NODE / 2.0 - 2.0 y=-NODE / 2.0 + 2.0 text-anchor="middle">"★"</text>
                </Show>
                <Show when=move || hides().is_some()>
                    <text class="badge" x=NODE / 2.0 + 4.0 dy="0.35em">{move || format!("+{}", hides().unwrap_or(0))}</text>
                </Show>
            </g>
        }
    };

    // Progress of running nodes: a bar above the node and "turn i/N" once ids fit. Drawn apart
    // from the nodes (the canvas has no node elements) and only for the few nodes that run.
    let running = move || tree.progress.with(|p| p.0.keys().copied().collect::<Vec<_>>());
    let progress_mark = move |id: u64| {
        let at = move || layout.with(|l| l.pos.get(&id).copied());
        let half = NODE / 2.0;
        view! {
            <Show when=move || at().is_some() && tree.progress_of(id).is_some()>
                <g
                    class="progress"
                    data-id=id.to_string()
                    transform=move || { let (x, y) = at().unwrap_or_default(); format!("translate({x:.1},{y:.1})") }
                >
                    <rect x=-half y=-half - 9.0 width=NODE height="4" rx="2" style="fill: var(--border, #ccc)"></rect>
                    <rect
                        class="bar"
                        x=-half
                        y=-half - 9.0
                        height="4"
                        rx="2"
                        width=move || tree.progress_of(id).map_or(0.0, |(_, t)| NODE * t.fraction())
                        style="fill: var(--accent, #1e4976)"
                    ></rect>
                    <Show when=move || show_ids.get()>
                        <text class="nprog" text-anchor="middle" y=-half - 12.0 style="font-size: 10px; fill: var(--accent, #1e4976)">
                            {move || tree.progress_of(id).map(|(label, _)| label)}
                        </text>
                    </Show>
                </g>
            </Show>
        }
    };

    view! {
            <svg
                id="graph"
                width=move || size.get().0
                height=move || size.get().1
                on:wheel=on_wheel
                on:mousedown=move |ev: web_sys::MouseEvent| {
                    drag.set_value(Some((f64::from(ev.client_x()), f64::from(ev.client_y()))));
                    moved.set_value(0.0);
                    hover.set(None);
                }
                on:mouseup=move |_| drag.set_value(None)
                on:mouseleave=move |_| {
                    drag.set_value(None);
                    hover.set(None);
                }
                on:mousemove=move |ev: web_sys::MouseEvent| {
                    if let Some((x, y)) = drag.get_value() {
                        let (cx, cy) = (f64::from(ev.client_x()), f64::from(ev.client_y()));
                        moved.set_value(moved.get_value() + (cx - x).abs() + (cy - y).abs());
                        drag.set_value(Some((cx, cy)));
                        view_t.update(|t| *t = t.pan(cx - x, cy - y));
                    } else if on_canvas.get_untracked() {
                        let (x, y) = g.local(ev.client_x(), ev.client_y());
                        let now = g.node_at(x, y).map(|id| (id, x, y));
                        if now.map(|h| h.0) != hover.get_untracked().map(|h| h.0) {
                            hover.set(now);
                        }
                    }
                }
                on:click=move |ev: web_sys::MouseEvent| {
                    if moved.get_value() < 4.0 {
                        pick_at(&ev);
                    }
                }
                on:dblclick=move |ev: web_sys::MouseEvent| {
                    let (x, y) = g.local(ev.client_x(), ev.client_y());
                    view_t.update(|t| *t = t.zoom_at(x, y, 2.0));
                }
            >
                <defs>
                    <pattern id="dots" width="16" height="16" patternUnits="userSpaceOnUse">
                        <circle class="grid-dot" cx="1" cy="1" r="1"></circle>
                    </pattern>
                </defs>
                <rect class="graph-bg" width="100%" height="100%" fill="url(#dots)"></rect>
                <g class="viewport" style=lod_style transform=move || view_t.get().svg()>
                    <For
                        each=move || layout.with(|l| if dense(l) { Vec::new() } else { l.fans.clone() })
                        key=|f| (f.cell, f.count, f.bounds.0.to_bits(), f.bounds.2.to_bits(), f.bounds.3.to_bits())
                        children=move |f| {
                            let pad = NODE / 2.0 + 6.0;
                            let (x0, y0, x1, y1) = f.bounds;
                            let tip = move || {
                                ctx.tr("graph.fan").replace("{{id}}", &f.cell.to_string()).replace("{{n}}", &f.count.to_string())
                            };
                            view! {
                                <rect
                                    class="fan"
                                    data-cell=f.cell.to_string()
                                    x=x0 - pad
                                    y=y0 - pad
                                    width=x1 - x0 + 2.0 * pad
                                    height=y1 - y0 + 2.0 * pad
                                    rx=pad
                                >
                                    <title>{tip}</title>
                                </rect>
                            }
                        }
                    />
                    <For
                        each=move || visible_edges.get()
                        key=|e| (e.1, e.0, e.2.name)
                        children=move |(from, to, style, kind)| {
                            let ends = move || layout.with(|l| {
                                let a = l.pos.get(&from).copied().unwrap_or_default();
                                let b = l.pos.get(&to).copied().unwrap_or_default();
                                (a, b)
                            });
                            view! {
                                <line
                                    class="edge"
                                    class:dim=move || dimmed.with(|d| d.contains(&to))
                                    data-from=from.to_string()
                                    data-to=to.to_string()
                                    data-type=edge_name(kind)
                                    data-op=style.name
                                    stroke=style.colour
                                    x1=move || ends().0.0
                                    y1=move || ends().0.1
                                    x2=move || ends().1.0
                                    y2=move || ends().1.1
                                ></line>
                            }
                        }
                    />
                    <For each=move || visible.get() key=|id| *id children=node />
                    <For each=running key=|id| *id children=progress_mark />
                </g>
            </svg>
    }
}
