//! Comparing two nodes like a diff: their lowest common ancestor and, side by side from it, the
//! events each produced, the k-th event of one side beside the k-th of the other, with the first
//! pair that differs marked. Events that belong to a point of the run are paired by that point,
//! not by their place: a trading decision with the decision of the same decision point, a model
//! step with the same step; a "what if" entry (a branch's ops) only with another one. So a
//! branch's "what if" sits on a row of its own and does not push its decisions one row off. Bookkeeping entries (context deltas, process starts and ends, action
//! starts: whatever the event list does not show) sit on rows of their own, which the panel hides
//! unless asked, and never make a divergence. Works on full node logs (root-path
//! concatenations), so it needs no extra server route.

use simtree_shared::abm::AbmStep;
use simtree_shared::trading::{DecisionBrief, DecisionEvent};
use simtree_shared::{EventType, LogEntry};

/// What an event is paired by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    /// Its place among the events (chat, scene events).
    Place,
    /// A point of the run: (0, decision point) or (1, model step).
    Point(u8, u64),
    /// A branch's "what if" entry.
    WhatIf,
}

fn key_of(e: &LogEntry) -> Key {
    match e.event_type() {
        Some(EventType::DecisionPoint) => e
            .payload_of::<DecisionEvent<DecisionBrief>>()
            .and_then(|d| d.log.decision_point_idx)
            .map_or(Key::Place, |i| Key::Point(0, i)),
        Some(EventType::AbmStep) => e.payload_of::<AbmStep>().map_or(Key::Place, |s| Key::Point(1, s.step)),
        Some(EventType::Counterfactual) => Key::WhatIf,
        _ => Key::Place,
    }
}

/// Which of two next events goes on the next row: both, or only the left or the right one.
fn pairing(left: Key, right: Key) -> (bool, bool) {
    match (left, right) {
        (Key::Place, Key::Place) | (Key::WhatIf, Key::WhatIf) => (true, true),
        (Key::Point(a, x), Key::Point(b, y)) if a == b => (x <= y, y <= x),
        // A "what if" first, then an unkeyed event, before a point.
        (Key::WhatIf, _) => (true, false),
        (_, Key::WhatIf) => (false, true),
        (Key::Place, _) => (true, false),
        (_, Key::Place) => (false, true),
        (Key::Point(a, _), Key::Point(b, _)) => (a < b, b < a),
    }
}

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
    let lca = path_a.iter().zip(path_b).take_while(|(a, b)| a == b).map(|(a, _)| *a).last().unwrap_or(0);
    let shared: Vec<u64> = path_a.iter().copied().take_while(|n| path_b.contains(n)).collect();
    let since = |logs: &[LogEntry]| logs.iter().filter(|e| !shared.contains(&e.node)).cloned().collect::<Vec<_>>();
    let left = since(logs_a);
    let right = since(logs_b);
    let same = |a: &LogEntry, b: &LogEntry| a.kind == b.kind && a.data == b.data;
    let mut rows = Vec::new();
    let mut first_divergence = None;
    let (mut i, mut j, mut k) = (0, 0, 0);
    loop {
        while i < left.len() && !is_event(&left[i]) {
            rows.push(Row { left: Some(i), right: None, event: None, diverge: false });
            i += 1;
        }
        while j < right.len() && !is_event(&right[j]) {
            rows.push(Row { left: None, right: Some(j), event: None, diverge: false });
            j += 1;
        }
        let (mut l, mut r) = ((i < left.len()).then_some(i), (j < right.len()).then_some(j));
        if l.is_none() && r.is_none() {
            break;
        }
        if let (Some(a), Some(b)) = (l, r) {
            let (take_l, take_r) = pairing(key_of(&left[a]), key_of(&right[b]));
            l = l.filter(|_| take_l);
            r = r.filter(|_| take_r);
        }
        let differs = match (l, r) {
            (Some(a), Some(b)) => !same(&left[a], &right[b]),
            _ => true,
        };
        let diverge = differs && first_divergence.is_none();
        if diverge {
            first_divergence = Some(k);
        }
        rows.push(Row { left: l, right: r, event: Some(k), diverge });
        i += usize::from(l.is_some());
        j += usize::from(r.is_some());
        k += 1;
    }
    Comparison { lca, left, right, rows, first_divergence }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn e(node: u64, text: &str) -> LogEntry {
        LogEntry { kind: "system_broadcast".into(), data: json!({"text": text}), node }
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
        assert_eq!(c.first_divergence, Some(1), "equal events from different nodes are not a divergence");
        let pairs: Vec<(Option<usize>, Option<usize>, bool)> =
            c.rows.iter().map(|r| (r.left, r.right, r.diverge)).collect();
        assert_eq!(pairs, [(Some(0), Some(0), false), (Some(1), Some(1), true), (None, Some(2), false)]);
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

    fn decision(node: u64, idx: u64, text: &str) -> LogEntry {
        LogEntry {
            kind: "decision_point".into(),
            data: json!({"log": {"case_id": format!("ep:{idx}"), "decision_point_idx": idx,
                                 "agent_output": {"text": text}, "execution_result": {"message": "ok"}},
                         "portfolio": {"cash": 1.0, "positions": {}}, "value": 1.0, "done": false}),
            node,
        }
    }

    fn what_if(node: u64) -> LogEntry {
        LogEntry { kind: "counterfactual".into(), data: json!({"ops": [{"op": "portfolio_patch", "cash": 5.0}]}), node }
    }

    /// Issue 38: after a counterfactual, decision N was paired with decision N − 1 of the other
    /// side (the "what if" entry took the first row).
    #[test]
    fn decisions_pair_by_decision_point_and_a_what_if_sits_alone() {
        let root = vec![decision(1, 0, "buy")];
        let mut a = root.clone();
        a.extend([decision(2, 1, "hold"), decision(2, 2, "hold")]);
        let mut b = root.clone();
        b.extend([what_if(3), decision(3, 1, "sell"), decision(3, 2, "hold")]);
        let c = compare(&[0, 1, 2], &a, &[0, 1, 3], &b, events);
        assert_eq!(rows(&c), WHAT_IF_THEN_PAIRS, "the what-if alone, then decision 1 beside decision 1, 2 beside 2");
        // A side that starts later (its parent ran more decisions) lines up by point too.
        let late = vec![decision(4, 2, "hold")];
        let c = compare(&[0, 2], &a[1..], &[0, 4], &late, events);
        let pairs: Vec<(Option<usize>, Option<usize>)> = c.rows.iter().map(|r| (r.left, r.right)).collect();
        assert_eq!(pairs, [(Some(0), None), (Some(1), Some(0))]);
        // Model steps pair by step number.
        let step = |node: u64, n: u64, x: u64| LogEntry {
            kind: "abm_step".into(),
            data: json!({"step": n, "values": {"x": x}}),
            node,
        };
        let c = compare(
            &[0, 1],
            &[step(1, 3, 1), step(1, 4, 1)],
            &[0, 2],
            &[what_if(2), step(2, 3, 1), step(2, 4, 2)],
            events,
        );
        assert_eq!(rows(&c), WHAT_IF_THEN_PAIRS, "step 3 beside step 3, 4 beside 4");
    }

    /// A comparison's rows as (left entry, right entry, diverges).
    fn rows(c: &Comparison) -> Vec<(Option<usize>, Option<usize>, bool)> {
        c.rows.iter().map(|r| (r.left, r.right, r.diverge)).collect()
    }

    /// A "what if" entry alone on the right, then two pairs that agree.
    const WHAT_IF_THEN_PAIRS: [(Option<usize>, Option<usize>, bool); 3] =
        [(None, Some(0), true), (Some(0), Some(1), false), (Some(1), Some(2), false)];

    #[test]
    fn identical_branches_do_not_diverge_and_ancestors_compare() {
        let a = vec![e(0, "x"), e(1, "y")];
        let b = vec![e(0, "x"), e(2, "y")];
        assert_eq!(compare(&[0, 1], &a, &[0, 2], &b, events).first_divergence, None);
        // Comparing a node with its own ancestor: everything after the ancestor is "new".
        let c = compare(&[0], &a[..1], &[0, 1], &a, events);
        assert_eq!((c.lca, c.left.len(), c.right.len(), c.first_divergence), (0, 0, 1, Some(0)));
    }
}
