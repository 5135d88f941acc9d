//! Comparing two nodes like a diff: their lowest common ancestor and, side by side from it, the
//! events each produced, the k-th event of one side beside the k-th of the other, with the first
//! pair that differs marked. Bookkeeping entries (context deltas, process starts and ends, action
//! starts: whatever the event list does not show) sit on rows of their own, which the panel hides
//! unless asked, and never make a divergence. Works on full node logs (root-path
//! concatenations), so it needs no extra server route.

use simtree_shared::LogEntry;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// The deepest node both logs share.
    pub lca: u64,
    /// Entries of each side after the shared prefix of the LCA's own path.
    pub left: Vec<LogEntry>,
    pub right: Vec<LogEntry>,
    /// The two sides aligned, from the LCA on.
    pub rows: Vec<Row>,
    /// The number (from 0, counting events only) of the first event where the sides differ,
    /// comparing type and data (not the producing node); `None` when both have the same events.
    pub first_divergence: Option<usize>,
}

/// One row of a comparison: an event of each side (one side missing when the other has more
/// events), or one bookkeeping entry of one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Index into [`Comparison::left`] / [`Comparison::right`].
    pub left: Option<usize>,
    pub right: Option<usize>,
    /// The event number of an event row; `None` for a bookkeeping row.
    pub event: Option<usize>,
    /// The row of the first divergence.
    pub diverge: bool,
}

impl Row {
    pub fn bookkeeping(&self) -> bool {
        self.event.is_none()
    }
}

/// `path_a`/`path_b` are the root paths of the two nodes (root first); `logs_*` their full logs;
/// `is_event` tells an event from a bookkeeping entry.
pub fn compare(
    path_a: &[u64],
    logs_a: &[LogEntry],
    path_b: &[u64],
    logs_b: &[LogEntry],
    is_event: impl Fn(&LogEntry) -> bool,
) -> Comparison {
    let lca = path_a
        .iter()
        .zip(path_b)
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| *a)
        .last()
        .unwrap_or(0);
    let shared: Vec<u64> = path_a.iter().copied().take_while(|n| path_b.contains(n)).collect();
    let since = |logs: &[LogEntry]| {
        logs.iter()
            .filter(|e| !shared.contains(&e.node))
            .cloned()
            .collect::<Vec<_>>()
    };
    let left = since(logs_a);
    let right = since(logs_b);
    let same = |a: &LogEntry, b: &LogEntry| a.kind == b.kind && a.data == b.data;
    let mut rows = Vec::new();
    let mut first_divergence = None;
    let (mut i, mut j, mut k) = (0, 0, 0);
    loop {
        while i < left.len() && !is_event(&left[i]) {
            rows.push(Row {
                left: Some(i),
                right: None,
                event: None,
                diverge: false,
            });
            i += 1;
        }
        while j < right.len() && !is_event(&right[j]) {
            rows.push(Row {
                left: None,
                right: Some(j),
                event: None,
                diverge: false,
            });
            j += 1;
        }
        let (l, r) = ((i < left.len()).then_some(i), (j < right.len()).then_some(j));
        if l.is_none() && r.is_none() {
            break;
        }
        let differs = match (l, r) {
            (Some(a), Some(b)) => !same(&left[a], &right[b]),
            _ => true,
        };
        let diverge = differs && first_divergence.is_none();
        if diverge {
            first_divergence = Some(k);
        }
        rows.push(Row {
            left: l,
            right: r,
            event: Some(k),
            diverge,
        });
        i += usize::from(l.is_some());
        j += usize::from(r.is_some());
        k += 1;
    }
    Comparison {
        lca,
        left,
        right,
        rows,
        first_divergence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn e(node: u64, text: &str) -> LogEntry {
        LogEntry {
            kind: "system_broadcast".into(),
            data: json!({"text": text}),
            node,
        }
    }

    /// A bookkeeping entry (a context delta).
    fn delta(node: u64, text: &str) -> LogEntry {
        LogEntry {
            kind: "agent_ctx_delta".into(),
            data: json!({"agent": "Alice", "role": "user", "content": text}),
            node,
        }
    }

    fn events(e: &LogEntry) -> bool {
        e.kind != "agent_ctx_delta"
    }

    #[test]
    fn finds_the_lca_and_the_first_divergence() {
        let shared = vec![e(0, "start"), e(1, "turn 1")];
        let mut a = shared.clone();
        a.extend([e(2, "same"), e(2, "left only")]);
        let mut b = shared.clone();
        b.extend([e(3, "same"), e(3, "right only"), e(3, "more")]);
        let c = compare(&[0, 1, 2], &a, &[0, 1, 3], &b, events);
        assert_eq!(c.lca, 1);
        assert_eq!(c.left.len(), 2);
        assert_eq!(c.right.len(), 3);
        assert_eq!(
            c.first_divergence,
            Some(1),
            "equal events from different nodes are not a divergence"
        );
        let pairs: Vec<(Option<usize>, Option<usize>, bool)> =
            c.rows.iter().map(|r| (r.left, r.right, r.diverge)).collect();
        assert_eq!(
            pairs,
            [
                (Some(0), Some(0), false),
                (Some(1), Some(1), true),
                (None, Some(2), false)
            ]
        );
    }

    #[test]
    fn bookkeeping_sits_apart_and_never_makes_a_divergence() {
        // The right side has an extra context delta first: its events still line up with the
        // left's, and they are the same.
        let a = vec![e(0, "x"), delta(1, "seen"), e(1, "hello")];
        let b = vec![e(0, "x"), delta(2, "seen"), delta(2, "also seen"), e(2, "hello")];
        let c = compare(&[0, 1], &a, &[0, 2], &b, events);
        assert_eq!(c.first_divergence, None);
        let shown: Vec<&Row> = c.rows.iter().filter(|r| !r.bookkeeping()).collect();
        assert_eq!(shown.len(), 1);
        assert_eq!((shown[0].left, shown[0].right), (Some(1), Some(2)), "aligned by event");
        assert_eq!(c.rows.iter().filter(|r| r.bookkeeping()).count(), 3);
        // Bookkeeping differing alone is no divergence either; an event is.
        let d = vec![e(0, "x"), delta(2, "other"), e(2, "bye")];
        let c = compare(&[0, 1], &a, &[0, 2], &d, events);
        assert_eq!(c.first_divergence, Some(0));
        assert!(c.rows.iter().find(|r| r.diverge).is_some_and(|r| r.event == Some(0)));
    }

    #[test]
    fn identical_branches_do_not_diverge_and_ancestors_compare() {
        let a = vec![e(0, "x"), e(1, "y")];
        let b = vec![e(0, "x"), e(2, "y")];
        assert_eq!(compare(&[0, 1], &a, &[0, 2], &b, events).first_divergence, None);
        // Comparing a node with its own ancestor: everything after the ancestor is "new".
        let c = compare(&[0], &a[..1], &[0, 1], &a, events);
        assert_eq!(
            (c.lca, c.left.len(), c.right.len(), c.first_divergence),
            (0, 0, 1, Some(0))
        );
    }
}
