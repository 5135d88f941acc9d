//! The line-chart component: axes with tick labels, one legend entry per series, and a hover
//! read-out (a cursor line, a dot on each series and the values at that point).
//!
//! The geometry — ticks, the frame, the nearest point — is [`crate::chart`]'s (pure, tested
//! natively); this file draws it. Each series keeps its CSS class and `data-name`, so a page
//! (or a test) can tell the equity curve from its benchmark, or a node's series from a compared
//! node's. The chart is plain SVG with inline styles, so "download chart" saves what is seen.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::chart::{Axis, Frame, index_ticks, tick_label, value_label};

/// One series of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// The polyline's CSS class (`equity`, `benchmark`, `series`).
    pub class: &'static str,
    /// `data-name`: what the series is (a variable's sourceName, a curve's name).
    pub name: String,
    /// The legend's and the read-out's words, naming the node where several are overlaid.
    pub label: String,
    pub values: Vec<f64>,
    pub colour: &'static str,
    /// An SVG dash pattern; empty for a solid line.
    pub dash: &'static str,
}

const W: f64 = 560.0;
const FRAME: Frame = Frame {
    width: W,
    height: 200.0,
    left: 64.0,
    right: 14.0,
    top: 10.0,
    bottom: 22.0,
};

/// A chart of `lines` on shared axes; `x_labels[i]` names point `i` (a date, a step), the
/// index when missing; `x_unit` ("step") precedes it in the read-out.
#[component]
pub fn LineChart(
    id: &'static str,
    lines: Vec<Line>,
    x_labels: Vec<String>,
    #[prop(optional)] x_unit: &'static str,
) -> impl IntoView {
    let f = FRAME;
    let n = lines.iter().map(|l| l.values.len()).max().unwrap_or(0);
    let x_label = move |i: usize| x_labels.get(i).cloned().unwrap_or_else(|| i.to_string());
    let all: Vec<&[f64]> = lines.iter().map(|l| l.values.as_slice()).collect();
    let Some(axis) = Axis::over(&all, 6) else {
        return view! { <svg id=id class="chart" width=W height=f.height></svg> }.into_any();
    };
    let hover = RwSignal::new(None::<usize>);
    let on_move = move |ev: web_sys::MouseEvent| {
        let Some(svg) = ev.current_target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) else {
            return;
        };
        let r = svg.get_bounding_client_rect();
        // The SVG may be drawn narrower than its viewBox: map the cursor into chart units.
        let x = (f64::from(ev.client_x()) - r.left()) * W / r.width().max(1.0);
        hover.set(f.nearest(x, n));
    };
    let grid = axis
        .ticks
        .iter()
        .map(|&v| {
            let y = f.y(v, &axis);
            view! {
                <line x1=f.left x2=W - f.right y1=y y2=y style="stroke: var(--border, #ddd); stroke-width: 0.5"></line>
                <text class="tick y-tick" x=f.left - 5.0 y=y dy="0.32em" text-anchor="end" font-size="10">{tick_label(v, axis.step)}</text>
            }
        })
        .collect_view();
    let x_ticks = index_ticks(n, 7)
        .into_iter()
        .map(|i| {
            let x = f.x(i, n);
            let base = f.height - f.bottom;
            view! {
                <line x1=x x2=x y1=base y2=base + 4.0 style="stroke: var(--muted, #888)"></line>
                <text class="tick x-tick" x=x y=base + 15.0 text-anchor="middle" font-size="10">{x_label(i)}</text>
            }
        })
        .collect_view();
    let shapes = lines
        .iter()
        .map(|l| {
            view! {
                <polyline class=l.class data-name=l.name.clone() points=f.points(&l.values, n, &axis)
                    fill="none" stroke=l.colour stroke-width="1.5" stroke-dasharray=l.dash></polyline>
            }
        })
        .collect_view();
    let legend = lines
        .iter()
        .map(|l| {
            view! {
                <span class="legend-item" data-series=l.name.clone()>
                    <svg width="22" height="8"><line x1="0" x2="22" y1="4" y2="4" stroke=l.colour stroke-width="2" stroke-dasharray=l.dash></line></svg>
                    {l.label.clone()}
                </span>
            }
        })
        .collect_view();
    // The hover: a cursor line, a dot per series at that point, and the values in words.
    let dots_of = lines.clone();
    let cursor = move || {
        let i = hover.get()?;
        let x = f.x(i, n);
        let dots = dots_of
            .iter()
            .filter_map(|l| {
                let v = *l.values.get(i).filter(|v| v.is_finite())?;
                Some(view! { <circle cx=x cy=f.y(v, &axis) r="3" fill=l.colour></circle> })
            })
            .collect_view();
        Some(view! {
            <g class="cursor">
                <line x1=x x2=x y1=f.top y2=f.height - f.bottom style="stroke: var(--muted, #888); stroke-dasharray: 2 2"></line>
                {dots}
            </g>
        })
    };
    let x_name = x_label.clone();
    let readout = move || {
        let i = hover.get()?;
        let values = lines
            .iter()
            .filter_map(|l| Some(format!("{} {}", l.label, value_label(*l.values.get(i)?))))
            .collect::<Vec<_>>()
            .join(" · ");
        let at = if x_unit.is_empty() {
            x_name(i)
        } else {
            format!("{x_unit} {}", x_name(i))
        };
        Some(format!("{at}: {values}"))
    };
    view! {
        <svg
            id=id
            class="chart"
            width=W
            height=f.height
            viewBox=format!("0 0 {W} {}", f.height)
            on:mousemove=on_move
            on:mouseleave=move |_| hover.set(None)
        >
            <rect x=f.left y=f.top width=W - f.left - f.right height=f.height - f.top - f.bottom style="fill: var(--surface, #fafafa); stroke: var(--border, #ddd)"></rect>
            {grid}
            {x_ticks}
            {shapes}
            {cursor}
        </svg>
        <p class="legend chart-legend">{legend}</p>
        <p id=format!("{id}-readout") class="chart-readout muted">{move || readout().unwrap_or_else(|| "\u{a0}".into())}</p>
    }
    .into_any()
}
