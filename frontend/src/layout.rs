//! Tidy tree layout and the view transform of the graph (pure, tested natively).
//!
//! Leaves take consecutive slots left to right in depth-first order (children in attach order);
//! a parent sits centred over its first and last child; depth gives the row. That is O(n), keeps
//! subtrees from overlapping by construction, and puts every parent above its children. The walk
//! is iterative so a 10,000-deep chain cannot overflow the wasm stack. The layout is recomputed
//! only when the graph changes, never per frame; drawing culls what is outside the viewport.

use std::collections::HashMap;

use crate::model::GraphModel;

/// Node diameter and the gaps upstream's dagre settings use (node 28, nodesep 30, ranksep 60).
pub const NODE: f64 = 28.0;
pub const COL: f64 = NODE + 30.0;
pub const ROW: f64 = NODE + 60.0;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// Centre of each node.
    pub pos: HashMap<u64, (f64, f64)>,
    /// Bounding box of all node centres: (min_x, min_y, max_x, max_y).
    pub bounds: (f64, f64, f64, f64),
}

impl Layout {
    pub fn compute(g: &GraphModel) -> Layout {
        let children = g.children();
        let mut pos = HashMap::with_capacity(g.nodes.len());
        let mut next_slot = 0.0;
        // Roots: the model's root plus any node whose parent is unknown (should not happen, but a
        // partial model must still draw).
        let mut roots: Vec<u64> = g
            .nodes
            .keys()
            .copied()
            .filter(|&n| n == g.root || g.parent_of(n).is_none())
            .collect();
        roots.sort_unstable();
        roots.dedup();
        for root in roots {
            // Iterative post-order: (node, children visited?)
            let mut stack = vec![(root, false)];
            while let Some((n, expanded)) = stack.pop() {
                let kids = children.get(&n).map(Vec::as_slice).unwrap_or(&[]);
                let depth = f64::from(g.nodes.get(&n).copied().unwrap_or(0));
                if kids.is_empty() {
                    pos.insert(n, (next_slot * COL, depth * ROW));
                    next_slot += 1.0;
                } else if expanded {
                    let first = kids.first().and_then(|k| pos.get(k)).map_or(0.0, |p| p.0);
                    let last = kids.last().and_then(|k| pos.get(k)).map_or(first, |p| p.0);
                    pos.insert(n, ((first + last) / 2.0, depth * ROW));
                } else {
                    stack.push((n, true));
                    for &k in kids.iter().rev() {
                        stack.push((k, false));
                    }
                }
            }
        }
        let mut bounds = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
        for &(x, y) in pos.values() {
            bounds = (bounds.0.min(x), bounds.1.min(y), bounds.2.max(x), bounds.3.max(y));
        }
        if pos.is_empty() {
            bounds = (0.0, 0.0, 0.0, 0.0);
        }
        Layout { pos, bounds }
    }

    /// Ids whose circle intersects the world-space rectangle `(x0, y0, x1, y1)`.
    pub fn visible(&self, view: (f64, f64, f64, f64)) -> Vec<u64> {
        let r = NODE / 2.0;
        let mut ids: Vec<u64> = self
            .pos
            .iter()
            .filter(|&(_, &(x, y))| x + r >= view.0 && x - r <= view.2 && y + r >= view.1 && y - r <= view.3)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
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
        ViewTransform {
            tx: 40.0,
            ty: 40.0,
            scale: 1.0,
        }
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
        ViewTransform {
            tx: sx - (sx - self.tx) * k,
            ty: sy - (sy - self.ty) * k,
            scale,
        }
    }

    pub fn pan(self, dx: f64, dy: f64) -> ViewTransform {
        ViewTransform {
            tx: self.tx + dx,
            ty: self.ty + dy,
            ..self
        }
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
        ViewTransform {
            tx: width / 2.0 - wx * self.scale,
            ty: height / 2.0 - wy * self.scale,
            ..self
        }
    }

    /// The SVG transform. Full precision for the scale: at the scales a wide tree fits with
    /// (~0.001), four decimals would misplace nodes by pixels.
    pub fn svg(&self) -> String {
        format!("translate({:.2},{:.2}) scale({})", self.tx, self.ty, self.scale)
    }
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
            g.edges.push(GraphEdge {
                from,
                to,
                kind: EdgeType::Advance,
            });
        }
        g
    }

    fn assert_tidy(g: &GraphModel, l: &Layout) {
        assert_eq!(l.pos.len(), g.nodes.len());
        for e in &g.edges {
            assert!(
                l.pos[&e.from].1 < l.pos[&e.to].1,
                "parent {} above child {}",
                e.from,
                e.to
            );
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
    fn parents_sit_above_and_centred_over_their_children() {
        let g = model(&[(0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6)]);
        let l = Layout::compute(&g);
        assert_tidy(&g, &l);
        assert_eq!(l.pos[&1].0, l.pos[&4].0, "centred over the middle child");
        assert_eq!(l.pos[&2].0, l.pos[&6].0);
        assert!(
            l.pos[&3].0 < l.pos[&4].0 && l.pos[&4].0 < l.pos[&5].0,
            "children in attach order"
        );
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
            assert!(
                t.shows(l.pos[&id], 1000.0, 600.0, 0.0),
                "node {id} off screen at scale {}",
                t.scale
            );
        }
        assert_eq!(l.visible(t.world_view(1000.0, 600.0)).len(), 20_001);
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
