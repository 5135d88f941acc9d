//! SimTree: branching timelines of one simulation (spec §2).
//!
//! Each node holds the simulator state it ended with and only its *own* log entries; the log of a
//! node is the concatenation of its root path, each entry tagged with the node that produced it.
//! Together with persistent agent memories this keeps memory linear in events and makes forking a
//! node cost the same at depth 1 and depth 10,000.
//!
//! This module is synchronous and lock-free by itself; `http::state` wraps it in a mutex and runs
//! simulations outside the lock. Invariants kept here: ids are unique and never reused, every
//! parent exists, a failed branch allocates nothing, the root cannot be deleted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use simtree_shared::NodeStatus;
use simtree_shared::{Attached, EdgeType, Graph, GraphEdge, GraphNode, NodeState, Op, Summary, SummaryEdge};
use tokio::sync::broadcast;

use crate::engine::event::Event;
use crate::llm::ledger::{LlmRecord, UsageTotals};
use crate::sim::Sim;
use crate::trading::data::MarketData;

pub type NodeId = u64;

/// Errors of tree operations; the HTTP layer maps them to status codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("node {0} not found")]
    NodeNotFound(NodeId),
    #[error("Cannot delete root node")]
    DeleteRoot,
    #[error("node {0} is running; wait for it to finish")]
    Running(NodeId),
    #[error("{0}")]
    InvalidOp(String),
    #[error("this tree has used every node id; export it and import the export into a new tree")]
    IdsExhausted,
}

/// The largest node id: ids stay exact in JavaScript numbers (the web UI reads them as such).
pub const MAX_NODE_ID: NodeId = (1 << 53) - 1;

/// Capacity of each node's live-entry channel (per watcher backlog before a resync).
pub const NODE_CHANNEL_CAPACITY: usize = 1024;

/// A node's own log entries (serialised JSON `{type, data, node}`, stored back to back in one
/// string to keep per-entry overhead out of large trees) and, once someone watches, a broadcast
/// channel that carries new entries live.
#[derive(Debug, Default)]
pub struct NodeLog {
    inner: Mutex<NodeLogInner>,
}

#[derive(Debug, Default)]
struct NodeLogInner {
    text: String,
    /// End offset of each entry in `text`.
    ends: Vec<usize>,
    live: Option<broadcast::Sender<Arc<str>>>,
}

impl NodeLogInner {
    fn push(&mut self, entry: &str) {
        self.text.push_str(entry);
        self.ends.push(self.text.len());
    }

    fn entries(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(a, b)| &self.text[a..b])
    }
}

impl NodeLog {
    fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        let mut inner = NodeLogInner::default();
        for e in entries {
            inner.push(e);
        }
        inner.text.shrink_to_fit();
        inner.ends.shrink_to_fit();
        NodeLog {
            inner: Mutex::new(inner),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NodeLogInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one entry and forwards it to live watchers.
    pub fn push(&self, entry: &str) {
        let mut inner = self.lock();
        if let Some(tx) = &inner.live {
            let _ = tx.send(Arc::from(entry));
        }
        inner.push(entry);
    }

    /// Releases spare capacity once the node's run is over.
    pub fn seal(&self) {
        let mut inner = self.lock();
        inner.text.shrink_to_fit();
        inner.ends.shrink_to_fit();
    }

    /// Calls `f` with each entry, in order, under the log's lock.
    pub fn for_each(&self, mut f: impl FnMut(&str)) {
        self.lock().entries().for_each(&mut f);
    }

    pub fn entries(&self) -> Vec<String> {
        self.lock().entries().map(str::to_string).collect()
    }

    pub fn len(&self) -> usize {
        self.lock().ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Subscribes to entries pushed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        let mut inner = self.lock();
        inner
            .live
            .get_or_insert_with(|| broadcast::channel(NODE_CHANNEL_CAPACITY).0)
            .subscribe()
    }
}

/// Serialises an engine event as a log entry of `node`.
pub fn entry_json(event: &Event, node: NodeId) -> String {
    #[derive(Serialize)]
    struct Entry<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        data: &'a Value,
        node: NodeId,
    }
    serde_json::to_string(&Entry {
        kind: event.kind.as_str(),
        data: &event.data,
        node,
    })
    .unwrap_or_else(|_| "{}".into())
}

#[derive(Debug)]
pub struct Node {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u32,
    pub edge_type: EdgeType,
    pub ops: Vec<Op>,
    pub children: Vec<NodeId>,
    /// The node's simulator; `None` while it runs (the run owns it).
    pub sim: Option<Arc<Sim>>,
    pub log: Arc<NodeLog>,
    pub status: NodeStatus,
    /// Why the run failed, when it did.
    pub error: Option<String>,
    /// Every real LLM call of the node's run (request hash → response, tokens), for replay.
    pub records: Vec<LlmRecord>,
}

impl Node {
    pub fn attached(&self) -> Attached {
        Attached {
            node: self.id,
            parent: self.parent,
            depth: self.depth,
            edge_type: self.edge_type,
            ops: self.ops.clone(),
        }
    }
}

#[derive(Debug)]
pub struct SimTree {
    /// Which scenario the tree was made from.
    pub scenario: String,
    nodes: BTreeMap<NodeId, Node>,
    next_id: NodeId,
}

impl SimTree {
    /// A tree whose root holds `sim`; the simulator's pending events become the root's log.
    pub fn new(scenario: impl Into<String>, mut sim: Sim) -> Self {
        let events = sim.initial_events();
        let entries: Vec<String> = events.iter().map(|e| entry_json(e, 0)).collect();
        let root = Node {
            id: 0,
            parent: None,
            depth: 0,
            edge_type: EdgeType::Root,
            ops: Vec::new(),
            children: Vec::new(),
            sim: Some(Arc::new(sim.fork())),
            log: Arc::new(NodeLog::from_entries(entries.iter().map(String::as_str))),
            status: NodeStatus::Done,
            error: None,
            records: Vec::new(),
        };
        SimTree {
            scenario: scenario.into(),
            nodes: BTreeMap::from([(0, root)]),
            next_id: 1,
        }
    }

    pub fn root(&self) -> NodeId {
        0
    }

    /// True when the tree holds agent-based models (they need the Python worker).
    pub fn has_abm(&self) -> bool {
        self.nodes
            .get(&0)
            .and_then(|n| n.sim.as_ref())
            .is_some_and(|s| matches!(**s, Sim::Abm(_)))
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn node(&self, id: NodeId) -> Result<&Node, TreeError> {
        self.nodes.get(&id).ok_or(TreeError::NodeNotFound(id))
    }

    /// The finished simulator of a node (an error while it runs).
    pub fn sim(&self, id: NodeId) -> Result<&Arc<Sim>, TreeError> {
        self.node(id)?.sim.as_ref().ok_or(TreeError::Running(id))
    }

    /// The id the next attached node gets, if any is left.
    fn next_free_id(&self) -> Result<NodeId, TreeError> {
        if self.next_id > MAX_NODE_ID {
            return Err(TreeError::IdsExhausted);
        }
        Ok(self.next_id)
    }

    fn attach(
        &mut self,
        parent: NodeId,
        ops: Vec<Op>,
        sim: Option<Arc<Sim>>,
        log: NodeLog,
    ) -> Result<NodeId, TreeError> {
        let id = self.next_free_id()?;
        self.next_id = id + 1;
        let depth = self.nodes.get(&parent).map_or(0, |p| p.depth + 1);
        let status = if sim.is_some() {
            NodeStatus::Done
        } else {
            NodeStatus::Running
        };
        let node = Node {
            id,
            parent: Some(parent),
            depth,
            edge_type: Op::edge_type_of(&ops),
            ops,
            children: Vec::new(),
            sim,
            log: Arc::new(log),
            status,
            error: None,
            records: Vec::new(),
        };
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children.push(id);
        }
        self.nodes.insert(id, node);
        Ok(id)
    }

    /// Creates a running child of `parent` that will advance `turns` turns; returns its id, the
    /// simulator to run and the log to run it into. The caller runs it and calls [`Self::finish`].
    pub fn start_advance(&mut self, parent: NodeId, turns: u64) -> Result<(NodeId, Sim, Arc<NodeLog>), TreeError> {
        let sim = self.sim(parent)?.fork();
        let id = self.attach(parent, vec![Op::Advance { turns }], None, NodeLog::default())?;
        let log = self.nodes[&id].log.clone();
        Ok((id, sim, log))
    }

    /// Stores a finished (or cancelled) run's simulator, status and LLM records. Returns false
    /// when the node was deleted meanwhile (then nothing is stored).
    pub fn finish(
        &mut self,
        id: NodeId,
        sim: Sim,
        status: NodeStatus,
        error: Option<String>,
        records: Vec<LlmRecord>,
    ) -> bool {
        let Some(node) = self.nodes.get_mut(&id) else {
            return false;
        };
        node.records = records;
        node.log.seal();
        node.sim = Some(Arc::new(sim));
        node.status = status;
        node.error = error;
        true
    }

    /// Marks a run that ended without a usable simulator (it panicked) as failed; the node keeps
    /// its parent's state so it stays usable. Returns false when the node was deleted meanwhile.
    pub fn fail_without_sim(&mut self, id: NodeId, error: String) -> bool {
        let parent_sim = self
            .nodes
            .get(&id)
            .and_then(|n| n.parent)
            .and_then(|p| self.nodes.get(&p)?.sim.clone());
        let Some(node) = self.nodes.get_mut(&id) else {
            return false;
        };
        node.log.seal();
        node.sim = parent_sim;
        node.status = NodeStatus::Failed;
        node.error = Some(error);
        true
    }

    /// Applies `ops` to a clone of `parent` and attaches it. All ops are validated on the private
    /// clone first: on any error nothing is allocated or attached.
    pub fn branch(&mut self, parent: NodeId, ops: Vec<Op>) -> Result<NodeId, TreeError> {
        let (sim, events) = self.prepare_branch(parent, &ops, "")?;
        self.attach_branch(parent, ops, sim, &events)
    }

    /// Several branches of one parent, all or none: every list of ops is applied to its own
    /// clone and the ids are checked before the first is attached. An error names the list
    /// (`cells[1].ops[0]: …`).
    pub fn branch_all(&mut self, parent: NodeId, lists: Vec<Vec<Op>>) -> Result<Vec<NodeId>, TreeError> {
        let prepared = lists
            .iter()
            .enumerate()
            .map(|(i, ops)| self.prepare_branch(parent, ops, &format!("cells[{i}].")))
            .collect::<Result<Vec<_>, _>>()?;
        if self.ids_left() < lists.len() as u64 {
            return Err(TreeError::IdsExhausted);
        }
        // Cannot fail half-way: every list applied and enough ids are left.
        lists
            .into_iter()
            .zip(prepared)
            .map(|(ops, (sim, events))| self.attach_branch(parent, ops, sim, &events))
            .collect()
    }

    /// How many more nodes this tree can ever attach (ids are never reused).
    pub fn ids_left(&self) -> u64 {
        (MAX_NODE_ID + 1).saturating_sub(self.next_id)
    }

    /// `parent`'s clone with `ops` applied, and the events they produced; nothing is attached.
    fn prepare_branch(&self, parent: NodeId, ops: &[Op], at: &str) -> Result<(Sim, Vec<Event>), TreeError> {
        let mut sim = self.sim(parent)?.fork();
        let mut events = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            events.extend(
                sim.apply_op(op)
                    .map_err(|e| TreeError::InvalidOp(format!("{at}ops[{i}]: {e}")))?,
            );
        }
        Ok((sim, events))
    }

    /// Attaches a prepared branch, its ops' events as its own log.
    fn attach_branch(&mut self, parent: NodeId, ops: Vec<Op>, sim: Sim, events: &[Event]) -> Result<NodeId, TreeError> {
        let id = self.next_free_id()?;
        let entries: Vec<String> = events.iter().map(|e| entry_json(e, id)).collect();
        let log = NodeLog::from_entries(entries.iter().map(String::as_str));
        self.attach(parent, ops, Some(Arc::new(sim)), log)
    }

    /// Removes `id` and all its descendants; returns the removed ids (for cancelling runs).
    pub fn delete_subtree(&mut self, id: NodeId) -> Result<Vec<NodeId>, TreeError> {
        let node = self.node(id)?;
        let Some(parent) = node.parent else {
            return Err(TreeError::DeleteRoot);
        };
        let mut removed = Vec::new();
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            if let Some(node) = self.nodes.remove(&n) {
                stack.extend(node.children);
                removed.push(n);
            }
        }
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children.retain(|&c| c != id);
        }
        removed.sort_unstable();
        Ok(removed)
    }

    /// Root path of `id`, root first.
    pub fn path(&self, id: NodeId) -> Result<Vec<NodeId>, TreeError> {
        let mut path = vec![id];
        let mut cur = self.node(id)?;
        while let Some(p) = cur.parent {
            path.push(p);
            cur = self.node(p)?;
        }
        path.reverse();
        Ok(path)
    }

    /// The full log of a node: its root path's own entries, in order.
    pub fn logs(&self, id: NodeId) -> Result<Vec<String>, TreeError> {
        let mut out = Vec::new();
        self.for_each_log_entry(id, |e| out.push(e.to_string()))?;
        Ok(out)
    }

    /// Visits the full log of a node without copying it.
    pub fn for_each_log_entry(&self, id: NodeId, mut f: impl FnMut(&str)) -> Result<(), TreeError> {
        for n in self.path(id)? {
            self.node(n)?.log.for_each(&mut f);
        }
        Ok(())
    }

    /// Lowest common ancestor.
    pub fn lca(&self, a: NodeId, b: NodeId) -> Result<NodeId, TreeError> {
        let pa = self.path(a)?;
        let pb = self.path(b)?;
        Ok(pa
            .iter()
            .zip(&pb)
            .take_while(|(x, y)| x == y)
            .map(|(x, _)| *x)
            .last()
            .unwrap_or(0))
    }

    /// Nodes without children, ascending.
    pub fn leaves(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|n| n.children.is_empty())
            .map(|n| n.id)
            .collect()
    }

    pub fn max_depth(&self) -> u32 {
        self.nodes.values().map(|n| n.depth).max().unwrap_or(0)
    }

    /// The leaves at maximum depth (`only_max_depth`) or all leaves.
    pub fn frontier(&self, only_max_depth: bool) -> Vec<NodeId> {
        let max = self.max_depth();
        self.nodes
            .values()
            .filter(|n| n.children.is_empty() && (!only_max_depth || n.depth == max))
            .map(|n| n.id)
            .collect()
    }

    /// LLM usage summed over the whole tree.
    pub fn usage(&self) -> UsageTotals {
        let mut total = UsageTotals::default();
        for n in self.nodes.values() {
            total.add(&UsageTotals::of(&n.records));
        }
        total
    }

    pub fn running(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|n| n.status == NodeStatus::Running)
            .map(|n| n.id)
            .collect()
    }

    pub fn graph(&self) -> Graph {
        let nodes = self
            .nodes
            .values()
            .map(|n| GraphNode {
                id: n.id,
                depth: n.depth,
                status: n.status,
            })
            .collect();
        let edges = self
            .nodes
            .values()
            .flat_map(|n| {
                n.children.iter().filter_map(|c| {
                    let child = self.nodes.get(c)?;
                    Some(GraphEdge {
                        from: n.id,
                        to: *c,
                        kind: child.edge_type,
                    })
                })
            })
            .collect();
        Graph {
            root: 0,
            frontier: self.frontier(true),
            running: self.running(),
            nodes,
            edges,
        }
    }

    pub fn summaries(&self) -> Vec<Summary> {
        self.nodes
            .values()
            .map(|n| Summary {
                id: n.id,
                turns: n.sim.as_ref().map_or(0, |s| s.turns()),
                parent: n.parent,
                edges: n
                    .children
                    .iter()
                    .filter_map(|c| self.nodes.get(c))
                    .map(|c| SummaryEdge {
                        to: c.id,
                        kind: c.edge_type,
                        ops: c.ops.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// `GET …/state`: turns and every agent's role, plan, merged memory and emotion.
    pub fn state(&self, id: NodeId) -> Result<NodeState, TreeError> {
        Ok(self.sim(id)?.state())
    }

    /// A lossless JSON snapshot of the whole tree (logs, ops, simulator states).
    pub fn export(&self) -> Result<TreeExport, TreeError> {
        let nodes = self
            .nodes
            .values()
            .map(|n| {
                let sim = n.sim.as_ref().ok_or(TreeError::Running(n.id))?;
                let logs = n
                    .log
                    .entries()
                    .iter()
                    .map(|e| serde_json::from_str(e).unwrap_or(Value::Null))
                    .collect();
                Ok(NodeExport {
                    id: n.id,
                    parent: n.parent,
                    depth: n.depth,
                    edge_type: n.edge_type,
                    ops: n.ops.clone(),
                    status: n.status,
                    error: n.error.clone(),
                    sim: (**sim).clone(),
                    logs,
                    records: n.records.clone(),
                })
            })
            .collect::<Result<_, TreeError>>()?;
        Ok(TreeExport {
            format: EXPORT_FORMAT.into(),
            scenario: self.scenario.clone(),
            root: 0,
            seq: self.next_id,
            nodes,
        })
    }

    /// Rebuilds a tree from an export. The export is untrusted (a file from anywhere): its
    /// structure is checked (one root 0, ids unique and below `seq`, parents listed before their
    /// children — hence acyclic — and depths and edge types consistent), every op and simulator
    /// is checked against the server's limits, and each simulator is viewed once so that a state
    /// no run could have produced is refused here rather than failing later. Nothing is attached
    /// unless all of it passes. `market` is re-attached to trading episodes (it is not exported).
    pub fn import(
        data: TreeExport,
        market: Option<&Arc<MarketData>>,
        limits: &ImportLimits,
    ) -> Result<SimTree, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        if data.format != EXPORT_FORMAT {
            return Err(bad(format!(
                "unsupported export format '{}' (expected {EXPORT_FORMAT})",
                data.format
            )));
        }
        if data.root != 0 {
            return Err(bad(format!("root must be node 0, not {}", data.root)));
        }
        if data.nodes.len() > limits.max_nodes {
            return Err(bad(format!(
                "the export has {} nodes; this server holds at most {} per tree",
                data.nodes.len(),
                limits.max_nodes
            )));
        }
        if data.seq > MAX_NODE_ID + 1 {
            return Err(bad(format!(
                "seq {} is beyond the largest node id ({MAX_NODE_ID})",
                data.seq
            )));
        }
        let mut nodes: BTreeMap<NodeId, Node> = BTreeMap::new();
        for (i, n) in data.nodes.into_iter().enumerate() {
            let id = n.id;
            let at = |m: String| bad(format!("nodes[{i}] (node {id}): {m}"));
            if nodes.contains_key(&id) {
                return Err(at("duplicate node id".into()));
            }
            if id >= data.seq {
                return Err(at(format!("id is not below seq {}", data.seq)));
            }
            match (i, n.parent) {
                (0, None) if id == 0 => {}
                (0, _) => return Err(at("the first node must be the root: id 0, no parent".into())),
                (_, None) => return Err(at("only the root may have no parent".into())),
                (_, Some(p)) if !nodes.contains_key(&p) => {
                    return Err(at(format!("parent {p} is not listed before it")));
                }
                _ => {}
            }
            let expected_depth = n.parent.map_or(0, |p| nodes[&p].depth + 1);
            if n.depth != expected_depth {
                return Err(at(format!("depth {} but its parent implies {expected_depth}", n.depth)));
            }
            let expected_edge = if n.parent.is_none() {
                EdgeType::Root
            } else {
                Op::edge_type_of(&n.ops)
            };
            if n.edge_type != expected_edge {
                return Err(at(format!(
                    "edge type {:?} does not match its ops ({expected_edge:?})",
                    n.edge_type
                )));
            }
            for op in &n.ops {
                if let Op::Advance { turns } = op
                    && *turns > limits.max_turns
                {
                    return Err(at(format!(
                        "an advance of {turns} turns is beyond this server's {} per request",
                        limits.max_turns
                    )));
                }
            }
            if let Some(bad_entry) = n.logs.iter().position(|e| !e.is_object()) {
                return Err(at(format!("logs[{bad_entry}] is not a log entry object")));
            }
            let mut sim = n.sim;
            sim.attach(market);
            sim.distrust();
            sim.check_imported().map_err(&at)?;
            let viewable = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = (sim.view(), sim.state(), sim.turns());
            }));
            if viewable.is_err() {
                return Err(at("the simulator state is inconsistent".into()));
            }
            if let Some(p) = n.parent
                && let Some(parent) = nodes.get_mut(&p)
            {
                parent.children.push(id);
            }
            let entries: Vec<String> = n.logs.iter().map(Value::to_string).collect();
            nodes.insert(
                id,
                Node {
                    id,
                    parent: n.parent,
                    depth: n.depth,
                    edge_type: n.edge_type,
                    ops: n.ops,
                    children: Vec::new(),
                    sim: Some(Arc::new(sim)),
                    log: Arc::new(NodeLog::from_entries(entries.iter().map(String::as_str))),
                    // A run that was in flight when the tree was exported did not finish.
                    status: if n.status == NodeStatus::Running {
                        NodeStatus::Interrupted
                    } else {
                        n.status
                    },
                    error: n.error,
                    records: n.records,
                },
            );
        }
        if !nodes.contains_key(&0) {
            return Err(bad("the export has no root node 0".into()));
        }
        Ok(SimTree {
            scenario: data.scenario,
            nodes,
            next_id: data.seq,
        })
    }
}

/// What an imported tree may claim: the importing server's own limits.
#[derive(Clone, Copy, Debug)]
pub struct ImportLimits {
    pub max_nodes: usize,
    pub max_turns: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_nodes: 100_000,
            max_turns: 1000,
        }
    }
}

pub const EXPORT_FORMAT: &str = "simtree-export/2";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeExport {
    pub format: String,
    pub scenario: String,
    pub root: NodeId,
    pub seq: NodeId,
    pub nodes: Vec<NodeExport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeExport {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u32,
    pub edge_type: EdgeType,
    pub ops: Vec<Op>,
    pub status: NodeStatus,
    #[serde(default)]
    pub error: Option<String>,
    pub sim: Sim,
    pub logs: Vec<Value>,
    /// Recorded LLM calls, so an imported tree can still be replayed offline.
    #[serde(default)]
    pub records: Vec<LlmRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::MockClient;
    use crate::scenario::{Scenario, assets_dir};
    use serde_json::json;

    fn tree() -> SimTree {
        let s = Scenario::load_file(&assets_dir().join("scenarios/simple_chat.json")).unwrap();
        SimTree::new("simple_chat", Sim::Social(s.build(None).unwrap()))
    }

    fn advance(t: &mut SimTree, parent: NodeId, turns: u64) -> NodeId {
        let (id, mut sim, log) = t.start_advance(parent, turns).unwrap();
        let mut sink = |e: Event| log.push(&entry_json(&e, id));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let ctx = crate::sim::RunCtx {
            llm: std::sync::Arc::new(MockClient),
            tools: std::sync::Arc::new(crate::trading::agents::MockToolModel),
            abm: None,
        };
        rt.block_on(sim.run(turns, &ctx, &mut sink)).unwrap();
        t.finish(id, sim, NodeStatus::Done, None, Vec::new());
        id
    }

    #[test]
    fn logs_are_root_path_concatenations_tagged_by_node() {
        let mut t = tree();
        assert_eq!(t.logs(0).unwrap().len(), 3);
        let a = advance(&mut t, 0, 1);
        let b = advance(&mut t, a, 1);
        let logs = t.logs(b).unwrap();
        assert_eq!(logs.len(), 3 + 45 + 45);
        assert!(logs[0].ends_with("\"node\":0}"));
        assert!(logs[3].ends_with(&format!("\"node\":{a}}}")));
        assert!(logs[48].ends_with(&format!("\"node\":{b}}}")));
        assert_eq!(t.node(a).unwrap().log.len(), 45, "a node stores only its own entries");
        assert_eq!(t.summaries()[1].turns, 1);
    }

    #[test]
    fn branch_applies_every_op_kind_and_sets_edge_types() {
        let mut t = tree();
        let cases = [
            (
                json!({"op": "agent_ctx_append", "name": "Alice", "role": "user", "content": "psst"}),
                EdgeType::AgentCtx,
            ),
            (
                json!({"op": "agent_plan_replace", "name": "Alice", "plan_state": {"strategy": "x"}}),
                EdgeType::AgentPlan,
            ),
            (
                json!({"op": "agent_props_patch", "name": "Bob", "updates": {"mood": "grim"}}),
                EdgeType::AgentProps,
            ),
            (
                json!({"op": "scene_state_patch", "updates": {"time": 1200}}),
                EdgeType::SceneState,
            ),
            (
                json!({"op": "public_broadcast", "text": "Breaking"}),
                EdgeType::PublicEvent,
            ),
        ];
        for (op, edge) in cases {
            let op: Op = serde_json::from_value(op).unwrap();
            let id = t.branch(0, vec![op]).unwrap();
            assert_eq!(t.node(id).unwrap().edge_type, edge);
        }
        let bcast = t.node(5).unwrap();
        assert_eq!(bcast.log.len(), 3 + 1, "three deltas and one system_broadcast");
        let state = t.state(5).unwrap();
        assert!(
            state.agents[0].short_memory[0]
                .content
                .ends_with("Public Event: Breaking")
        );
        let plan = t.state(2).unwrap().agents[1].plan_state.clone();
        assert_eq!(plan["strategy"], "x");
        let multi = t.branch(0, vec![]).unwrap();
        assert_eq!(t.node(multi).unwrap().edge_type, EdgeType::Multi);
    }

    #[test]
    fn a_failing_branch_leaves_no_node_and_no_id() {
        let mut t = tree();
        let bad = vec![
            Op::PublicBroadcast { text: "ok".into() },
            Op::AgentPropsPatch {
                name: "Nobody".into(),
                updates: Default::default(),
            },
        ];
        let err = t.branch(0, bad).unwrap_err();
        assert_eq!(
            err,
            TreeError::InvalidOp("ops[1]: unknown agent 'Nobody' (agents: Host, Alice, Bob)".into())
        );
        assert_eq!(t.len(), 1);
        let next = t.branch(0, vec![]).unwrap();
        assert_eq!(next, 1, "no id was burnt");
        assert!(t.branch(0, vec![Op::Advance { turns: 1 }]).is_err());
        assert!(t.branch(42, vec![]).is_err());
    }

    #[test]
    fn delete_lca_frontier_and_root_protection() {
        let mut t = tree();
        let a = advance(&mut t, 0, 1);
        let b = advance(&mut t, a, 1);
        let c = advance(&mut t, a, 1);
        let d = advance(&mut t, 0, 1);
        assert_eq!(t.lca(b, c).unwrap(), a);
        assert_eq!(t.lca(b, d).unwrap(), 0);
        assert_eq!(t.frontier(true), vec![b, c]);
        assert_eq!(t.frontier(false), vec![b, c, d]);
        assert_eq!(t.delete_subtree(0), Err(TreeError::DeleteRoot));
        assert_eq!(t.delete_subtree(a).unwrap(), vec![a, b, c]);
        assert_eq!(t.leaves(), vec![d]);
        assert_eq!(t.graph().edges.len(), 1);
        assert_eq!(t.delete_subtree(a), Err(TreeError::NodeNotFound(a)));
    }

    #[test]
    fn export_import_is_lossless() {
        let mut t = tree();
        let a = advance(&mut t, 0, 2);
        t.branch(a, vec![Op::PublicBroadcast { text: "x".into() }]).unwrap();
        let exported = t.export().unwrap();
        let json = serde_json::to_string(&exported).unwrap();
        let back = SimTree::import(serde_json::from_str(&json).unwrap(), None, &ImportLimits::default()).unwrap();
        assert_eq!(serde_json::to_string(&back.export().unwrap()).unwrap(), json);
        assert_eq!(back.logs(2).unwrap(), t.logs(2).unwrap());
        let mut broken: TreeExport = serde_json::from_str(&json).unwrap();
        broken.nodes[1].parent = Some(99);
        assert!(SimTree::import(broken, None, &ImportLimits::default()).is_err());
    }
}
