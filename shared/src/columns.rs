//! The columnar binary form of a tree's [`Graph`] (`GET …/graph/columns`): the same data as the
//! JSON graph, column by column in fixed-width little-endian numbers, so a client reads it with
//! a few bounds checks and no text parsing. The web UI's first render of a big tree takes it: on
//! a first load, before the browser has optimised the wasm, reading a 5,000-node graph from JSON
//! took 61–176 ms (with the page's first effects, which ran meanwhile); decoding this form takes
//! 2–22 ms.
//!
//! Layout (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `STGC` |
//! | 1 | version, [`VERSION`] |
//! | 3 | zero |
//! | 8 | `root` (u64) |
//! | 4 × 4 | counts: nodes `n`, edges `e`, frontier `f`, running `r` (u32 each) |
//! | 8n, 4n, 1n | the nodes' ids (u64), depths (u32), statuses ([`NodeStatus::code`]) |
//! | 8e, 8e, 1e | the edges' `from`, `to` (u64) and types ([`EdgeType::code`]) |
//! | 8f, 8r | `frontier`, `running` (u64) |
//!
//! The length must be exactly what the counts say, and every code known: anything else is a
//! [`ColumnsError`], never a panic nor an allocation larger than the input.

use crate::{EdgeType, Graph, GraphEdge, GraphNode, NodeStatus};

/// The first four bytes.
pub const MAGIC: &[u8; 4] = b"STGC";
/// The format's version (the fifth byte).
pub const VERSION: u8 = 1;
/// The media type the server answers with.
pub const MEDIA_TYPE: &str = "application/vnd.simtree.graph-columns";
const HEADER: usize = 32;

/// Why bytes are not a graph in the columnar form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnsError {
    /// Too short for the header, or not starting with [`MAGIC`].
    NotColumns,
    /// A version this build does not read.
    Version(u8),
    /// The length differs from what the counts make.
    Length { expected: u64, actual: u64 },
    /// A node status or edge type code no variant has.
    Code { column: &'static str, code: u8 },
}

impl std::fmt::Display for ColumnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ColumnsError::NotColumns => write!(f, "not a columnar graph"),
            ColumnsError::Version(v) => write!(f, "columnar graph version {v} is not supported"),
            ColumnsError::Length { expected, actual } => {
                write!(f, "columnar graph of {actual} bytes, its counts make {expected}")
            }
            ColumnsError::Code { column, code } => write!(f, "unknown code {code} in the column {column}"),
        }
    }
}

impl std::error::Error for ColumnsError {}

const STATUSES: [NodeStatus; 5] =
    [NodeStatus::Done, NodeStatus::Running, NodeStatus::Failed, NodeStatus::Cancelled, NodeStatus::Interrupted];

/// Every edge type, in the order of their bytes (the root's first).
pub(crate) const EDGE_TYPES: [EdgeType; 10] = [
    EdgeType::Root,
    EdgeType::Advance,
    EdgeType::AgentCtx,
    EdgeType::AgentPlan,
    EdgeType::AgentProps,
    EdgeType::SceneState,
    EdgeType::PublicEvent,
    EdgeType::Multi,
    EdgeType::Sweep,
    EdgeType::Explore,
];

impl NodeStatus {
    /// The status's byte in the columnar graph.
    pub fn code(self) -> u8 {
        STATUSES.iter().position(|s| *s == self).unwrap_or(0) as u8
    }
}

impl EdgeType {
    /// The type's byte in the columnar graph.
    pub fn code(self) -> u8 {
        EDGE_TYPES.iter().position(|t| *t == self).unwrap_or(0) as u8
    }
}

/// A count as the u32 the header holds (a graph never has 4 billion nodes; saturating keeps this
/// total, and the reader then refuses the length).
fn count(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes()
}

/// The byte length the header's counts make.
fn expected_len(n: u64, e: u64, f: u64, r: u64) -> u64 {
    HEADER as u64 + 13 * n + 17 * e + 8 * (f + r)
}

/// Reads fixed-width columns off the front of a byte slice whose length was checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        head
    }

    fn u64s(&mut self, n: usize) -> impl Iterator<Item = u64> + 'a {
        self.take(8 * n).chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
    }

    fn u32s(&mut self, n: usize) -> impl Iterator<Item = u32> + 'a {
        self.take(4 * n).chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    fn codes<T: Copy>(&mut self, n: usize, table: &[T], column: &'static str) -> Result<Vec<T>, ColumnsError> {
        self.take(n)
            .iter()
            .map(|&code| table.get(usize::from(code)).copied().ok_or(ColumnsError::Code { column, code }))
            .collect()
    }
}

/// Rows made of three columns read side by side.
fn rows<A, B, C, T>(
    a: impl Iterator<Item = A>,
    b: impl Iterator<Item = B>,
    c: Vec<C>,
    row: impl Fn(A, B, C) -> T,
) -> Vec<T> {
    a.zip(b).zip(c).map(|((a, b), c)| row(a, b, c)).collect()
}

impl Graph {
    /// The graph in the columnar form (see the module's documentation).
    pub fn to_columns(&self) -> Vec<u8> {
        let (n, e) = (self.nodes.len(), self.edges.len());
        let len = expected_len(n as u64, e as u64, self.frontier.len() as u64, self.running.len() as u64);
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[VERSION, 0, 0, 0]);
        out.extend_from_slice(&self.root.to_le_bytes());
        for c in [n, e, self.frontier.len(), self.running.len()] {
            out.extend_from_slice(&count(c));
        }
        out.extend(self.nodes.iter().flat_map(|x| x.id.to_le_bytes()));
        out.extend(self.nodes.iter().flat_map(|x| x.depth.to_le_bytes()));
        out.extend(self.nodes.iter().map(|x| x.status.code()));
        out.extend(self.edges.iter().flat_map(|x| x.from.to_le_bytes()));
        out.extend(self.edges.iter().flat_map(|x| x.to.to_le_bytes()));
        out.extend(self.edges.iter().map(|x| x.kind.code()));
        out.extend(self.frontier.iter().chain(&self.running).flat_map(|x| x.to_le_bytes()));
        out
    }

    /// Reads a graph in the columnar form, checking its magic, version, length and codes.
    pub fn from_columns(bytes: &[u8]) -> Result<Graph, ColumnsError> {
        if bytes.len() < HEADER || &bytes[..4] != MAGIC {
            return Err(ColumnsError::NotColumns);
        }
        if bytes[4] != VERSION {
            return Err(ColumnsError::Version(bytes[4]));
        }
        let mut r = Reader(&bytes[8..]);
        let root = r.u64s(1).next().unwrap_or(0);
        let counts: Vec<u32> = r.u32s(4).collect();
        let [n, e, f, k] = [counts[0], counts[1], counts[2], counts[3]].map(u64::from);
        let expected = expected_len(n, e, f, k);
        if expected != bytes.len() as u64 {
            return Err(ColumnsError::Length { expected, actual: bytes.len() as u64 });
        }
        // The counts fit the input's length, so they fit usize.
        let [n, e, f, k] = [n, e, f, k].map(|c| c as usize);
        let nodes = rows(r.u64s(n), r.u32s(n), r.codes(n, &STATUSES, "status")?, |id, depth, status| GraphNode {
            id,
            depth,
            status,
        });
        let edges =
            rows(r.u64s(e), r.u64s(e), r.codes(e, &EDGE_TYPES, "type")?, |from, to, kind| GraphEdge { from, to, kind });
        Ok(Graph { root, frontier: r.u64s(f).collect(), running: r.u64s(k).collect(), nodes, edges })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Graph {
        Graph {
            root: 3,
            frontier: vec![5, u64::MAX],
            running: vec![5],
            nodes: [(3, 0, NodeStatus::Done), (5, 1, NodeStatus::Running), (u64::MAX, 7, NodeStatus::Interrupted)]
                .into_iter()
                .map(|(id, depth, status)| GraphNode { id, depth, status })
                .collect(),
            edges: vec![
                GraphEdge { from: 3, to: 5, kind: EdgeType::Advance },
                GraphEdge { from: 5, to: u64::MAX, kind: EdgeType::Sweep },
            ],
        }
    }

    #[test]
    fn a_graph_comes_back_unchanged_and_every_code_round_trips() {
        let g = sample();
        let bytes = g.to_columns();
        assert_eq!(bytes.len() as u64, expected_len(3, 2, 2, 1));
        assert_eq!(Graph::from_columns(&bytes), Ok(g));
        let empty = Graph { root: 0, frontier: vec![], running: vec![], nodes: vec![], edges: vec![] };
        assert_eq!(Graph::from_columns(&empty.to_columns()), Ok(empty));
        for (i, s) in STATUSES.iter().enumerate() {
            assert_eq!(usize::from(s.code()), i);
        }
        for (i, t) in EDGE_TYPES.iter().enumerate() {
            assert_eq!(usize::from(t.code()), i);
        }
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let good = sample().to_columns();
        assert_eq!(Graph::from_columns(b""), Err(ColumnsError::NotColumns));
        assert_eq!(Graph::from_columns(&good[..31]), Err(ColumnsError::NotColumns));
        let mut json = br#"{"root":0,"frontier":[],"running":[],"nodes":[]}"#.to_vec();
        json.resize(64, b' ');
        assert_eq!(Graph::from_columns(&json), Err(ColumnsError::NotColumns));
        let mut v2 = good.clone();
        v2[4] = 2;
        assert_eq!(Graph::from_columns(&v2), Err(ColumnsError::Version(2)));
        // Every truncation and one extra byte.
        for len in 32..good.len() {
            assert!(matches!(Graph::from_columns(&good[..len]), Err(ColumnsError::Length { .. })));
        }
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(Graph::from_columns(&long), Err(ColumnsError::Length { .. })));
        // Counts claiming 4 billion nodes in a 32-byte input.
        let mut huge = good[..32].to_vec();
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Graph::from_columns(&huge),
            Err(ColumnsError::Length { expected: expected_len(u64::from(u32::MAX), 2, 2, 1), actual: 32 })
        );
        // An unknown status and an unknown edge type.
        let status_at = 32 + 8 * 3 + 4 * 3;
        let kind_at = status_at + 3 + 16 * 2;
        for (at, code, column) in [(status_at, 5, "status"), (kind_at + 1, 200, "type")] {
            let mut bad = good.clone();
            bad[at] = code;
            assert_eq!(Graph::from_columns(&bad), Err(ColumnsError::Code { column, code }));
        }
    }
}
