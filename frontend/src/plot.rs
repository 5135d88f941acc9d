//! The chart components: the line chart (axes with tick labels, one legend entry per series, and a
//! hover read-out: a cursor line, a dot on each series and the values at that point) and a
//! sweep's per-metric chart (cells side by side, mean with a band of ± sd, replicates as dots).
//!
//! The geometry — ticks, the frame, the nearest point — is [`crate::chart`]'s (pure, tested
//! natively); this file draws it. Each series keeps its CSS class and `data-name`, so a page
//! (or a test) can tell the equity curve from its benchmark, or a node's series from a compared
//! node's. The chart is plain SVG with inline styles and presentation attributes, so "download
//! chart" saves what is seen; what only the page needs (cursors, the legend's HTML, dark-theme
//! colours) is in `style.css`.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::chart::{Axis, COLOURS, Frame, Mark, index_ticks, tick_label, value_label};
use crate::sweep::MetricPlot;

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

/// A shaded band of a chart (mean ± sd of overlaid runs), under the lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    /// `data-name`: the variable it belongs to.
    pub name: String,
    pub lo: Vec<f64>,
    pub hi: Vec<f64>,
    pub colour: &'static str,
}

const W: f64 = 560.0;
const FRAME: Frame = Frame { width: W, height: 200.0, left: 64.0, right: 14.0, top: 10.0, bottom: 22.0 };

/// A chart of `lines` on shared axes; `x_labels[i]` names point `i` (a date, a step), the
/// index when missing; `x_unit` ("step") precedes it in the read-out.
#[component]
pub fn LineChart(
    id: &'static str,
    lines: Vec<Line>,
    x_labels: Vec<String>,
    #[prop(optional)] x_unit: &'static str,
    /// Shaded bands drawn under the lines (sharing their axes).
    #[prop(optional)]
    bands: Vec<Band>,
    /// Trades marked on the first line (buys ▲ below it, sells ▼ above), with hover text.
    #[prop(optional)]
    marks: Vec<Mark>,
) -> impl IntoView {
    let f = FRAME;
    let n = lines.iter().map(|l| l.values.len()).max().unwrap_or(0);
    let x_label = move |i: usize| x_labels.get(i).cloned().unwrap_or_else(|| i.to_string());
    let bounds = bands.iter().flat_map(|b| [b.lo.as_slice(), b.hi.as_slice()]);
    let all: Vec<&[f64]> = lines.iter().map(|l| l.values.as_slice()).chain(bounds).collect();
    let Some(axis) = Axis::over(&all, 6) else {
        // Nothing to draw yet (a root, a node before its first step or decision).
        let ctx = crate::state::ctx();
        return view! { <p id=id class="chart-empty muted">{move || ctx.tr("chart.empty")}</p> }.into_any();
    };
    let hover = RwSignal::new(None::<usize>);
    let on_move = move |ev: web_sys::MouseEvent| {
        if let Some(x) = cursor_x(&ev) {
            hover.set(f.nearest(x, n));
        }
    };
    let grid = y_grid(f, &axis);
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
    let shaded = bands
        .iter()
        .map(|b| {
            view! {
                <polygon class="band" data-name=b.name.clone() points=f.band(&b.lo, &b.hi, &axis, |i| f.x(i, n))
                    fill=b.colour fill-opacity="0.15" stroke="none"></polygon>
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
    let markers = trade_markers(f, &axis, n, lines.first().map_or(&[][..], |l| &l.values), &marks);
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
    let ctx = crate::state::ctx();
    let mark_legend = (!marks.is_empty()).then(|| {
        view! {
            <span class="legend-item trade-legend">
                <span class="buy">"▲"</span>" " {move || ctx.tr("chart.buy")} " "
                <span class="sell">"▼"</span>" " {move || ctx.tr("chart.sell")}
            </span>
        }
    });
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
            .chain(marks.iter().filter(|m| m.index == i).map(|m| m.text.clone()))
            .collect::<Vec<_>>()
            .join(" · ");
        let at = if x_unit.is_empty() { x_name(i) } else { format!("{x_unit} {}", x_name(i)) };
        Some(format!("{at}: {values}"))
    };
    view! {
        <Enlargeable id=id.to_string()>
            <svg
                id=id
                class="chart"
                width=W
                height=f.height
                viewBox=format!("0 0 {W} {}", f.height)
                on:mousemove=on_move
                on:mouseleave=move |_| hover.set(None)
            >
                {plot_area(f)}
                {grid}
                {x_ticks}
                {shaded}
                {shapes}
                {markers}
                {cursor}
            </svg>
            <p class="legend chart-legend">{legend}{mark_legend}</p>
            <p id=format!("{id}-readout") class="chart-readout muted">{move || readout().unwrap_or_else(|| "\u{a0}".into())}</p>
        </Enlargeable>
    }
    .into_any()
}

/// A chart with an Enlarge button: enlarged, it fills most of the window above a dimmed page
/// (the SVG scales with its viewBox, and the hover follows it), until Close, a click beside it or
/// Escape. The box is `{id}-box`, the button `{id}-enlarge`.
#[component]
fn Enlargeable(id: String, children: Children) -> impl IntoView {
    let ctx = crate::state::ctx();
    let big = RwSignal::new(false);
    let keys = window_event_listener(leptos::ev::keydown, move |ev: web_sys::KeyboardEvent| {
        if ev.key() == "Escape" && big.get_untracked() {
            ev.prevent_default();
            big.set(false);
        }
    });
    on_cleanup(move || keys.remove());
    view! {
        <Show when=move || big.get()>
            <div class="chart-backdrop" on:click=move |_| big.set(false)></div>
        </Show>
        <div id=format!("{id}-box") class=move || if big.get() { "chart-box enlarged" } else { "chart-box" }>
            <button
                id=format!("{id}-enlarge")
                class="ghost chart-enlarge"
                title=move || ctx.tr(if big.get() { "chart.closeHint" } else { "chart.enlargeHint" })
                on:click=move |_| big.update(|b| *b = !*b)
            >
                {move || ctx.tr(if big.get() { "chart.close" } else { "chart.enlarge" })}
            </button>
            {children()}
        </div>
    }
}

/// The colours of buy and sell markers (as attributes, so a downloaded chart keeps them; the
/// stylesheet adapts them to the theme on the page).
const BUY: &str = "#2e7d32";
const SELL: &str = "#c62828";

/// A triangle per trade on the line `on` at the trade's point: a buy points up at it from
/// below, a sell down from above; markers of one point stack outwards. Hovering one shows its
/// text (an SVG `<title>`).
fn trade_markers(f: Frame, axis: &Axis, n: usize, on: &[f64], marks: &[Mark]) -> impl IntoView + use<> {
    marks
        .iter()
        .filter_map(|m| {
            let v = *on.get(m.index).filter(|v| v.is_finite())?;
            let (x, y) = (f.x(m.index, n), f.y(v, axis));
            let off = 4.0 + 9.0 * m.stack as f64;
            let (d, colour, class) = if m.buy {
                (format!("M{x:.1},{:.1} l5,8 l-10,0 z", y + off), BUY, "trade buy")
            } else {
                (format!("M{x:.1},{:.1} l5,-8 l-10,0 z", y - off), SELL, "trade sell")
            };
            Some(view! { <path class=class data-index=m.index d=d fill=colour><title>{m.text.clone()}</title></path> })
        })
        .collect_view()
}

/// The cursor's x in chart units: the SVG may be drawn narrower than its viewBox.
fn cursor_x(ev: &web_sys::MouseEvent) -> Option<f64> {
    let svg = ev.current_target()?.dyn_into::<web_sys::Element>().ok()?;
    let r = svg.get_bounding_client_rect();
    Some((f64::from(ev.client_x()) - r.left()) * W / r.width().max(1.0))
}

/// The plot's background.
fn plot_area(f: Frame) -> impl IntoView {
    view! {
        <rect x=f.left y=f.top width=f.width - f.left - f.right height=f.height - f.top - f.bottom
            style="fill: var(--surface, #fafafa); stroke: var(--border, #ddd)"></rect>
    }
}

/// Horizontal grid lines at the value axis' ticks, with their labels on the left.
fn y_grid(f: Frame, axis: &Axis) -> impl IntoView + use<> {
    axis.ticks
        .iter()
        .map(|&v| {
            let y = f.y(v, axis);
            view! {
                <line x1=f.left x2=f.width - f.right y1=y y2=y style="stroke: var(--border, #ddd); stroke-width: 0.5"></line>
                <text class="tick y-tick" x=f.left - 5.0 y=y dy="0.32em" text-anchor="end" font-size="10">{tick_label(v, axis.step)}</text>
            }
        })
        .collect_view()
}

const SWEEP_FRAME: Frame = Frame { bottom: 30.0, ..FRAME };

/// One metric of a sweep over its cells: a slot per cell (its axis values below), the mean as
/// points joined by a line, a band of mean ± sd, and each replicate's value as a dot. Hovering a
/// cell reads its numbers out; clicking it calls `on_pick` with the cell's index.
#[component]
pub fn SweepChart(id: String, plot: MetricPlot, on_pick: Callback<usize>) -> impl IntoView {
    let f = SWEEP_FRAME;
    let n = plot.labels.len();
    let (lo, hi) = plot.bounds();
    let dots: Vec<f64> = plot.values.iter().flatten().copied().collect();
    let Some(axis) = Axis::over(&[&lo, &hi, &plot.mean, &dots], 6) else {
        return view! { <svg id=id class="chart sweep-chart" width=W height=f.height></svg> }.into_any();
    };
    let x = move |i: usize| f.slot_x(i, n);
    let (mean_colour, dot_colour) = (COLOURS[0], COLOURS[1]);
    let slot_w = (f.width - f.left - f.right) / n.max(1) as f64;
    // A label longer than its slot (many cells, several axes) is cut; its title keeps it whole.
    let fits = ((slot_w / 5.5) as usize).max(3);
    let labels = plot
        .labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            view! {
                <text class="tick x-tick" x=x(i) y=f.height - f.bottom + 15.0 text-anchor="middle" font-size="10">
                    <title>{l.clone()}</title>
                    {crate::ops::ellipsis(l, fits)}
                </text>
            }
        })
        .collect_view();
    let bars = (0..n)
        .filter(|&i| lo[i].is_finite() && hi[i].is_finite())
        .map(|i| {
            view! { <line class="sd" x1=x(i) x2=x(i) y1=f.y(lo[i], &axis) y2=f.y(hi[i], &axis) stroke=mean_colour stroke-width="1"></line> }
        })
        .collect_view();
    let means = (0..n)
        .filter(|&i| plot.mean[i].is_finite())
        .map(|i| view! { <circle class="mean" data-cell=i cx=x(i) cy=f.y(plot.mean[i], &axis) r="4" fill=mean_colour></circle> })
        .collect_view();
    // Replicates spread a little around their cell's centre so equal values stay visible.
    let replicates = plot
        .values
        .iter()
        .enumerate()
        .flat_map(|(i, vs)| {
            let k = vs.len();
            vs.iter().enumerate().map(move |(j, &v)| (i, (j as f64 - (k as f64 - 1.0) / 2.0) * 5.0, v))
        })
        .map(|(i, dx, v)| {
            view! { <circle class="replicate" data-cell=i cx=x(i) + dx cy=f.y(v, &axis) r="2.5"
            fill="none" stroke=dot_colour stroke-width="1.2"></circle> }
        })
        .collect_view();
    let hover = RwSignal::new(None::<usize>);
    let slots = (0..n)
        .map(|i| {
            view! {
                <rect class="slot" data-cell=i x=x(i) - slot_w / 2.0 y=f.top width=slot_w height=f.height - f.top - f.bottom
                    fill="transparent" on:click=move |_| on_pick.run(i)></rect>
            }
        })
        .collect_view();
    let mean_line = f.points_at(&plot.mean, &axis, x);
    let readout = move || {
        let i = hover.get()?;
        let values = plot.values[i].iter().map(|&v| value_label(v)).collect::<Vec<_>>().join(", ");
        let spread = if plot.sd[i].is_finite() { format!(" ± {}", value_label(plot.sd[i])) } else { String::new() };
        Some(format!("{}: {}{spread} · {values}", plot.labels[i], value_label(plot.mean[i])))
    };
    view! {
        <Enlargeable id=id.clone()>
            <svg
                id=id.clone()
                class="chart sweep-chart"
                width=W
                height=f.height
                viewBox=format!("0 0 {W} {}", f.height)
                on:mousemove=move |ev| if let Some(cx) = cursor_x(&ev) { hover.set(f.slot_at(cx, n)) }
                on:mouseleave=move |_| hover.set(None)
            >
                {plot_area(f)}
                {y_grid(f, &axis)}
                {labels}
                <polygon class="band" points=f.band(&lo, &hi, &axis, x) fill=mean_colour fill-opacity="0.15" stroke="none"></polygon>
                {bars}
                <polyline class="mean-line" points=mean_line fill="none" stroke=mean_colour stroke-width="1.5"></polyline>
                {means}
                {replicates}
                {slots}
            </svg>
            <p id=format!("{id}-readout") class="chart-readout muted">{move || readout().unwrap_or_else(|| "\u{a0}".into())}</p>
        </Enlargeable>
    }
    .into_any()
}
