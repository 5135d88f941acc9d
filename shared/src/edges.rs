//! Filtering a graph by edge type: `GET …/graph?edges=advance,branch` on the server and the
//! graph's edge-type filter in the web UI both keep the root, every node whose edge from its
//! parent is of a kept type, and nothing below a node left out (its subtree goes with it).

use std::collections::BTreeSet;

use crate::{EdgeType, Graph, GraphEdge};

/// The groups of edge types a filter may name besides the types themselves.
pub const EDGE_GROUPS: [&str; 1] = ["branch"];

/// Every edge type a user can name (all but the root's), in the order the UI lists them.
pub fn edge_types() -> &'static [EdgeType] {
    &crate::columns::EDGE_TYPES[1..]
}

impl EdgeType {
    /// The name on the wire (`agent_ctx`, `sweep`…).
    pub fn name(self) -> &'static str {
        match self {
            EdgeType::Root => "root",
            EdgeType::Advance => "advance",
            EdgeType::AgentCtx => "agent_ctx",
            EdgeType::AgentPlan => "agent_plan",
            EdgeType::AgentProps => "agent_props",
            EdgeType::SceneState => "scene_state",
            EdgeType::PublicEvent => "public_event",
            EdgeType::Multi => "multi",
            EdgeType::Sweep => "sweep",
            EdgeType::Explore => "explore",
        }
    }

    /// A branch made by hand (a branch op or several), not an advance, sweep or exploration.
    pub fn is_branch(self) -> bool {
        !matches!(self, EdgeType::Root | EdgeType::Advance | EdgeType::Sweep | EdgeType::Explore)
    }
}

/// A name in an edge filter that is no edge type nor group (cut to 40 characters, control
/// characters escaped).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{shown}' is not an edge type; name some of {known}, or the group 'branch'")]
pub struct UnknownEdgeType {
    shown: String,
    known: String,
}

/// The edge types a filter keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EdgeFilter(Vec<EdgeType>);

impl EdgeFilter {
    /// Reads a comma-separated list of edge types and groups (`advance,branch`), or says which
    /// name is not one.
    pub fn parse(list: &str) -> Result<EdgeFilter, UnknownEdgeType> {
        let mut keep = EdgeFilter::default();
        for name in list.split(',').map(str::trim) {
            if name == "branch" {
                edge_types().iter().filter(|t| t.is_branch()).for_each(|&t| keep.add(t));
                continue;
            }
            match edge_types().iter().find(|t| t.name() == name) {
                Some(&t) => keep.add(t),
                None => {
                    return Err(UnknownEdgeType {
                        shown: name.chars().take(40).flat_map(char::escape_default).collect(),
                        known: edge_types().iter().map(|t| t.name()).collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
        Ok(keep)
    }

    /// Every edge type but `hidden`.
    pub fn all_but(hidden: &[EdgeType]) -> EdgeFilter {
        EdgeFilter(edge_types().iter().copied().filter(|t| !hidden.contains(t)).collect())
    }

    pub fn add(&mut self, t: EdgeType) {
        if !self.0.contains(&t) {
            self.0.push(t);
        }
    }

    pub fn keeps(&self, t: EdgeType) -> bool {
        self.0.contains(&t)
    }
}

/// The nodes `keep` lets through in a tree given by its root and edges: the root, and every node
/// whose edge is kept and whose parent is kept (a node left out takes its subtree with it).
pub fn kept_nodes(root: u64, edges: &[GraphEdge], keep: impl Fn(EdgeType) -> bool) -> BTreeSet<u64> {
    let mut by_child: Vec<&GraphEdge> = edges.iter().collect();
    // Ids grow from parent to child, so a parent is decided before its children.
    by_child.sort_unstable_by_key(|e| e.to);
    let mut kept = BTreeSet::from([root]);
    for e in by_child {
        if kept.contains(&e.from) && keep(e.kind) {
            kept.insert(e.to);
        }
    }
    kept
}

impl Graph {
    /// The graph with only the nodes `keep` lets through (see [`kept_nodes`]) and the
    /// edges, frontier and running runs among them.
    pub fn filter_edges(&self, keep: impl Fn(EdgeType) -> bool) -> Graph {
        let kept = kept_nodes(self.root, &self.edges, keep);
        Graph {
            root: self.root,
            frontier: self.frontier.iter().copied().filter(|n| kept.contains(n)).collect(),
            running: self.running.iter().copied().filter(|n| kept.contains(n)).collect(),
            nodes: self.nodes.iter().filter(|n| kept.contains(&n.id)).cloned().collect(),
            edges: self.edges.iter().filter(|e| kept.contains(&e.to)).cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GraphNode, NodeStatus};

    fn graph(edges: &[(u64, u64, EdgeType)]) -> Graph {
        let mut nodes = vec![GraphNode { id: 0, depth: 0, status: NodeStatus::Done }];
        nodes.extend(edges.iter().map(|&(_, to, _)| GraphNode { id: to, depth: 1, status: NodeStatus::Done }));
        Graph {
            root: 0,
            frontier: edges.iter().map(|e| e.1).collect(),
            running: vec![],
            nodes,
            edges: edges.iter().map(|&(from, to, kind)| GraphEdge { from, to, kind }).collect(),
        }
    }

    #[test]
    fn a_left_out_node_takes_its_subtree_and_branch_names_the_hand_made_kinds() {
        let g = graph(&[
            (0, 1, EdgeType::Advance),
            (0, 2, EdgeType::Explore),
            (2, 3, EdgeType::Advance),
            (1, 4, EdgeType::AgentCtx),
            (1, 5, EdgeType::Sweep),
            (5, 6, EdgeType::Sweep),
        ]);
        let keep = EdgeFilter::parse("advance,branch").unwrap();
        let f = g.filter_edges(|t| keep.keeps(t));
        let ids: Vec<u64> = f.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, [0, 1, 4]);
        assert_eq!(f.edges.len(), 2);
        assert_eq!(f.frontier, [1, 4]);
        assert!(EdgeFilter::parse("advance,bogus").unwrap_err().to_string().contains("'bogus'"));
        assert!(EdgeFilter::parse("").is_err());
        assert!(EdgeFilter::parse("\u{1}").unwrap_err().to_string().contains("\\u{1}"));
        let no_jobs = EdgeFilter::all_but(&[EdgeType::Sweep, EdgeType::Explore]);
        let f = g.filter_edges(|t| no_jobs.keeps(t));
        assert_eq!(f.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), [0, 1, 4]);
    }
}
