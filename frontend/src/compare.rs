//! Comparing two nodes: their lowest common ancestor and, side by side, the events each produced
//! since it, with the first diverging event marked. Works on full node logs (root-path
//! concatenations), so it needs no extra server route.

use simtree_shared::LogEntry;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// The deepest node both logs share.
    pub lca: u64,
    /// Entries of each side after the shared prefix of the LCA's own path.
    pub left: Vec<LogEntry>,
    pub right: Vec<LogEntry>,
    /// Index (into `left`/`right`) of the first position where the events differ, comparing type
    /// and data (not the producing node); `None` when one side is a prefix of the other and both
    /// are equally long.
    pub first_divergence: Option<usize>,
}

/// `path_a`/`path_b` are the root paths of the two nodes (root first); `logs_*` their full logs.
pub fn compare(path_a: &[u64], logs_a: &[LogEntry], path_b: &[u64], logs_b: &[LogEntry]) -> Comparison {
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
    let common = left.iter().zip(&right).take_while(|(a, b)| same(a, b)).count();
    let first_divergence = (common < left.len().max(right.len())).then_some(common);
    Comparison {
        lca,
        left,
        right,
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

    #[test]
    fn finds_the_lca_and_the_first_divergence() {
        let shared = vec![e(0, "start"), e(1, "turn 1")];
        let mut a = shared.clone();
        a.extend([e(2, "same"), e(2, "left only")]);
        let mut b = shared.clone();
        b.extend([e(3, "same"), e(3, "right only"), e(3, "more")]);
        let c = compare(&[0, 1, 2], &a, &[0, 1, 3], &b);
        assert_eq!(c.lca, 1);
        assert_eq!(c.left.len(), 2);
        assert_eq!(c.right.len(), 3);
        assert_eq!(
            c.first_divergence,
            Some(1),
            "equal events from different nodes are not a divergence"
        );
    }

    #[test]
    fn identical_branches_do_not_diverge_and_ancestors_compare() {
        let a = vec![e(0, "x"), e(1, "y")];
        let b = vec![e(0, "x"), e(2, "y")];
        assert_eq!(compare(&[0, 1], &a, &[0, 2], &b).first_divergence, None);
        // Comparing a node with its own ancestor: everything after the ancestor is "new".
        let c = compare(&[0], &a[..1], &[0, 1], &a);
        assert_eq!(
            (c.lca, c.left.len(), c.right.len(), c.first_divergence),
            (0, 0, 1, Some(0))
        );
    }
}
