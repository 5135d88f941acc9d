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

mod error;
mod export;
mod import;
mod log;
mod log_entries;
pub mod notebook;
pub use error::TreeError;
pub(crate) use export::{EXPORT_FAILED, EXPORT_FORMAT};
pub use export::{NodeExport, TreeExport};
pub(crate) use import::read_export;
pub use import::{ImportLimits, Importer};
pub use log::{NodeLog, entry_json};
pub use log_entries::LogEntries;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
pub use simtree_shared::NodeStatus;
use simtree_shared::{
    Annotation, Ask, Attached, EdgeType, Graph, GraphEdge, GraphMark, GraphNode, NodeState, NotedGraph, NotedSummary,
    Op, Summary, SummaryEdge,
};

use crate::engine::event::Event;
use crate::llm::ledger::UsageTotals;
use crate::llm::record::LlmRecord;
use crate::sim::Sim;

pub type NodeId = u64;

/// What one node's record takes in memory, roughly: its share of the node map, its log's header,
/// its op list and child list on the heap. Measured with the store benchmark's probe
/// (`SIMTREE_BENCH_PROBE`): a 10,000-node chain's structure takes 4.8 MB (10.4 MB before op
/// lists were parsed to their exact size and the map bulk-built).
const NODE_RECORD_BYTES: usize = 500;

/// A simulator in memory takes more than its stored form (JSON of memories, states): each line is
/// a struct with its own allocations. The store benchmark's probe measured 1.7× for a chat.
const SIM_MEMORY_FACTOR: usize = 2;

static TICK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A global clock of uses, for least-recently-used eviction.
fn tick() -> u64 {
    TICK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The largest node id: ids stay exact in JavaScript numbers (the web UI reads them as such).
pub(crate) const MAX_NODE_ID: NodeId = (1 << 53) - 1;

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: NodeId,
    pub(crate) parent: Option<NodeId>,
    pub(crate) depth: u32,
    edge_type: EdgeType,
    pub(crate) ops: Vec<Op>,
    pub(crate) children: Vec<NodeId>,
    /// The node's simulator; `None` while it runs (the run owns it) and, in a stored tree,
    /// while it is only in the store (see [`SimTree::sim`]).
    pub(crate) sim: Option<Arc<Sim>>,
    /// Turns (steps, decision points) the simulator has run, kept beside it so that summaries
    /// need no simulator.
    pub(crate) turns: u64,
    /// Unix milliseconds: attached, and when its run ended.
    created: u64,
    finished: Option<u64>,
    /// What its simulator costs in memory, roughly (its stored form's size), for the cache.
    cost: usize,
    /// When the simulator or log was last used (a global tick), for the cache.
    used: u64,
    pub(crate) log: Arc<NodeLog>,
    pub(crate) status: NodeStatus,
    /// Why the run failed, when it did.
    pub(crate) error: Option<String>,
    /// Every real LLM call of the node's run (request hash → response, tokens), for replay.
    pub(crate) records: Vec<LlmRecord>,
}

impl Node {
    /// The node's record as the store keeps it.
    pub(crate) fn row(&self) -> crate::store::NodeRow {
        crate::store::NodeRow {
            id: self.id,
            parent: self.parent,
            depth: self.depth,
            edge_type: self.edge_type,
            ops: self.ops.clone(),
            status: self.status,
            error: self.error.clone(),
            created: self.created,
            finished: self.finished,
            turns: self.turns,
            records: self.records.clone(),
        }
    }

    pub(crate) fn attached(&self) -> Attached {
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
    pub(crate) scenario: String,
    /// The document the scenario came from when a user brought it (kept, shown and exported
    /// with the tree; `None` for a library scenario).
    pub(crate) document: Option<Arc<Value>>,
    /// The version of the saved scenario the document is, when the tree was made from the
    /// library (`scenario` is then the saved scenario's id).
    pub(crate) scenario_version: Option<u64>,
    nodes: BTreeMap<NodeId, Node>,
    next_id: NodeId,
    /// Where nodes not in memory come back from (a stored tree).
    source: Option<crate::store::TreeSource>,
    /// What users wrote on nodes (only annotated nodes are here).
    pub(crate) notes: BTreeMap<NodeId, Annotation>,
    /// The questions asked of agents at nodes, in order (only nodes asked are here).
    pub(crate) asks: BTreeMap<NodeId, Vec<Ask>>,
}

impl std::fmt::Debug for crate::store::TreeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TreeSource({})", self.tree)
    }
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
            turns: sim.turns(),
            created: crate::store::now_ms(),
            finished: None,
            cost: 0,
            used: 0,
            sim: Some(Arc::new(sim.fork())),
            log: Arc::new(NodeLog::from_entries(entries.iter().map(String::as_str))),
            status: NodeStatus::Done,
            error: None,
            records: Vec::new(),
        };
        SimTree {
            scenario: scenario.into(),
            document: None,
            scenario_version: None,
            nodes: BTreeMap::from([(0, root)]),
            next_id: 1,
            source: None,
            notes: BTreeMap::new(),
            asks: BTreeMap::new(),
        }
    }

    pub(crate) fn root(&self) -> NodeId {
        0
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub(crate) fn node(&self, id: NodeId) -> Result<&Node, TreeError> {
        self.nodes.get(&id).ok_or(TreeError::NodeNotFound(id))
    }

    /// The finished simulator of a node (an error while it runs). In a stored tree a node not in
    /// memory is rebuilt from the store; a node whose run never finished (interrupted) has its
    /// parent's state, as a failed run does.
    pub fn sim(&mut self, id: NodeId) -> Result<Arc<Sim>, TreeError> {
        let now = tick();
        let node = self.nodes.get_mut(&id).ok_or(TreeError::NodeNotFound(id))?;
        node.used = now;
        if let Some(sim) = &node.sim {
            return Ok(sim.clone());
        }
        if node.status.is_running() {
            return Err(TreeError::Running(id));
        }
        let Some(source) = &self.source else {
            return Err(TreeError::Running(id));
        };
        let path = self.path(id)?;
        let loaded = source.state(id, &path)?;
        let (sim, cost) = match loaded {
            Some((sim, cost)) => (Arc::new(sim), cost),
            // A run that never stored a state (interrupted, or failed on an internal error)
            // keeps its parent's, as it did live.
            None => match (self.node(id)?.parent, self.node(id)?.status) {
                (Some(p), NodeStatus::Interrupted | NodeStatus::Failed) => (self.sim(p)?, 0),
                _ => {
                    return Err(TreeError::Store(format!("the state of node {id} is missing from the store")));
                }
            },
        };
        if let Some(n) = self.nodes.get_mut(&id) {
            n.sim = Some(sim.clone());
            n.cost = cost;
        }
        Ok(sim)
    }

    /// A node's log, its entries read back from the store if they are not in memory.
    pub fn log(&mut self, id: NodeId) -> Result<Arc<NodeLog>, TreeError> {
        let now = tick();
        let node = self.nodes.get_mut(&id).ok_or(TreeError::NodeNotFound(id))?;
        node.used = now;
        let log = node.log.clone();
        if !log.is_loaded()
            && let Some(source) = &self.source
        {
            let entries = source.log(id)?;
            log.fill(&entries);
        }
        Ok(log)
    }

    /// Drops a stored node's simulator and log entries from memory (they come back on demand);
    /// returns the bytes freed, roughly. Running nodes and logs someone watches stay.
    pub fn evict(&mut self, id: NodeId) -> usize {
        if self.source.is_none() {
            return 0;
        }
        let Some(n) = self.nodes.get_mut(&id) else {
            return 0;
        };
        if n.status.is_running() {
            return 0;
        }
        n.sim = None;
        n.log.unload()
    }

    /// Drops what the tree's chunk cache still remembers of evicted simulators.
    pub(crate) fn prune_chunks(&self) {
        if let Some(source) = &self.source {
            source.cache.prune();
        }
    }

    /// Records what a node's simulator costs in memory (its stored form's size).
    pub(crate) fn set_cost(&mut self, id: NodeId, cost: usize) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.cost = cost;
            n.used = tick();
        }
    }

    /// The nodes holding a simulator or log entries in memory that the store can give back:
    /// `(id, bytes, last use)`.
    pub(crate) fn cached(&self) -> Vec<(NodeId, usize, u64)> {
        if self.source.is_none() {
            return Vec::new();
        }
        self.nodes
            .values()
            .filter(|n| !n.status.is_running() && (n.sim.is_some() || n.log.is_loaded()))
            .map(|n| {
                let sim = n.cost * SIM_MEMORY_FACTOR * usize::from(n.sim.is_some());
                (n.id, sim + n.log.bytes(), n.used)
            })
            .filter(|&(_, bytes, _)| bytes > 0)
            .collect()
    }

    /// Memory the tree's structure takes (node records), roughly.
    pub(crate) fn structure_cost(&self) -> usize {
        self.nodes.len() * NODE_RECORD_BYTES
    }

    /// True when nodes come back from a store.
    pub(crate) fn is_stored(&self) -> bool {
        self.source.is_some()
    }

    /// Marks the tree as stored: nodes not in memory come back from `source`.
    pub(crate) fn set_source(&mut self, source: crate::store::TreeSource) {
        self.source = Some(source);
    }

    /// The next node id (persisted, so ids stay unique across restarts).
    pub(crate) fn seq(&self) -> NodeId {
        self.next_id
    }

    /// A node's record as the store keeps it.
    pub(crate) fn row(&self, id: NodeId) -> Result<crate::store::NodeRow, TreeError> {
        Ok(self.node(id)?.row())
    }

    /// A stored tree's structure, its states and logs left in the store until needed. Runs that
    /// were in flight come back `interrupted`.
    pub(crate) fn restore(
        scenario: String,
        seq: NodeId,
        rows: Vec<crate::store::NodeRow>,
        source: crate::store::TreeSource,
    ) -> Result<SimTree, TreeError> {
        // The map is built in one go from the rows (in id order): a map grown by inserts in
        // order leaves its leaves half full, a bulk-built one packs them.
        let mut max_id = 0;
        let mut links = Vec::with_capacity(rows.len());
        let mut built = Vec::with_capacity(rows.len());
        for r in rows {
            max_id = max_id.max(r.id);
            if let Some(p) = r.parent {
                links.push((p, r.id));
            }
            built.push((
                r.id,
                Node {
                    id: r.id,
                    parent: r.parent,
                    depth: r.depth,
                    edge_type: r.edge_type,
                    ops: r.ops,
                    children: Vec::new(),
                    sim: None,
                    turns: r.turns,
                    created: r.created,
                    finished: r.finished,
                    cost: 0,
                    used: 0,
                    log: Arc::new(NodeLog::unloaded()),
                    status: if r.status.is_running() { NodeStatus::Interrupted } else { r.status },
                    error: r.error,
                    records: r.records,
                },
            ));
        }
        let mut nodes: BTreeMap<NodeId, Node> = built.into_iter().collect();
        // A node whose parent is not stored (the rows of a store that failed mid-way) is left
        // out with its descendants, and named; the rest of the tree loads.
        let mut lost = Vec::new();
        for (p, id) in links {
            // A parent is attached before its children, so its id is smaller (and the links
            // come in id order: a lost node's children come after it).
            match nodes.get_mut(&p) {
                Some(parent) if p < id => parent.children.push(id),
                _ => {
                    nodes.remove(&id);
                    lost.push((id, p));
                }
            }
        }
        if !nodes.contains_key(&0) {
            return Err(TreeError::Store("the tree has no root node".into()));
        }
        for (id, p) in &lost {
            tracing::error!(
                tree = source.tree,
                node = id,
                parent = p,
                "a stored node's parent is missing: the node is left out (run `simtree data check`)"
            );
        }
        Ok(SimTree {
            scenario,
            document: None,
            scenario_version: None,
            notes: BTreeMap::new(),
            asks: BTreeMap::new(),
            nodes,
            next_id: seq.max(max_id + 1),
            source: Some(source),
        })
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
        let turns = match &sim {
            Some(s) => s.turns(),
            None => self.nodes.get(&parent).map_or(0, |p| p.turns),
        };
        let status = if sim.is_some() { NodeStatus::Done } else { NodeStatus::Running };
        let node = Node {
            id,
            parent: Some(parent),
            depth,
            edge_type: Op::edge_type_of(&ops),
            ops,
            children: Vec::new(),
            sim,
            turns,
            created: crate::store::now_ms(),
            finished: None,
            cost: 0,
            used: tick(),
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

    /// Marks a node as made by a sweep (edge type `sweep`): a cell or a replicate.
    pub(crate) fn mark_sweep(&mut self, id: NodeId) -> Result<(), TreeError> {
        self.mark_edge(id, EdgeType::Sweep)
    }

    /// Marks a node as made by a sweep or an exploration (`sweep`, `explore`): the edge keeps
    /// its ops but says who made it.
    pub(crate) fn mark_edge(&mut self, id: NodeId, kind: EdgeType) -> Result<(), TreeError> {
        self.nodes.get_mut(&id).ok_or(TreeError::NodeNotFound(id))?.edge_type = kind;
        Ok(())
    }

    /// Creates a running child of `parent` that will advance `turns` turns; returns its id, the
    /// simulator to run and the log to run it into. The caller runs it and calls [`Self::finish`].
    pub fn start_advance(&mut self, parent: NodeId, turns: u64) -> Result<(NodeId, Sim, Arc<NodeLog>), TreeError> {
        let sim = self.sim(parent)?.fork();
        let (id, log) = self.attach_advance(parent, turns)?;
        Ok((id, sim, log))
    }

    /// The running child of [`Self::start_advance`] without its simulator: for a caller that
    /// forks the parent itself, or a run another process computes from the stored parent (a
    /// job; the parent's state is not rebuilt here). Refused as `start_advance` is: a parent
    /// that is missing or still running.
    pub(crate) fn attach_advance(&mut self, parent: NodeId, turns: u64) -> Result<(NodeId, Arc<NodeLog>), TreeError> {
        if self.node(parent)?.status.is_running() {
            return Err(TreeError::Running(parent));
        }
        let id = self.attach(parent, vec![Op::Advance { turns }], None, NodeLog::default())?;
        let log = self.nodes[&id].log.clone();
        Ok((id, log))
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
        node.turns = sim.turns();
        node.finished = Some(crate::store::now_ms());
        node.sim = Some(Arc::new(sim));
        node.status = status;
        node.error = error;
        true
    }

    /// Shows a node that was restored `interrupted` as running again: its run was not lost but
    /// is still run by another process (a job the server adopted: see `workbench/jobs.rs`).
    /// Returns whether the node is running now.
    pub(crate) fn resume_running(&mut self, id: NodeId) -> bool {
        let Some(node) = self.nodes.get_mut(&id) else {
            return false;
        };
        if node.status == NodeStatus::Interrupted {
            node.status = NodeStatus::Running;
        }
        node.status.is_running()
    }

    /// Takes the end of a run another process ran (a job: see `workbench/jobs.rs`) from the
    /// node's stored record; its simulator stays in the store until used. Returns false when
    /// the node was deleted meanwhile.
    pub(crate) fn finish_stored(&mut self, row: &crate::store::NodeRow) -> bool {
        let Some(node) = self.nodes.get_mut(&row.id) else {
            return false;
        };
        node.records = row.records.clone();
        node.log.seal();
        node.turns = row.turns;
        node.finished = row.finished.or_else(|| Some(crate::store::now_ms()));
        node.sim = None;
        node.status = row.status;
        node.error = row.error.clone();
        true
    }

    /// Adds a node another process attached and this one ran and stored (a worker's job), with
    /// its simulator, to this copy of the tree. Nothing changes when the node is here already
    /// or its parent is not (the copy is then read again when a job needs it). Returns whether
    /// it was added.
    pub(crate) fn insert_finished(&mut self, row: crate::store::NodeRow, sim: Arc<Sim>) -> bool {
        let Some(parent) = row.parent else {
            return false;
        };
        if self.nodes.contains_key(&row.id) || !self.nodes.contains_key(&parent) || row.status.is_running() {
            return false;
        }
        let id = row.id;
        self.nodes.insert(
            id,
            Node {
                id,
                parent: Some(parent),
                depth: row.depth,
                edge_type: row.edge_type,
                ops: row.ops,
                children: Vec::new(),
                sim: Some(sim),
                turns: row.turns,
                created: row.created,
                finished: row.finished,
                cost: 0,
                used: 0,
                log: Arc::new(NodeLog::unloaded()),
                status: row.status,
                error: row.error,
                records: row.records,
            },
        );
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children.push(id);
        }
        self.next_id = self.next_id.max(id + 1);
        true
    }

    /// Marks a run that ended without a usable simulator (it panicked) as failed; the node keeps
    /// its parent's state so it stays usable. Returns false when the node was deleted meanwhile.
    pub(crate) fn fail_without_sim(&mut self, id: NodeId, error: String) -> bool {
        self.end_without_sim(id, NodeStatus::Failed, Some(error))
    }

    /// Ends a run without a simulator of its own as `status` (failed, cancelled): the node keeps
    /// its parent's state. Returns false when the node was deleted meanwhile.
    pub(crate) fn end_without_sim(&mut self, id: NodeId, status: NodeStatus, error: Option<String>) -> bool {
        let parent_sim = self.nodes.get(&id).and_then(|n| n.parent).and_then(|p| self.sim(p).ok());
        let Some(node) = self.nodes.get_mut(&id) else {
            return false;
        };
        node.log.seal();
        node.finished = Some(crate::store::now_ms());
        node.sim = parent_sim;
        node.status = status;
        node.error = error;
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
    pub(crate) fn branch_all(&mut self, parent: NodeId, lists: Vec<Vec<Op>>) -> Result<Vec<NodeId>, TreeError> {
        let mut prepared = Vec::with_capacity(lists.len());
        for (i, ops) in lists.iter().enumerate() {
            prepared.push(self.prepare_branch(parent, ops, &format!("cells[{i}]."))?);
        }
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
    pub(crate) fn ids_left(&self) -> u64 {
        (MAX_NODE_ID + 1).saturating_sub(self.next_id)
    }

    /// `parent`'s clone with `ops` applied, and the events they produced; nothing is attached.
    fn prepare_branch(&mut self, parent: NodeId, ops: &[Op], at: &str) -> Result<(Sim, Vec<Event>), TreeError> {
        let mut sim = self.sim(parent)?.fork();
        let mut events = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            events.extend(sim.apply_op(op).map_err(|e| TreeError::InvalidOp(format!("{at}ops[{i}]: {e}")))?);
        }
        Ok((sim, events))
    }

    /// Attaches a prepared branch; its own log is a `counterfactual` entry naming the ops, then
    /// the ops' events.
    fn attach_branch(&mut self, parent: NodeId, ops: Vec<Op>, sim: Sim, events: &[Event]) -> Result<NodeId, TreeError> {
        let id = self.next_free_id()?;
        let what_if = Event::of(&simtree_shared::Counterfactual { ops: ops.clone() });
        let entries: Vec<String> = std::iter::once(&what_if).chain(events).map(|e| entry_json(e, id)).collect();
        let log = NodeLog::from_entries(entries.iter().map(String::as_str));
        self.attach(parent, ops, Some(Arc::new(sim)), log)
    }

    /// Removes `id` and all its descendants; returns the removed ids (for cancelling runs).
    pub(crate) fn delete_subtree(&mut self, id: NodeId) -> Result<Vec<NodeId>, TreeError> {
        let node = self.node(id)?;
        let Some(parent) = node.parent else {
            return Err(TreeError::DeleteRoot);
        };
        let mut removed = Vec::new();
        let mut stack = vec![id];
        while let Some(n) = stack.pop() {
            if let Some(node) = self.nodes.remove(&n) {
                stack.extend(node.children);
                self.notes.remove(&n);
                self.asks.remove(&n);
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
    pub(crate) fn path(&self, id: NodeId) -> Result<Vec<NodeId>, TreeError> {
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
    pub fn logs(&mut self, id: NodeId) -> Result<Vec<String>, TreeError> {
        let mut out = Vec::new();
        self.for_each_log_entry(id, |e| out.push(e.to_string()))?;
        Ok(out)
    }

    /// Visits the full log of a node without copying it.
    pub(crate) fn for_each_log_entry(&mut self, id: NodeId, mut f: impl FnMut(&str)) -> Result<(), TreeError> {
        for n in self.path(id)? {
            self.log(n)?.for_each(&mut f);
        }
        Ok(())
    }

    /// Lowest common ancestor.
    pub(crate) fn lca(&self, a: NodeId, b: NodeId) -> Result<NodeId, TreeError> {
        let pa = self.path(a)?;
        let pb = self.path(b)?;
        Ok(pa.iter().zip(&pb).take_while(|(x, y)| x == y).map(|(x, _)| *x).last().unwrap_or(0))
    }

    /// Nodes without children, ascending.
    pub fn leaves(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|n| n.children.is_empty()).map(|n| n.id).collect()
    }

    pub(crate) fn max_depth(&self) -> u32 {
        self.nodes.values().map(|n| n.depth).max().unwrap_or(0)
    }

    /// The leaves at maximum depth (`only_max_depth`) or all leaves.
    pub(crate) fn frontier(&self, only_max_depth: bool) -> Vec<NodeId> {
        let max = self.max_depth();
        self.nodes
            .values()
            .filter(|n| n.children.is_empty() && (!only_max_depth || n.depth == max))
            .map(|n| n.id)
            .collect()
    }

    /// LLM usage summed over the whole tree.
    pub(crate) fn usage(&self) -> UsageTotals {
        let mut total = UsageTotals::default();
        for n in self.nodes.values() {
            total.add(&UsageTotals::of(&n.records));
        }
        total
    }

    /// Every node of the tree, by id.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Every recorded LLM call of the tree, node by node.
    pub(crate) fn records(&self) -> impl Iterator<Item = &LlmRecord> {
        self.nodes.values().flat_map(|n| &n.records)
    }

    pub(crate) fn running(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|n| n.status == NodeStatus::Running).map(|n| n.id).collect()
    }

    pub(crate) fn graph(&self) -> Graph {
        let nodes = self.nodes.values().map(|n| GraphNode { id: n.id, depth: n.depth, status: n.status }).collect();
        let edges = self
            .nodes
            .values()
            .flat_map(|n| {
                n.children.iter().filter_map(|c| {
                    let child = self.nodes.get(c)?;
                    Some(GraphEdge { from: n.id, to: *c, kind: child.edge_type })
                })
            })
            .collect();
        Graph { root: 0, frontier: self.frontier(true), running: self.running(), nodes, edges }
    }

    pub(crate) fn summaries(&self) -> Vec<Summary> {
        self.nodes
            .values()
            .map(|n| Summary {
                id: n.id,
                turns: n.turns,
                parent: n.parent,
                edges: n
                    .children
                    .iter()
                    .filter_map(|c| self.nodes.get(c))
                    .map(|c| SummaryEdge { to: c.id, kind: c.edge_type, ops: c.ops.clone() })
                    .collect(),
            })
            .collect()
    }

    /// Takes the stored annotations of tree `tree` (JSON by node); one that is unreadable, or
    /// of a node the tree does not hold, is left out with a warning.
    pub(crate) fn set_notes(&mut self, tree: u64, rows: Vec<(NodeId, String)>) {
        for (node, body) in rows {
            match serde_json::from_str::<Annotation>(&body) {
                Ok(a) if self.nodes.contains_key(&node) => {
                    self.notes.insert(node, a);
                }
                Ok(_) => tracing::warn!(tree, node, "an annotation of a node the tree does not hold is left out"),
                Err(e) => tracing::warn!(tree, node, "a stored annotation is unreadable: {e}"),
            }
        }
    }

    /// Adds a model call made at a finished node outside its run (an interview) to the node's
    /// records, so that its usage counts with the node's (the replay of the node's own advance
    /// keys calls by their prompt, so it is unaffected).
    pub(crate) fn record_call(&mut self, id: NodeId, record: LlmRecord) -> Result<(), TreeError> {
        self.nodes.get_mut(&id).ok_or(TreeError::NodeNotFound(id))?.records.push(record);
        Ok(())
    }

    /// Takes back the last record [`Self::record_call`] added (its ask was not stored).
    pub(crate) fn unrecord_call(&mut self, id: NodeId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.records.pop();
        }
    }

    /// Takes the stored asks of tree `tree` (JSON by node, in order), as [`Self::set_notes`].
    pub(crate) fn set_asks(&mut self, tree: u64, rows: Vec<(NodeId, String)>) {
        for (node, body) in rows {
            match serde_json::from_str::<Ask>(&body) {
                Ok(a) if self.nodes.contains_key(&node) => self.asks.entry(node).or_default().push(a),
                Ok(_) => tracing::warn!(tree, node, "an ask of a node the tree does not hold is left out"),
                Err(e) => tracing::warn!(tree, node, "a stored ask is unreadable: {e}"),
            }
        }
    }

    /// `GET …/graph`: the graph and its annotated nodes' marks.
    pub(crate) fn noted_graph(&self) -> NotedGraph {
        let marks = self
            .notes
            .iter()
            .map(|(&node, a)| GraphMark {
                node,
                title: a.title.clone(),
                tags: a.tags.clone(),
                starred: a.starred,
                noted: a.note.is_some(),
            })
            .collect();
        NotedGraph { graph: self.graph(), marks }
    }

    /// `GET …/summaries`: each node's summary with its annotation.
    pub(crate) fn noted_summaries(&self) -> Vec<NotedSummary> {
        self.summaries()
            .into_iter()
            .map(|summary| NotedSummary { annotation: self.notes.get(&summary.id).cloned(), summary })
            .collect()
    }

    /// `id` and its descendants, `id` first then breadth first (by id within a level).
    pub(crate) fn subtree(&self, id: NodeId) -> Vec<NodeId> {
        let mut out = vec![id];
        let mut at = 0;
        while at < out.len() {
            if let Some(n) = self.nodes.get(&out[at]) {
                out.extend(n.children.iter().copied());
            }
            at += 1;
        }
        out
    }

    /// `GET …/state`: turns and every agent's role, plan, merged memory and emotion.
    pub fn state(&mut self, id: NodeId) -> Result<NodeState, TreeError> {
        Ok(self.sim(id)?.state())
    }
}

#[cfg(test)]
mod tests;
