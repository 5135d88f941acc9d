//! The tree graph: SVG drawing of the layout with pan (drag), zoom (wheel and buttons),
//! fit-to-view, a minimap, node fills and edge colours as upstream (spec §4.2), pulsing running
//! nodes, and viewport culling so thousands of nodes stay interactive.

use std::collections::HashSet;

use leptos::prelude::*;

use crate::app::Tree;
use crate::layout::{Layout, NODE, ViewTransform};
use crate::model::{LEGEND, edge_colour, edge_name, node_fill};

/// The graph panel. `width`/`height` are its pixel size.
#[component]
pub fn GraphView(tree: Tree, width: f64, height: f64) -> impl IntoView {
    let layout = Memo::new(move |_| tree.graph.with(Layout::compute));
    let parents: Memo<HashSet<u64>> = Memo::new(move |_| tree.graph.with(|g| g.edges.iter().map(|e| e.from).collect()));
    let view_t = RwSignal::new(ViewTransform::default());
    let fitted_for = StoredValue::new(None::<u64>);
    // Fit once per tree, when its first layout arrives (never per frame).
    Effect::new(move |_| {
        let id = tree.id.get();
        let l = layout.get();
        if !l.pos.is_empty() && fitted_for.get_value() != id {
            view_t.set(ViewTransform::fit(&l, width, height));
            fitted_for.set_value(id);
        }
    });
    let visible = Memo::new(move |_| {
        let t = view_t.get();
        layout.with(|l| l.visible(t.world_view(width, height)))
    });
    let visible_edges = Memo::new(move |_| {
        let shown: HashSet<u64> = visible.get().into_iter().collect();
        tree.graph.with(|g| {
            g.edges
                .iter()
                .filter(|e| shown.contains(&e.from) || shown.contains(&e.to))
                .cloned()
                .collect::<Vec<_>>()
        })
    });
    let show_labels = move || view_t.with(|t| t.scale >= 0.45);
    let dragging = StoredValue::new(false);

    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        let factor = if ev.delta_y() < 0.0 { 1.15 } else { 1.0 / 1.15 };
        let (x, y) = (f64::from(ev.offset_x()), f64::from(ev.offset_y()));
        view_t.update(|t| *t = t.zoom_at(x, y, factor));
    };
    let zoom = move |factor: f64| view_t.update(|t| *t = t.zoom_at(width / 2.0, height / 2.0, factor));
    let fit = move || view_t.set(layout.with(|l| ViewTransform::fit(l, width, height)));

    let node = move |id: u64| {
        let pos = move || layout.with(|l| l.pos.get(&id).copied().unwrap_or((0.0, 0.0)));
        let fill = move || {
            let selected = tree.selected.get() == Some(id);
            let root = tree.graph.with(|g| g.root == id);
            node_fill(selected, root, !parents.with(|p| p.contains(&id)))
        };
        let running = move || tree.graph.with(|g| g.running.contains(&id));
        let compare = move || tree.compare_with.get() == Some(id);
        view! {
            <g
                class="node"
                class:running=running
                class:compare=compare
                data-id=id.to_string()
                transform=move || { let (x, y) = pos(); format!("translate({x:.1},{y:.1})") }
                on:click=move |ev: web_sys::MouseEvent| {
                    if ev.shift_key() { tree.compare_with.set(Some(id)) } else { tree.selected.set(Some(id)) }
                }
            >
                <circle r=NODE / 2.0 fill=fill stroke="#999" stroke-width="1"></circle>
                <Show when=show_labels>
                    <text text-anchor="middle" dy="4" font-size="11">{id}</text>
                </Show>
            </g>
        }
    };

    view! {
        <div class="graph-wrap" style=format!("width:{width}px;height:{height}px")>
            <svg
                id="graph"
                width=width
                height=height
                on:wheel=on_wheel
                on:mousedown=move |_| dragging.set_value(true)
                on:mouseup=move |_| dragging.set_value(false)
                on:mouseleave=move |_| dragging.set_value(false)
                on:mousemove=move |ev: web_sys::MouseEvent| {
                    if dragging.get_value() {
                        let (dx, dy) = (f64::from(ev.movement_x()), f64::from(ev.movement_y()));
                        view_t.update(|t| *t = t.pan(dx, dy));
                    }
                }
            >
                <defs>
                    <pattern id="dots" width="16" height="16" patternUnits="userSpaceOnUse">
                        <circle cx="1" cy="1" r="1" fill="#ddd"></circle>
                    </pattern>
                </defs>
                <rect width="100%" height="100%" fill="url(#dots)"></rect>
                <g class="viewport" transform=move || view_t.get().svg()>
                    <For
                        each=move || visible_edges.get()
                        key=|e| (e.to, e.from)
                        children=move |e| {
                            let ends = move || layout.with(|l| {
                                let a = l.pos.get(&e.from).copied().unwrap_or_default();
                                let b = l.pos.get(&e.to).copied().unwrap_or_default();
                                (a, b)
                            });
                            view! {
                                <line
                                    class="edge"
                                    data-from=e.from.to_string()
                                    data-to=e.to.to_string()
                                    data-type=edge_name(e.kind)
                                    stroke=edge_colour(e.kind)
                                    stroke-width="1.5"
                                    x1=move || ends().0.0
                                    y1=move || ends().0.1
                                    x2=move || ends().1.0
                                    y2=move || ends().1.1
                                ></line>
                            }
                        }
                    />
                    <For each=move || visible.get() key=|id| *id children=node />
                </g>
            </svg>
            <div class="zoom-controls">
                <button id="zoom-in" on:click=move |_| zoom(1.25)>"+"</button>
                <button id="zoom-out" on:click=move |_| zoom(0.8)>"−"</button>
                <button id="fit" on:click=move |_| fit()>"⤢"</button>
            </div>
            <Minimap layout view_t width height />
        </div>
    }
}

/// A small overview of the whole tree: every node as one dot in a single path, the viewport as a
/// rectangle; clicking centres the main view there.
#[component]
fn Minimap(layout: Memo<Layout>, view_t: RwSignal<ViewTransform>, width: f64, height: f64) -> impl IntoView {
    const MW: f64 = 160.0;
    const MH: f64 = 100.0;
    let mini = Memo::new(move |_| layout.with(|l| ViewTransform::fit(l, MW, MH)));
    let dots = Memo::new(move |_| {
        let t = mini.get();
        layout.with(|l| {
            let mut d = String::with_capacity(l.pos.len() * 16);
            for &(x, y) in l.pos.values() {
                d.push_str(&format!(
                    "M{:.1} {:.1}h2v2h-2z",
                    x * t.scale + t.tx - 1.0,
                    y * t.scale + t.ty - 1.0
                ));
            }
            d
        })
    });
    let frame = move || {
        let m = mini.get();
        let (x0, y0, x1, y1) = view_t.get().world_view(width, height);
        (
            x0 * m.scale + m.tx,
            y0 * m.scale + m.ty,
            (x1 - x0) * m.scale,
            (y1 - y0) * m.scale,
        )
    };
    view! {
        <svg
            class="minimap"
            width=MW
            height=MH
            on:click=move |ev: web_sys::MouseEvent| {
                let m = mini.get();
                let wx = (f64::from(ev.offset_x()) - m.tx) / m.scale;
                let wy = (f64::from(ev.offset_y()) - m.ty) / m.scale;
                view_t.update(|t| *t = t.centre_on(wx, wy, width, height));
            }
        >
            <rect width="100%" height="100%" fill="#fafafa" stroke="#ccc"></rect>
            <path d=move || dots.get() fill="#555"></path>
            <rect
                class="minimap-frame"
                x=move || frame().0
                y=move || frame().1
                width=move || frame().2.max(1.0)
                height=move || frame().3.max(1.0)
                fill="none"
                stroke="#f66"
            ></rect>
        </svg>
    }
}

/// `Selected: {id|-}` and `Nodes: n · Edges: m · Running: r`.
#[component]
pub fn Stats(tree: Tree) -> impl IntoView {
    let ctx = crate::app::ctx();
    let t = move |k| crate::i18n::t(ctx.lang.get(), k);
    view! {
        <div id="stats" class="stats">
            <span>{move || t("common.selected")} ": " {move || tree.selected.get().map_or("-".to_string(), |s| s.to_string())}</span>
            " · "
            <span>
                {move || t("common.nodes")} ": " {move || tree.graph.with(|g| g.nodes.len())} " · "
                {move || t("common.edges")} ": " {move || tree.graph.with(|g| g.edges.len())} " · "
                {move || t("common.running")} ": " {move || tree.graph.with(|g| g.running.len())}
            </span>
        </div>
    }
}

/// LLM usage of the tree (calls, tokens) and its budget, refreshed after every run.
#[component]
pub fn UsageLine(tree: Tree) -> impl IntoView {
    let usage = RwSignal::new(None::<serde_json::Value>);
    Effect::new(move |_| {
        tree.last_msg.track();
        let Some(t) = tree.id.get() else { return };
        leptos::task::spawn_local(async move {
            if let Ok(v) = crate::api::get::<serde_json::Value>(&format!("/devui/simtree/{t}/usage")).await {
                usage.set(Some(v));
            }
        });
    });
    let text = move || {
        usage.with(|u| {
            let u = u.as_ref()?;
            let n = |k: &str| u["usage"][k].as_u64().unwrap_or(0);
            let mut s = format!(
                "LLM: {} calls · {} prompt + {} completion tokens · {} ms",
                n("calls"),
                n("prompt_tokens"),
                n("completion_tokens"),
                n("latency_ms")
            );
            if let Some(b) = u["budget"].as_object() {
                s.push_str(&format!(" · budget {}/{}", b["spent"], b["limit"]));
            }
            Some(s)
        })
    };
    view! { <div id="usage" class="stats">{text}</div> }
}

/// The six edge types with their colours.
#[component]
pub fn Legend() -> impl IntoView {
    view! {
        <div class="legend">
            {LEGEND
                .iter()
                .map(|&k| view! {
                    <span class="legend-item">
                        <span class="dot" style=format!("background:{}", edge_colour(k))></span>
                        {edge_name(k)}
                    </span>
                })
                .collect_view()}
        </div>
    }
}
