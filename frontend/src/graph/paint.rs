//! The canvas layer of the graph, used above [`crate::graph::DENSE`] laid-out nodes.
//!
//! Why a canvas there: with one SVG element (or one path segment) per node, every pan or zoom
//! frame made the browser re-rasterise thousands of elements (83 ms a frame at 5,000 nodes).
//! Caching the whole tree as a few `Path2D`s did not help either: the script work fell to under a
//! millisecond but rasterising 20,000 overlapping round dots in software still took 300 ms a
//! frame. So a frame is drawn in immediate mode from a [`Scene`] (plain world-space arrays,
//! rebuilt once per change of the layout or the graph): edges and nodes outside the viewport are
//! skipped, and what would land on the same few screen pixels is drawn once (a fitted
//! 20,000-node tree is a few hundred dots, not 20,000 stacked ones). The cost of a frame is
//! bounded by the screen, not the tree. Labels, badges and the selection rings come last, and
//! labels only for the nodes the viewport shows once they are legible (found through the
//! layout's [`crate::layout::Grid`]). Colours come from the stylesheet's theme variables
//! ([`Palette::read`], once per theme change: the toggle's, or the system's while the theme
//! follows it) and the op colours of [`crate::ops`], so the canvas reads like the SVG drawing of
//! small trees; running nodes pulse as they do there ([`pulse`]), which is the one thing that
//! repaints the canvas frame after frame, and only while a running node is in view.

use std::collections::HashSet;

use simtree_shared::NodeStatus;
use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

use super::svg::{OP_FONT, TITLE_FONT};
use crate::i18n::Lang;
use crate::layout::{COL, LABEL_GAP, Layout, NODE, ViewTransform, label_room};
use crate::model::GraphModel;
use crate::notebook::Marks;
use crate::ops::{ADVANCE, EdgeStyle, SWEEP, edge_style, fit_label};

/// What a node looks like on the canvas: its status first, its role in the tree second (the
/// SVG drawing's classes say the same through the stylesheet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    Plain,
    Leaf,
    Root,
    Running,
    Failed,
    Cancelled,
}

pub fn look(g: &GraphModel, id: u64, leaf: bool) -> Look {
    match g.status_of(id) {
        NodeStatus::Running => Look::Running,
        NodeStatus::Failed | NodeStatus::Interrupted => Look::Failed,
        NodeStatus::Cancelled => Look::Cancelled,
        NodeStatus::Done if g.root == id => Look::Root,
        NodeStatus::Done if leaf => Look::Leaf,
        NodeStatus::Done => Look::Plain,
    }
}

/// The theme's colours, read from the stylesheet's custom properties.
#[derive(Clone, Debug, PartialEq)]
pub struct Palette {
    pub fill: String,
    pub stroke: String,
    pub root: String,
    pub leaf: String,
    pub selected: String,
    pub text: String,
    pub surface: String,
    pub muted: String,
    pub accent: String,
    pub danger: String,
    pub danger_soft: String,
    pub warn: String,
    /// Advance edges (upstream's black on the light theme, lifted on the dark one).
    pub advance: String,
}

/// The compare ring's colour (fixed in the stylesheet too).
const COMPARE: &str = "#e65100";
/// A starred node's star (`.node text.star` in the stylesheet).
const STAR: &str = "#e6a700";
/// The inside of a sweep fan: the sweep colour, faint (as `.fan` in the stylesheet).
const FAN_FILL: &str = "rgba(176, 136, 0, 0.10)";

impl Palette {
    /// The current values of the theme variables on `<html>` (light defaults where unset).
    pub fn read() -> Palette {
        let style = web_sys::window().and_then(|w| {
            let root = w.document()?.document_element()?;
            w.get_computed_style(&root).ok().flatten()
        });
        let var = |name: &str, fallback: &str| {
            style
                .as_ref()
                .and_then(|s| s.get_property_value(name).ok())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| fallback.to_string())
        };
        Palette {
            fill: var("--node-fill", "#fff"),
            stroke: var("--node-stroke", "#8a93a3"),
            root: var("--node-root", "#69f"),
            leaf: var("--node-leaf", "#7c7"),
            selected: var("--node-selected", "#f66"),
            text: var("--text", "#1d2330"),
            surface: var("--surface", "#fff"),
            muted: var("--muted", "#6b7385"),
            accent: var("--accent", "#2f6fdf"),
            danger: var("--danger", "#c62828"),
            danger_soft: var("--danger-soft", "#fdecea"),
            warn: var("--warn", "#a15c00"),
            advance: var("--edge-advance", ADVANCE.colour),
        }
    }

    /// Fill, outline and outline width (screen px) of a look.
    fn of(&self, look: Look) -> (&str, &str, f64) {
        match look {
            Look::Plain => (&self.fill, &self.stroke, 1.2),
            Look::Leaf => (&self.leaf, &self.stroke, 1.2),
            Look::Root => (&self.root, &self.stroke, 1.2),
            Look::Running => (&self.fill, &self.accent, 3.0),
            Look::Failed => (&self.danger_soft, &self.danger, 3.5),
            Look::Cancelled => (&self.fill, &self.warn, 3.0),
        }
    }

    /// The colour of an edge style: its own, but the theme's for advances.
    fn edge<'a>(&'a self, style: &EdgeStyle) -> &'a str {
        if style.name == ADVANCE.name { &self.advance } else { style.colour }
    }

    /// The colour of a node drawn as a dot: its status colour, else its role's fill.
    fn dot(&self, look: Look) -> &str {
        match look {
            Look::Plain => &self.stroke,
            Look::Leaf => &self.leaf,
            Look::Root => &self.root,
            Look::Running | Look::Failed | Look::Cancelled => self.of(look).1,
        }
    }
}

/// Items grouped by key, groups in order of first appearance (a handful of keys: a scan is fine).
fn grouped<K: PartialEq, V>(items: impl Iterator<Item = (K, V)>) -> Vec<(K, Vec<V>)> {
    let mut groups: Vec<(K, Vec<V>)> = Vec::new();
    for (k, v) in items {
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, vs)) => vs.push(v),
            None => groups.push((k, vec![v])),
        }
    }
    groups
}

/// The tree in world space, grouped for drawing: built once per change, culled every frame.
pub struct Scene {
    /// Edge segments (x1, y1, x2, y2) by colour.
    edges: Vec<(EdgeStyle, Vec<[f64; 4]>)>,
    /// Node centres by look; statuses last, so a failed or running node is never under a plain one.
    nodes: Vec<(Look, Vec<(f64, f64)>)>,
    /// How many nodes the scene draws.
    pub count: usize,
}

impl Scene {
    pub fn build(layout: &Layout, g: &GraphModel) -> Scene {
        let parents: HashSet<u64> = g.edges.iter().map(|e| e.from).collect();
        let edges = g.edges.iter().filter_map(|e| {
            let (a, b) = (layout.pos.get(&e.from)?, layout.pos.get(&e.to)?);
            Some((edge_style(e.kind, g.ops.get(&e.to).map(Vec::as_slice)), [a.0, a.1, b.0, b.1]))
        });
        let mut nodes = grouped(layout.pos.iter().map(|(&id, &p)| {
            let leaf = !parents.contains(&id) || layout.hidden.contains_key(&id);
            (look(g, id, leaf), p)
        }));
        nodes.sort_by_key(|(l, _)| matches!(l, Look::Running | Look::Failed | Look::Cancelled));
        Scene { edges: grouped(edges), nodes, count: layout.pos.len() }
    }
}

/// Marks screen cells of `cell` pixels as drawn, so overlapping dots are drawn once.
struct Cells {
    cell: f64,
    cols: usize,
    rows: usize,
    taken: Vec<bool>,
}

impl Cells {
    fn new(width: f64, height: f64, cell: f64) -> Cells {
        let cols = (width / cell) as usize + 3;
        let rows = (height / cell) as usize + 3;
        Cells { cell, cols, rows, taken: vec![false; cols * rows] }
    }

    /// True the first time a point of this cell is offered (points just off-screen included).
    fn first(&mut self, x: f64, y: f64) -> bool {
        let (cx, cy) = ((x / self.cell).floor() + 1.0, (y / self.cell).floor() + 1.0);
        if cx < 0.0 || cy < 0.0 || cx as usize >= self.cols || cy as usize >= self.rows {
            return true;
        }
        let taken = &mut self.taken[cy as usize * self.cols + cx as usize];
        !std::mem::replace(taken, true)
    }
}

/// What one frame shows.
pub struct Frame<'a> {
    pub t: ViewTransform,
    pub width: f64,
    pub height: f64,
    pub selected: Option<u64>,
    pub compare: Option<u64>,
    /// The page's clock (ms), which sets where running nodes are in their pulse.
    pub now: f64,
    /// The language of the nodes' op labels.
    pub lang: Lang,
    /// The notebook's titles and stars, and the nodes a search lit up.
    pub marks: &'a Marks,
    pub lit: &'a HashSet<u64>,
    /// The tag filter's tag: nodes without it are dimmed, as the SVG drawing dims them.
    pub tag: Option<&'a str>,
}

/// How opaque a node the tag filter dims is drawn (the stylesheet's `.node.dim`).
pub const DIM_OPACITY: f64 = 0.22;

/// What a painted frame showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drawn {
    /// Nodes whose centre is in the view.
    pub in_view: usize,
    /// A running node is in the view: it pulses, so the next frame must be painted too.
    pub pulsing: bool,
    /// The notebook's marks it painted (tests read them: the canvas has no elements): the
    /// titles drawn as labels, by node; the stars; the search hits ringed; and how many nodes
    /// the tag filter dimmed.
    pub titles: Vec<(u64, String)>,
    pub stars: Vec<u64>,
    pub lit: Vec<u64>,
    pub dimmed: usize,
}

impl Drawn {
    /// The marks as one short text for a data attribute: `titles` (JSON `[[node, title]…]`),
    /// `stars`, `lit` (node lists) and `dimmed` (a count), the lists sorted.
    pub fn marks_text(&self) -> String {
        let mut titles = self.titles.clone();
        titles.sort();
        let mut stars = self.stars.clone();
        stars.sort_unstable();
        let mut lit = self.lit.clone();
        lit.sort_unstable();
        serde_json::json!({"titles": titles, "stars": stars, "lit": lit, "dimmed": self.dimmed}).to_string()
    }
}

/// The pulse of running nodes: their opacity over the page's clock, 1 → 0.55 → 1 every 0.9 s,
/// as the stylesheet's `pulse` animation does for the SVG drawing.
pub fn pulse(now_ms: f64) -> f64 {
    const PERIOD_MS: f64 = 900.0;
    let phase = (now_ms / PERIOD_MS).rem_euclid(1.0);
    1.0 - 0.45 * (1.0 - (std::f64::consts::TAU * phase).cos()) / 2.0
}

/// The 2D context of `canvas`, sized to `width × height` CSS pixels at the device's pixel ratio.
pub fn context(canvas: &HtmlCanvasElement, width: f64, height: f64) -> Option<(CanvasRenderingContext2d, f64)> {
    let dpr = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()).max(1.0);
    let (pw, ph) = ((width * dpr).round() as u32, (height * dpr).round() as u32);
    if canvas.width() != pw || canvas.height() != ph {
        canvas.set_width(pw);
        canvas.set_height(ph);
    }
    let ctx = canvas.get_context("2d").ok()??.dyn_into::<CanvasRenderingContext2d>().ok()?;
    Some((ctx, dpr))
}

/// The screen radius of a node at `scale`: never below 3 px, so a fitted 20,000-node tree is a
/// field of dots rather than nothing.
pub fn radius_px(scale: f64) -> f64 {
    (NODE / 2.0 * scale).max(3.0)
}

/// The dash pattern of an outline (screen px; none = solid), as the stylesheet draws it.
fn dash(look: Look) -> &'static [f64] {
    match look {
        Look::Running => &[4.0, 3.0],
        Look::Cancelled => &[2.0, 2.0],
        _ => &[],
    }
}

fn set_dash(ctx: &CanvasRenderingContext2d, pattern: &[f64]) {
    let list: js_sys::Array = pattern.iter().map(|&v| wasm_bindgen::JsValue::from(v)).collect();
    ctx.set_line_dash(&list).ok();
}

/// Paints one frame: edges, nodes (running ones at their pulse's opacity), the selection and
/// compare rings, collapsed badges, and ids and labels (a user's title, else the op) once they
/// are legible, with the stars of starred nodes. Everything is drawn in screen pixels.
pub fn draw(
    ctx: &CanvasRenderingContext2d,
    dpr: f64,
    scene: &Scene,
    p: &Palette,
    layout: &Layout,
    g: &GraphModel,
    f: &Frame,
) -> Drawn {
    let marks = f.marks;
    let s = f.t.scale;
    ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0).ok();
    ctx.clear_rect(0.0, 0.0, f.width, f.height);
    let screen = |(x, y): (f64, f64)| (x * s + f.t.tx, y * s + f.t.ty);
    let r = radius_px(s);
    let (x0, y0, x1, y1) = f.t.world_view(f.width, f.height);
    let pad = r / s;
    let (x0, y0, x1, y1) = (x0 - pad, y0 - pad, x1 + pad, y1 + pad);

    // Edges: far out, many share their pixels; each such bundle is stroked once.
    ctx.set_line_cap("butt");
    ctx.set_line_width(1.6);
    let far = COL * s < 8.0;
    let mut seen = HashSet::new();
    for (style, segs) in &scene.edges {
        seen.clear();
        ctx.begin_path();
        let mut any = false;
        for &[ax, ay, bx, by] in segs {
            if ax.max(bx) < x0 || ax.min(bx) > x1 || ay.max(by) < y0 || ay.min(by) > y1 {
                continue;
            }
            let ((sax, say), (sbx, sby)) = (screen((ax, ay)), screen((bx, by)));
            if far && !seen.insert([sax, say, sbx, sby].map(|v| (v / 2.0) as i32)) {
                continue;
            }
            ctx.move_to(sax, say);
            ctx.line_to(sbx, sby);
            any = true;
        }
        if any {
            ctx.set_stroke_style_str(p.edge(style));
            ctx.stroke();
        }
    }

    // Sweep fans: one outline around each cell's replicates.
    if !layout.fans.is_empty() {
        ctx.begin_path();
        for fan in &layout.fans {
            let (bx0, by0, bx1, by1) = fan.bounds;
            if bx1 < x0 || bx0 > x1 || by1 < y0 || by0 > y1 {
                continue;
            }
            let ((ax, ay), (bx, by)) = (screen((bx0, by0)), screen((bx1, by1)));
            let pad = r + 4.0;
            ctx.round_rect_with_f64(ax - pad, ay - pad, bx - ax + 2.0 * pad, by - ay + 2.0 * pad, pad).ok();
        }
        ctx.set_fill_style_str(FAN_FILL);
        ctx.fill();
        ctx.set_line_width(1.2);
        ctx.set_stroke_style_str(SWEEP.colour);
        ctx.stroke();
    }

    // Nodes: at most one disc per radius-sized cell (only ever merges discs that overlap).
    let (vx0, vy0, vx1, vy1) = f.t.world_view(f.width, f.height);
    let mut drawn = Drawn::default();
    let alpha = pulse(f.now);
    for (l, pts) in &scene.nodes {
        let mut cells = Cells::new(f.width, f.height, r);
        ctx.begin_path();
        let mut any = false;
        for &(x, y) in pts {
            if x < x0 || x > x1 || y < y0 || y > y1 {
                continue;
            }
            if x >= vx0 && x <= vx1 && y >= vy0 && y <= vy1 {
                drawn.in_view += 1;
                drawn.pulsing |= *l == Look::Running;
            }
            let (sx, sy) = screen((x, y));
            if !cells.first(sx, sy) {
                continue;
            }
            ctx.move_to(sx + r, sy);
            ctx.arc(sx, sy, r, 0.0, std::f64::consts::TAU).ok();
            any = true;
        }
        if !any {
            continue;
        }
        let (fill, outline, width) = p.of(*l);
        ctx.set_global_alpha(if *l == Look::Running { alpha } else { 1.0 });
        if r < 5.0 {
            ctx.set_fill_style_str(p.dot(*l));
            ctx.fill();
        } else {
            ctx.set_fill_style_str(fill);
            ctx.fill();
            ctx.set_line_width(width);
            ctx.set_stroke_style_str(outline);
            set_dash(ctx, dash(*l));
            ctx.stroke();
            set_dash(ctx, &[]);
        }
    }
    ctx.set_global_alpha(1.0);

    // The tag filter: a veil of the page's surface over every node in view without the tag,
    // so it shows at the SVG drawing's dimmed opacity.
    let dim = |id: u64| f.tag.is_some_and(|t| !marks.has_tag(id, t));
    if f.tag.is_some() {
        let mut cells = Cells::new(f.width, f.height, r);
        ctx.begin_path();
        for id in layout.grid.within(&layout.pos, (x0, y0, x1, y1)) {
            if !dim(id) {
                continue;
            }
            drawn.dimmed += 1;
            let (sx, sy) = screen(layout.pos[&id]);
            if cells.first(sx, sy) {
                ctx.move_to(sx + r + 1.0, sy);
                ctx.arc(sx, sy, r + 1.0, 0.0, std::f64::consts::TAU).ok();
            }
        }
        ctx.set_global_alpha(1.0 - DIM_OPACITY);
        ctx.set_fill_style_str(&p.surface);
        ctx.fill();
        ctx.set_global_alpha(1.0);
    }

    let ring = |id: Option<u64>, fill: Option<&str>, colour: &str, width: f64| {
        let Some(&at) = id.and_then(|n| layout.pos.get(&n)) else {
            return;
        };
        let (x, y) = screen(at);
        ctx.begin_path();
        ctx.arc(x, y, r.max(6.0), 0.0, std::f64::consts::TAU).ok();
        if let Some(fill) = fill {
            ctx.set_fill_style_str(fill);
            ctx.fill();
        }
        ctx.set_line_width(width);
        ctx.set_stroke_style_str(colour);
        ctx.stroke();
    };
    // A search's hits, ringed as in the SVG drawing (the few in view).
    for &n in f.lit {
        if layout.pos.get(&n).is_some_and(|&(x, y)| x >= x0 && x <= x1 && y >= y0 && y <= y1) {
            ring(Some(n), None, STAR, 4.0);
            drawn.lit.push(n);
        }
    }
    ring(f.compare, None, COMPARE, 3.0);
    // A selected node that runs pulses under its ring as it does in the SVG drawing.
    let running = |id: Option<u64>| id.is_some_and(|n| g.status_of(n) == NodeStatus::Running);
    ctx.set_global_alpha(if running(f.selected) { alpha } else { 1.0 });
    ring(f.selected, Some(&p.selected), &p.text, 2.5);
    ctx.set_global_alpha(1.0);

    let view = f.t.world_view(f.width, f.height);
    let pad = NODE;
    let view = (view.0 - pad, view.1 - pad, view.2 + pad, view.3 + pad);
    ctx.set_line_join("round");
    let label = |text: &str, x: f64, y: f64, colour: &str| {
        ctx.set_line_width(3.0);
        ctx.set_stroke_style_str(&p.surface);
        ctx.stroke_text(text, x, y).ok();
        ctx.set_fill_style_str(colour);
        ctx.fill_text(text, x, y).ok();
    };
    // Collapsed nodes say how much they hide at every zoom.
    ctx.set_font("600 11px system-ui, sans-serif");
    ctx.set_text_align("left");
    ctx.set_text_baseline("middle");
    for (&id, &n) in &layout.hidden {
        let Some(&at) = layout.pos.get(&id) else { continue };
        if at.0 < view.0 || at.0 > view.2 || at.1 < view.1 || at.1 > view.3 {
            continue;
        }
        let (x, y) = screen(at);
        label(&format!("+{n}"), x + r + 3.0, y, &p.accent);
    }

    // Ids once neighbours are ~26 px apart, op labels once nodes are full size (as in SVG).
    if COL * s < 26.0 {
        return drawn;
    }
    let shown = layout.grid.within(&layout.pos, view);
    // Each label fits the room beside its node, so neighbours' labels never overlap.
    let room = label_room(shown.iter().map(|id| (*id, layout.pos[id])));
    let room_px = |id: u64| room.get(&id).copied().unwrap_or(f64::INFINITY) * s - LABEL_GAP;
    ctx.set_text_align("center");
    ctx.set_font("11px system-ui, sans-serif");
    // Labels of nodes the tag filter dims are dimmed with them.
    let fade = |id: u64| ctx.set_global_alpha(if dim(id) { DIM_OPACITY } else { 1.0 });
    for &id in &shown {
        let (x, y) = screen(layout.pos[&id]);
        fade(id);
        label(&id.to_string(), x, y, &p.text);
        if marks.starred(id) {
            label("★", x - r - 2.0, y - r + 2.0, STAR);
            drawn.stars.push(id);
        }
    }
    // A user's title is the node's label as soon as ids are.
    ctx.set_font("600 11px system-ui, sans-serif");
    ctx.set_text_baseline("top");
    for &id in &shown {
        if let Some(text) = marks.title(id).and_then(|t| fit_label(t, 28, room_px(id), TITLE_FONT)) {
            let (x, y) = screen(layout.pos[&id]);
            fade(id);
            label(&text, x, y + r + 4.0, &p.text);
            drawn.titles.push((id, text));
        }
    }
    ctx.set_global_alpha(1.0);
    if s < 0.9 {
        return drawn;
    }
    ctx.set_font("10px system-ui, sans-serif");
    for &id in &shown {
        if id == g.root || marks.title(id).is_some() {
            continue;
        }
        let Some(made) = g.made_label(id, f.lang) else { continue };
        let Some(text) = fit_label(&made, 22, room_px(id), OP_FONT) else {
            continue;
        };
        let (x, y) = screen(layout.pos[&id]);
        fade(id);
        label(&text, x, y + r + 4.0, &p.muted);
    }
    ctx.set_global_alpha(1.0);
    drawn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_dots_are_drawn_once() {
        let mut cells = Cells::new(100.0, 50.0, 3.0);
        assert!(cells.first(10.0, 10.0));
        assert!(!cells.first(11.0, 11.5), "same 3-px cell");
        assert!(cells.first(13.5, 10.0), "the next cell");
        assert!(cells.first(-2.0, 10.0) && !cells.first(-1.0, 10.0), "just off-screen counts too");
        assert!(cells.first(500.0, 10.0) && cells.first(500.0, 10.0), "far off-screen is never merged");
        let groups = grouped([(1, 'a'), (2, 'b'), (1, 'c')].into_iter());
        assert_eq!(groups, [(1, vec!['a', 'c']), (2, vec!['b'])]);
    }

    #[test]
    fn running_nodes_pulse_from_opaque_to_055_and_back_every_09_s() {
        assert!((pulse(0.0) - 1.0).abs() < 1e-9);
        assert!((pulse(450.0) - 0.55).abs() < 1e-9);
        assert!((pulse(900.0) - 1.0).abs() < 1e-9);
        assert!((pulse(225.0) - 0.775).abs() < 1e-9);
        assert!((pulse(-450.0) - 0.55).abs() < 1e-9, "any clock value");
    }

    #[test]
    fn the_marks_drawn_are_listed_sorted_for_tests() {
        let drawn = Drawn {
            titles: vec![(9, "b".into()), (2, "<a> \"x\"".into())],
            stars: vec![9, 2],
            lit: vec![5],
            dimmed: 7,
            ..Drawn::default()
        };
        let read: serde_json::Value = serde_json::from_str(&drawn.marks_text()).unwrap();
        assert_eq!(
            read,
            serde_json::json!({"dimmed": 7, "lit": [5], "stars": [2, 9], "titles": [[2, "<a> \"x\""], [9, "b"]]})
        );
    }

    #[test]
    fn nodes_keep_a_minimum_screen_size() {
        assert_eq!(radius_px(1.0), NODE / 2.0);
        assert_eq!(radius_px(0.001), 3.0);
    }
}
