//! Tidy tree layout, its spatial index and the view transform of the graph (pure, tested
//! natively).
//!
//! Leaves take consecutive slots in depth-first order (children in attach order); a parent sits
//! centred over its first and last child; depth gives the row (top-down) or the column
//! (left-to-right, [`Direction::Right`]). That is O(n), keeps subtrees from overlapping by
//! construction, and puts every parent before its children. The walk is iterative so a
//! 10,000-deep chain cannot overflow the wasm stack. Collapsed nodes are laid out as leaves and
//! their descendants are left out ([`Layout::hidden`] counts them). The layout is recomputed only
//! when the graph, the collapsed set or the direction changes, never per frame; a [`Grid`] of
//! buckets answers "what is in this rectangle" and "which node is under the cursor" without a
//! scan of every node, which is what lets a pan frame of a 20,000-node tree stay cheap.

use std::collections::{HashMap, HashSet};

use simtree_shared::EdgeType;

use crate::model::GraphModel;

/// Node diameter and the gaps upstream's dagre settings use (node 28, nodesep 30, ranksep 60).
pub const NODE: f64 = 28.0;
pub const COL: f64 = NODE + 30.0;
pub const ROW: f64 = NODE + 60.0;
/// Left to right, siblings stack closer (a label sits under its node, not beside it) and depths
/// leave room for a 22-character op label between two columns.
pub const LR_SLOT: f64 = NODE + 18.0;
pub const LR_DEPTH: f64 = 160.0;

/// Which way the tree grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Direction {
    /// Root at the top, depth downwards.
    #[default]
    Down,
    /// Root at the left, depth to the right.
    Right,
}

impl Direction {
    /// The value kept in localStorage.
    pub fn code(self) -> &'static str {
        match self {
            Direction::Down => "down",
            Direction::Right => "right",
        }
    }

    pub fn from_code(code: &str) -> Direction {
        if code == "right" { Direction::Right } else { Direction::Down }
    }

    pub fn flip(self) -> Direction {
        match self {
            Direction::Down => Direction::Right,
            Direction::Right => Direction::Down,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// Centre of each drawn node (hidden descendants of collapsed nodes have none).
    pub pos: HashMap<u64, (f64, f64)>,
    /// Bounding box of all node centres: (min_x, min_y, max_x, max_y).
    pub bounds: (f64, f64, f64, f64),
    /// Each collapsed node that hides something, with how many descendants it hides.
    pub hidden: HashMap<u64, usize>,
    /// The nodes bucketed by position, for culling and hit-testing.
    pub grid: Grid,
    /// The replicates of each sweep cell, drawn as one group.
    pub fans: Vec<Fan>,
}

/// A sweep cell's replicate children (two or more drawn): packed side by side and drawn inside
/// one outline, so a sweep reads as a grid of cells rather than a hedge of leaves.
#[derive(Clone, Debug, PartialEq)]
pub struct Fan {
    pub cell: u64,
    pub count: usize,
    /// Bounding box of the replicates' centres: (min_x, min_y, max_x, max_y).
    pub bounds: (f64, f64, f64, f64),
}

impl Layout {
    /// The top-down layout of every node.
    pub fn compute(g: &GraphModel) -> Layout {
        Layout::compute_with(g, &HashSet::new(), Direction::Down)
    }

    /// The layout with the subtrees under `collapsed` folded away, growing in `direction`.
    pub fn compute_with(g: &GraphModel, collapsed: &HashSet<u64>, direction: Direction) -> Layout {
        let children = g.children();
        let (slot_gap, depth_gap) = match direction {
            Direction::Down => (COL, ROW),
            Direction::Right => (LR_SLOT, LR_DEPTH),
        };
        let mut hidden = HashMap::new();
        // A sweep replicate is a sweep edge's child whose parent came by a sweep edge too (the
        // cell); leaf replicates of one cell sit a node's width apart instead of a column.
        let into: HashMap<u64, (u64, EdgeType)> = g.edges.iter().map(|e| (e.to, (e.from, e.kind))).collect();
        let replicate_of = |n: u64| match into.get(&n) {
            Some(&(cell, kind @ (EdgeType::Sweep | EdgeType::Explore)))
                if into.get(&cell).is_some_and(|c| c.1 == kind) =>
            {
                Some(cell)
            }
            _ => None,
        };
        let packed = (NODE + 2.0) / slot_gap;
        let mut last_fan = None;
        let mut pos = HashMap::with_capacity(g.nodes.len());
        let mut next_slot = 0.0;
        // Roots: the model's root plus any node whose parent is unknown (should not happen, but a
        // partial model must still draw).
        // (One set of children, not a `parent_of` scan per node: that was quadratic.)
        let has_parent: HashSet<u64> = g.edges.iter().map(|e| e.to).collect();
        let mut roots: Vec<u64> =
            g.nodes.keys().copied().filter(|&n| n == g.root || !has_parent.contains(&n)).collect();
        roots.sort_unstable();
        roots.dedup();
        for root in roots {
            // Iterative post-order: (node, children visited?)
            let mut stack = vec![(root, false)];
            while let Some((n, expanded)) = stack.pop() {
                let mut kids = children.get(&n).map(Vec::as_slice).unwrap_or(&[]);
                if !kids.is_empty() && collapsed.contains(&n) {
                    hidden.insert(n, count_below(&children, n));
                    kids = &[];
                }
                // (slot axis, depth axis) here; turned into (x, y) at the end.
                let depth = f64::from(g.nodes.get(&n).copied().unwrap_or(0));
                if kids.is_empty() {
                    let fan = replicate_of(n);
                    let slot = if fan.is_some() && fan == last_fan { next_slot - 1.0 + packed } else { next_slot };
                    pos.insert(n, (slot * slot_gap, depth * depth_gap));
                    next_slot = slot + 1.0;
                    last_fan = fan;
                } else if expanded {
                    let first = kids.first().and_then(|k| pos.get(k)).map_or(0.0, |p| p.0);
                    let last = kids.last().and_then(|k| pos.get(k)).map_or(first, |p| p.0);
                    pos.insert(n, ((first + last) / 2.0, depth * depth_gap));
                } else {
                    stack.push((n, true));
                    for &k in kids.iter().rev() {
                        stack.push((k, false));
                    }
                }
            }
        }
        if direction == Direction::Right {
            for p in pos.values_mut() {
                *p = (p.1, p.0);
            }
        }
        let mut bounds = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
        for &(x, y) in pos.values() {
            bounds = (bounds.0.min(x), bounds.1.min(y), bounds.2.max(x), bounds.3.max(y));
        }
        if pos.is_empty() {
            bounds = (0.0, 0.0, 0.0, 0.0);
        }
        let mut fans: Vec<Fan> = Vec::new();
        for (&n, &(x, y)) in &pos {
            let Some(cell) = replicate_of(n) else { continue };
            match fans.iter_mut().find(|f| f.cell == cell) {
                Some(f) => {
                    f.count += 1;
                    let b = f.bounds;
                    f.bounds = (b.0.min(x), b.1.min(y), b.2.max(x), b.3.max(y));
                }
                None => fans.push(Fan { cell, count: 1, bounds: (x, y, x, y) }),
            }
        }
        fans.retain(|f| f.count >= 2);
        fans.sort_by_key(|f| f.cell);
        let grid = Grid::new(&pos);
        Layout { pos, bounds, hidden, grid, fans }
    }

    /// The drawn node nearest to the world point within `reach`, if any.
    pub fn hit(&self, (x, y): (f64, f64), reach: f64) -> Option<u64> {
        self.grid
            .within(&self.pos, (x - reach, y - reach, x + reach, y + reach))
            .into_iter()
            .map(|id| (id, (self.pos[&id].0 - x).hypot(self.pos[&id].1 - y)))
            .filter(|&(_, d)| d <= reach)
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(id, _)| id)
    }

    /// Ids whose circle intersects the world-space rectangle `(x0, y0, x1, y1)`, sorted.
    pub fn visible(&self, view: (f64, f64, f64, f64)) -> Vec<u64> {
        let r = NODE / 2.0;
        let mut ids = self.grid.within(&self.pos, (view.0 - r, view.1 - r, view.2 + r, view.3 + r));
        ids.sort_unstable();
        ids
    }
}

/// How many nodes lie below `node` (iteratively: chains can be 10,000 deep).
fn count_below(children: &HashMap<u64, Vec<u64>>, node: u64) -> usize {
    let mut stack = vec![node];
    let mut n = 0;
    while let Some(k) = stack.pop() {
        if let Some(kids) = children.get(&k) {
            n += kids.len();
            stack.extend(kids);
        }
    }
    n
}

/// World-space buckets of node ids (square cells of [`Grid::CELL`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grid {
    cells: HashMap<(i64, i64), Vec<u64>>,
}

impl Grid {
    /// About four columns of the top-down layout per cell: a zoomed-in view touches a few cells,
    /// a fitted one a few thousand at most.
    pub const CELL: f64 = 4.0 * COL;

    fn key(x: f64, y: f64) -> (i64, i64) {
        ((x / Self::CELL).floor() as i64, (y / Self::CELL).floor() as i64)
    }

    pub fn new(pos: &HashMap<u64, (f64, f64)>) -> Grid {
        let mut cells: HashMap<(i64, i64), Vec<u64>> = HashMap::new();
        for (&id, &(x, y)) in pos {
            cells.entry(Self::key(x, y)).or_default().push(id);
        }
        Grid { cells }
    }

    /// The ids whose centre lies in the rectangle `(x0, y0, x1, y1)`, in no particular order.
    pub fn within(&self, pos: &HashMap<u64, (f64, f64)>, (x0, y0, x1, y1): (f64, f64, f64, f64)) -> Vec<u64> {
        let inside = |id: &u64| {
            let (x, y) = pos[id];
            x >= x0 && x <= x1 && y >= y0 && y <= y1
        };
        let (a, b) = (Self::key(x0, y0), Self::key(x1, y1));
        let span = (b.0 - a.0 + 1).saturating_mul(b.1 - a.1 + 1);
        // A far zoomed-out view spans more cells than there are: walk the occupied ones instead.
        if span > self.cells.len() as i64 {
            return self
                .cells
                .iter()
                .filter(|(k, _)| k.0 >= a.0 && k.0 <= b.0 && k.1 >= a.1 && k.1 <= b.1)
                .flat_map(|(_, ids)| ids.iter().copied().filter(inside))
                .collect();
        }
        let mut out = Vec::new();
        for cx in a.0..=b.0 {
            for cy in a.1..=b.1 {
                if let Some(ids) = self.cells.get(&(cx, cy)) {
                    out.extend(ids.iter().copied().filter(inside));
                }
            }
        }
        out
    }
}

/// Screen = world × scale + translation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewTransform {
    pub tx: f64,
    pub ty: f64,
    pub scale: f64,
}

impl Default for ViewTransform {
    fn default() -> Self {
        ViewTransform { tx: 40.0, ty: 40.0, scale: 1.0 }
    }
}

/// No floor worth the name: fit must show a tree of any width (a 20,000-leaf row needs about
/// 0.001); nodes stay visible at such scales because they are drawn with a minimum screen size.
pub const MIN_SCALE: f64 = 1e-5;
pub const MAX_SCALE: f64 = 4.0;
/// Screen pixels kept free around a fitted tree.
pub const FIT_MARGIN: f64 = 24.0;

impl ViewTransform {
    /// Fits the layout into a `width × height` viewport with a screen margin, never zooming in
    /// past 1.5; the tree is centred horizontally and starts at the top.
    pub fn fit(layout: &Layout, width: f64, height: f64) -> ViewTransform {
        let (x0, y0, x1, y1) = layout.bounds;
        let w = (x1 - x0) + NODE;
        let h = (y1 - y0) + NODE;
        let room_w = (width - 2.0 * FIT_MARGIN).max(1.0);
        let room_h = (height - 2.0 * FIT_MARGIN).max(1.0);
        let scale = (room_w / w).min(room_h / h).clamp(MIN_SCALE, 1.5);
        let tx = (width - (x1 - x0) * scale) / 2.0 - x0 * scale;
        let ty = FIT_MARGIN + NODE / 2.0 * scale - y0 * scale;
        ViewTransform { tx, ty, scale }
    }

    /// Whether the world point is on screen with `pad` pixels to spare.
    pub fn shows(&self, (x, y): (f64, f64), width: f64, height: f64, pad: f64) -> bool {
        let (sx, sy) = (x * self.scale + self.tx, y * self.scale + self.ty);
        sx >= pad && sx <= width - pad && sy >= pad && sy <= height - pad
    }

    /// Zooms by `factor` keeping the screen point `(sx, sy)` fixed.
    pub fn zoom_at(self, sx: f64, sy: f64, factor: f64) -> ViewTransform {
        let scale = (self.scale * factor).clamp(MIN_SCALE, MAX_SCALE);
        let k = scale / self.scale;
        ViewTransform { tx: sx - (sx - self.tx) * k, ty: sy - (sy - self.ty) * k, scale }
    }

    pub fn pan(self, dx: f64, dy: f64) -> ViewTransform {
        ViewTransform { tx: self.tx + dx, ty: self.ty + dy, ..self }
    }

    /// The world-space rectangle a `width × height` viewport shows.
    pub fn world_view(&self, width: f64, height: f64) -> (f64, f64, f64, f64) {
        (
            (-self.tx) / self.scale,
            (-self.ty) / self.scale,
            (width - self.tx) / self.scale,
            (height - self.ty) / self.scale,
        )
    }

    /// The screen point back in world space (for minimap clicks).
    pub fn centre_on(self, wx: f64, wy: f64, width: f64, height: f64) -> ViewTransform {
        ViewTransform { tx: width / 2.0 - wx * self.scale, ty: height / 2.0 - wy * self.scale, ..self }
    }

    /// The SVG transform. Full precision for the scale: at the scales a wide tree fits with
    /// (~0.001), four decimals would misplace nodes by pixels.
    pub fn svg(&self) -> String {
        format!("translate({:.2},{:.2}) scale({})", self.tx, self.ty, self.scale)
    }
}

/// The screen pixels kept clear between two neighbours' labels.
pub const LABEL_GAP: f64 = 6.0;

/// The room each node's label has beside it, in world units: the distance to the nearest other
/// node centred on the same row (the same `y`); `f64::INFINITY` alone on its row. (On screen,
/// that times the zoom, less [`LABEL_GAP`].)
/// Labels are centred under their nodes, so two neighbours whose labels are each narrower than
/// their room never overlap; rows are far enough apart that labels of different rows do not
/// (a row is [`ROW`] down, a slot [`LR_SLOT`] across).
pub fn label_room(nodes: impl IntoIterator<Item = (u64, (f64, f64))>) -> HashMap<u64, f64> {
    let mut at: Vec<(i64, f64, u64)> =
        nodes.into_iter().map(|(id, (x, y))| ((y * 2.0).round() as i64, x, id)).collect();
    at.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut room = HashMap::with_capacity(at.len());
    for (i, &(row, x, id)) in at.iter().enumerate() {
        let apart = |j: Option<usize>| {
            j.and_then(|j| at.get(j)).filter(|other| other.0 == row).map_or(f64::INFINITY, |other| (other.1 - x).abs())
        };
        let nearest = apart(i.checked_sub(1)).min(apart(Some(i + 1)));
        room.insert(id, nearest);
    }
    room
}

#[cfg(test)]
mod tests {
    use super::*;
    use simtree_shared::{EdgeType, GraphEdge};

    fn model(edges: &[(u64, u64)]) -> GraphModel {
        let mut g = GraphModel::default();
        g.nodes.insert(0, 0);
        for &(from, to) in edges {
            let depth = g.nodes[&from] + 1;
            g.nodes.insert(to, depth);
            g.edges.push(GraphEdge { from, to, kind: EdgeType::Advance });
        }
        g
    }

    fn assert_tidy(g: &GraphModel, l: &Layout) {
        assert_eq!(l.pos.len(), g.nodes.len());
        for e in &g.edges {
            assert!(l.pos[&e.from].1 < l.pos[&e.to].1, "parent {} above child {}", e.from, e.to);
        }
        let mut pts: Vec<(f64, f64)> = l.pos.values().copied().collect();
        pts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for (i, a) in pts.iter().enumerate() {
            for b in &pts[i + 1..] {
                let d = ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt();
                assert!(d >= NODE, "nodes overlap at {a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn a_labels_room_is_its_nearest_neighbour_on_its_row() {
        let room = label_room([(1, (0.0, 0.0)), (2, (58.0, 0.0)), (3, (200.0, 0.0)), (4, (58.0, 88.0))]);
        assert_eq!(room[&1], 58.0);
        assert_eq!(room[&2], 58.0, "the nearer of its two neighbours");
        assert_eq!(room[&3], 142.0);
        assert_eq!(room[&4], f64::INFINITY, "alone on its row");
    }

    #[test]
    fn parents_sit_above_and_centred_over_their_children() {
        let g = model(&[(0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6)]);
        let l = Layout::compute(&g);
        assert_tidy(&g, &l);
        assert_eq!(l.pos[&1].0, l.pos[&4].0, "centred over the middle child");
        assert_eq!(l.pos[&2].0, l.pos[&6].0);
        assert!(l.pos[&3].0 < l.pos[&4].0 && l.pos[&4].0 < l.pos[&5].0, "children in attach order");
    }

    #[test]
    fn random_trees_never_overlap() {
        let mut seed = 17u64;
        for size in [2usize, 10, 60, 200] {
            let mut edges = Vec::new();
            for n in 1..size as u64 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                edges.push(((seed >> 33) % n, n));
            }
            let g = model(&edges);
            assert_tidy(&g, &Layout::compute(&g));
        }
    }

    #[test]
    fn a_deep_chain_lays_out_without_recursion() {
        let edges: Vec<(u64, u64)> = (0..20_000).map(|i| (i, i + 1)).collect();
        let g = model(&edges);
        let l = Layout::compute(&g);
        assert_eq!(l.pos[&20_000], (0.0, 20_000.0 * ROW));
        assert_eq!(l.bounds.3, 20_000.0 * ROW);
    }

    #[test]
    fn culling_keeps_only_what_the_viewport_shows() {
        let edges: Vec<(u64, u64)> = (1..5000).map(|i| (0, i)).collect();
        let g = model(&edges);
        let l = Layout::compute(&g);
        let t = ViewTransform::default();
        let shown = l.visible(t.world_view(800.0, 600.0));
        assert!(!shown.is_empty() && shown.len() < 40, "{} of 5000 drawn", shown.len());
    }

    #[test]
    fn fit_shows_a_very_wide_tree() {
        let edges: Vec<(u64, u64)> = (1..20_001).map(|i| (0, i)).collect();
        let g = model(&edges);
        let l = Layout::compute(&g);
        let t = ViewTransform::fit(&l, 1000.0, 600.0);
        for id in [1, 10_000, 20_000] {
            assert!(t.shows(l.pos[&id], 1000.0, 600.0, 0.0), "node {id} off screen at scale {}", t.scale);
        }
        assert_eq!(l.visible(t.world_view(1000.0, 600.0)).len(), 20_001);
    }

    #[test]
    fn collapsing_folds_a_subtree_into_a_counted_leaf() {
        let g = model(&[(0, 1), (0, 2), (1, 3), (1, 4), (3, 5), (2, 6)]);
        let collapsed: HashSet<u64> = [1, 5].into();
        let l = Layout::compute_with(&g, &collapsed, Direction::Down);
        let mut drawn: Vec<u64> = l.pos.keys().copied().collect();
        drawn.sort_unstable();
        assert_eq!(drawn, [0, 1, 2, 6], "3, 4 and 5 are hidden under 1");
        assert_eq!(l.hidden, HashMap::from([(1, 3)]), "a collapsed leaf hides nothing");
        assert_eq!(l.pos[&1].1, ROW, "the folded node keeps its row");
        assert!(l.pos[&1].0 < l.pos[&2].0);
    }

    #[test]
    fn a_sweeps_replicates_pack_into_one_fan_per_cell() {
        // 0 → cells 1, 2 (sweep edges) → replicates 3, 4, 5 and 6, 7, 8; 9 is a plain child of 1.
        let mut g = model(&[(0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8), (1, 9)]);
        for e in &mut g.edges {
            e.kind = if e.to == 9 { EdgeType::Advance } else { EdgeType::Sweep };
        }
        let l = Layout::compute(&g);
        assert_tidy(&g, &l);
        let gap = |a: u64, b: u64| l.pos[&b].0 - l.pos[&a].0;
        assert!((gap(3, 4) - (NODE + 2.0)).abs() < 1e-9, "replicates a node apart: {}", gap(3, 4));
        assert!((gap(5, 9) - COL).abs() < 1e-9, "a plain sibling keeps its column: {}", gap(5, 9));
        assert_eq!(l.fans.len(), 2);
        assert_eq!((l.fans[0].cell, l.fans[0].count), (1, 3));
        assert_eq!(l.fans[0].bounds.0, l.pos[&3].0);
        assert_eq!(l.fans[0].bounds.2, l.pos[&5].0);
        assert_eq!((l.fans[1].cell, l.fans[1].count), (2, 3));
    }

    #[test]
    fn left_to_right_puts_depth_on_the_x_axis() {
        let g = model(&[(0, 1), (0, 2), (1, 3)]);
        let l = Layout::compute_with(&g, &HashSet::new(), Direction::Right);
        assert_eq!(l.pos[&3].0, 2.0 * LR_DEPTH);
        assert!(l.pos[&1].1 < l.pos[&2].1, "siblings stack downwards in attach order");
        for e in &g.edges {
            assert!(l.pos[&e.from].0 < l.pos[&e.to].0, "parent left of child");
        }
        assert_eq!(Direction::from_code(Direction::Right.code()), Direction::Right);
        assert_eq!(Direction::from_code("nonsense"), Direction::Down);
    }

    #[test]
    fn the_grid_finds_what_a_scan_finds() {
        let mut seed = 5u64;
        let mut edges = Vec::new();
        for n in 1..3000u64 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            edges.push(((seed >> 33) % n, n));
        }
        let g = model(&edges);
        let l = Layout::compute(&g);
        for view in [(100.0, 0.0, 900.0, 300.0), (-1e9, -1e9, 1e9, 1e9), (5000.0, 200.0, 5001.0, 400.0)] {
            let mut scan: Vec<u64> = l
                .pos
                .iter()
                .filter(|(_, p)| p.0 >= view.0 && p.0 <= view.2 && p.1 >= view.1 && p.1 <= view.3)
                .map(|(&id, _)| id)
                .collect();
            scan.sort_unstable();
            let mut found = l.grid.within(&l.pos, view);
            found.sort_unstable();
            assert_eq!(found, scan, "view {view:?}");
        }
        let p = l.pos[&1234];
        assert_eq!(l.hit((p.0 + 3.0, p.1 - 2.0), NODE / 2.0), Some(1234));
        assert_eq!(l.hit((p.0 + COL / 2.0, p.1 + ROW / 2.0), 5.0), None, "nothing within reach");
    }

    #[test]
    fn fit_zoom_and_pan() {
        let g = model(&[(0, 1), (0, 2), (0, 3)]);
        let l = Layout::compute(&g);
        let t = ViewTransform::fit(&l, 800.0, 600.0);
        let view = t.world_view(800.0, 600.0);
        assert!(view.0 <= l.bounds.0 && view.2 >= l.bounds.2 && view.1 <= l.bounds.1 && view.3 >= l.bounds.3);
        let z = t.zoom_at(100.0, 100.0, 2.0);
        assert!((z.scale - (t.scale * 2.0).min(MAX_SCALE)).abs() < 1e-9);
        // The point under the cursor stays put.
        let wx = (100.0 - t.tx) / t.scale;
        assert!((wx * z.scale + z.tx - 100.0).abs() < 1e-9);
        assert_eq!(t.pan(5.0, -5.0).tx, t.tx + 5.0);
    }
}
