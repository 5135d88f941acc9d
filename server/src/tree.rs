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

mod log_entries;
pub mod notebook;
pub use log_entries::LogEntries;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use simtree_shared::NodeStatus;
use simtree_shared::{
    Annotation, Ask, Attached, EdgeType, Graph, GraphEdge, GraphMark, GraphNode, NodeState, NotedGraph, NotedSummary,
    Op, Summary, SummaryEdge,
};
use tokio::sync::broadcast;

use crate::engine::event::Event;
use crate::llm::ledger::{LlmRecord, UsageTotals};
use crate::sim::Sim;
use crate::trading::data::MarketData;

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
    /// The store could not give a node back.
    #[error("{0}")]
    Store(String),
    /// What the store holds of a node is damaged (names the tree, the node and the file).
    #[error("{0}")]
    Damaged(String),
    /// An import beyond a size cap or the memory budget (names the node and the entry).
    #[error("{0}")]
    TooLarge(String),
}

impl From<crate::store::SourceError> for TreeError {
    fn from(e: crate::store::SourceError) -> Self {
        match e {
            crate::store::SourceError::Store(e) => TreeError::Store(e.to_string()),
            crate::store::SourceError::Damaged(m) => TreeError::Damaged(m),
        }
    }
}

/// The largest node id: ids stay exact in JavaScript numbers (the web UI reads them as such).
pub const MAX_NODE_ID: NodeId = (1 << 53) - 1;

/// A node's own log entries (serialised JSON `{type, data, node}`, stored back to back in one
/// string to keep per-entry overhead out of large trees) and, once someone watches, a broadcast
/// channel that carries new entries live.
#[derive(Debug, Default)]
pub struct NodeLog {
    inner: Mutex<NodeLogInner>,
}

#[derive(Debug)]
struct NodeLogInner {
    text: String,
    /// End offset of each entry in `text`.
    ends: Vec<usize>,
    live: Option<broadcast::Sender<Arc<str>>>,
    /// False while the entries are in the store only (a restored or evicted node).
    loaded: bool,
}

impl Default for NodeLogInner {
    fn default() -> Self {
        NodeLogInner {
            text: String::new(),
            ends: Vec::new(),
            live: None,
            loaded: true,
        }
    }
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

    /// A log whose entries are in the store (see [`SimTree::log`]).
    fn unloaded() -> Self {
        let log = NodeLog::default();
        log.lock().loaded = false;
        log
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NodeLogInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_loaded(&self) -> bool {
        self.lock().loaded
    }

    /// Puts the stored entries back (no-op when they are already here).
    fn fill(&self, entries: &[String]) {
        let mut inner = self.lock();
        if inner.loaded {
            return;
        }
        for e in entries {
            inner.push(e);
        }
        inner.text.shrink_to_fit();
        inner.ends.shrink_to_fit();
        inner.loaded = true;
    }

    /// Drops the entries from memory (they are in the store); returns the bytes freed.
    fn unload(&self) -> usize {
        let mut inner = self.lock();
        if !inner.loaded || inner.live.as_ref().is_some_and(|tx| tx.receiver_count() > 0) {
            return 0;
        }
        let freed = inner.text.capacity() + inner.ends.capacity() * std::mem::size_of::<usize>();
        inner.text = String::new();
        inner.ends = Vec::new();
        inner.loaded = false;
        freed
    }

    /// Bytes the entries take in memory.
    pub fn bytes(&self) -> usize {
        let inner = self.lock();
        inner.text.len() + inner.ends.len() * std::mem::size_of::<usize>()
    }

    /// Appends one entry and forwards it to live watchers; returns its index.
    pub fn push(&self, entry: &str) -> usize {
        let mut inner = self.lock();
        if let Some(tx) = &inner.live {
            let _ = tx.send(Arc::from(entry));
        }
        inner.push(entry);
        inner.ends.len() - 1
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

    /// Subscribes a watcher to the entries pushed from now on, and gives the index of the first
    /// of them. The channel (created with the first watcher's `capacity`) only wakes the watcher:
    /// it reads what it has not sent yet from the log itself ([`Self::entries_from`]), so one
    /// that falls more than `capacity` entries behind loses none of them.
    pub fn watch(&self, capacity: usize) -> (broadcast::Receiver<Arc<str>>, usize) {
        let mut inner = self.lock();
        let next = inner.ends.len();
        let rx = inner
            .live
            .get_or_insert_with(|| broadcast::channel(capacity.max(1)).0)
            .subscribe();
        (rx, next)
    }

    /// The entries from index `from` on (nothing while the entries are in the store only).
    /// Reads by offset, so a watcher's wake-up costs what it reads, not the log's length.
    pub fn entries_from(&self, from: usize) -> Vec<String> {
        let inner = self.lock();
        let Some(rest) = inner.ends.get(from..) else {
            return Vec::new();
        };
        let mut start = from.checked_sub(1).map_or(0, |i| inner.ends[i]);
        rest.iter()
            .map(|&end| {
                let entry = inner.text[start..end].to_string();
                start = end;
                entry
            })
            .collect()
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
    /// The node's simulator; `None` while it runs (the run owns it) and, in a stored tree,
    /// while it is only in the store (see [`SimTree::sim`]).
    pub sim: Option<Arc<Sim>>,
    /// Turns (steps, decision points) the simulator has run, kept beside it so that summaries
    /// need no simulator.
    pub turns: u64,
    /// Unix milliseconds: attached, and when its run ended.
    pub created: u64,
    pub finished: Option<u64>,
    /// What its simulator costs in memory, roughly (its stored form's size), for the cache.
    cost: usize,
    /// When the simulator or log was last used (a global tick), for the cache.
    used: u64,
    pub log: Arc<NodeLog>,
    pub status: NodeStatus,
    /// Why the run failed, when it did.
    pub error: Option<String>,
    /// Every real LLM call of the node's run (request hash → response, tokens), for replay.
    pub records: Vec<LlmRecord>,
}

impl Node {
    /// The node's record as the store keeps it.
    pub fn row(&self) -> crate::store::NodeRow {
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
    /// The document the scenario came from when a user brought it (kept, shown and exported
    /// with the tree; `None` for a library scenario).
    pub document: Option<Arc<Value>>,
    /// The version of the saved scenario the document is, when the tree was made from the
    /// library (`scenario` is then the saved scenario's id).
    pub scenario_version: Option<u64>,
    nodes: BTreeMap<NodeId, Node>,
    next_id: NodeId,
    /// Where nodes not in memory come back from (a stored tree).
    source: Option<crate::store::TreeSource>,
    /// What users wrote on nodes (only annotated nodes are here).
    pub notes: BTreeMap<NodeId, Annotation>,
    /// The questions asked of agents at nodes, in order (only nodes asked are here).
    pub asks: BTreeMap<NodeId, Vec<Ask>>,
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

    pub fn root(&self) -> NodeId {
        0
    }

    /// True when the tree holds agent-based models (they need the Python worker).
    pub fn has_abm(&mut self) -> bool {
        self.sim(0).is_ok_and(|s| matches!(*s, Sim::Abm(_)))
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
                    return Err(TreeError::Store(format!(
                        "the state of node {id} is missing from the store"
                    )));
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
    pub fn prune_chunks(&self) {
        if let Some(source) = &self.source {
            source.cache.prune();
        }
    }

    /// Records what a node's simulator costs in memory (its stored form's size).
    pub fn set_cost(&mut self, id: NodeId, cost: usize) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.cost = cost;
            n.used = tick();
        }
    }

    /// The nodes holding a simulator or log entries in memory that the store can give back:
    /// `(id, bytes, last use)`.
    pub fn cached(&self) -> Vec<(NodeId, usize, u64)> {
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
    pub fn structure_cost(&self) -> usize {
        self.nodes.len() * NODE_RECORD_BYTES
    }

    /// True when nodes come back from a store.
    pub fn is_stored(&self) -> bool {
        self.source.is_some()
    }

    /// Marks the tree as stored: nodes not in memory come back from `source`.
    pub fn set_source(&mut self, source: crate::store::TreeSource) {
        self.source = Some(source);
    }

    /// The next node id (persisted, so ids stay unique across restarts).
    pub fn seq(&self) -> NodeId {
        self.next_id
    }

    /// A node's record as the store keeps it.
    pub fn row(&self, id: NodeId) -> Result<crate::store::NodeRow, TreeError> {
        Ok(self.node(id)?.row())
    }

    /// A stored tree's structure, its states and logs left in the store until needed. Runs that
    /// were in flight come back `interrupted`.
    pub fn restore(
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
                    status: if r.status.is_running() {
                        NodeStatus::Interrupted
                    } else {
                        r.status
                    },
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
    pub fn mark_sweep(&mut self, id: NodeId) -> Result<(), TreeError> {
        self.mark_edge(id, EdgeType::Sweep)
    }

    /// Marks a node as made by a sweep or an exploration (`sweep`, `explore`): the edge keeps
    /// its ops but says who made it.
    pub fn mark_edge(&mut self, id: NodeId, kind: EdgeType) -> Result<(), TreeError> {
        self.nodes.get_mut(&id).ok_or(TreeError::NodeNotFound(id))?.edge_type = kind;
        Ok(())
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
        node.turns = sim.turns();
        node.finished = Some(crate::store::now_ms());
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
            .and_then(|p| self.sim(p).ok());
        let Some(node) = self.nodes.get_mut(&id) else {
            return false;
        };
        node.log.seal();
        node.finished = Some(crate::store::now_ms());
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
    pub fn ids_left(&self) -> u64 {
        (MAX_NODE_ID + 1).saturating_sub(self.next_id)
    }

    /// `parent`'s clone with `ops` applied, and the events they produced; nothing is attached.
    fn prepare_branch(&mut self, parent: NodeId, ops: &[Op], at: &str) -> Result<(Sim, Vec<Event>), TreeError> {
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

    /// Attaches a prepared branch; its own log is a `counterfactual` entry naming the ops, then
    /// the ops' events.
    fn attach_branch(&mut self, parent: NodeId, ops: Vec<Op>, sim: Sim, events: &[Event]) -> Result<NodeId, TreeError> {
        let id = self.next_free_id()?;
        let what_if = Event::of(&simtree_shared::Counterfactual { ops: ops.clone() });
        let entries: Vec<String> = std::iter::once(&what_if)
            .chain(events)
            .map(|e| entry_json(e, id))
            .collect();
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
    pub fn logs(&mut self, id: NodeId) -> Result<Vec<String>, TreeError> {
        let mut out = Vec::new();
        self.for_each_log_entry(id, |e| out.push(e.to_string()))?;
        Ok(out)
    }

    /// Visits the full log of a node without copying it.
    pub fn for_each_log_entry(&mut self, id: NodeId, mut f: impl FnMut(&str)) -> Result<(), TreeError> {
        for n in self.path(id)? {
            self.log(n)?.for_each(&mut f);
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

    /// Every node of the tree, by id.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Every recorded LLM call of the tree, node by node.
    pub fn records(&self) -> impl Iterator<Item = &LlmRecord> {
        self.nodes.values().flat_map(|n| &n.records)
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
                turns: n.turns,
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

    /// Takes the stored annotations of tree `tree` (JSON by node); one that is unreadable, or
    /// of a node the tree does not hold, is left out with a warning.
    pub fn set_notes(&mut self, tree: u64, rows: Vec<(NodeId, String)>) {
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
    pub fn record_call(&mut self, id: NodeId, record: LlmRecord) -> Result<(), TreeError> {
        self.nodes
            .get_mut(&id)
            .ok_or(TreeError::NodeNotFound(id))?
            .records
            .push(record);
        Ok(())
    }

    /// Takes back the last record [`Self::record_call`] added (its ask was not stored).
    pub fn unrecord_call(&mut self, id: NodeId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.records.pop();
        }
    }

    /// Takes the stored asks of tree `tree` (JSON by node, in order), as [`Self::set_notes`].
    pub fn set_asks(&mut self, tree: u64, rows: Vec<(NodeId, String)>) {
        for (node, body) in rows {
            match serde_json::from_str::<Ask>(&body) {
                Ok(a) if self.nodes.contains_key(&node) => self.asks.entry(node).or_default().push(a),
                Ok(_) => tracing::warn!(tree, node, "an ask of a node the tree does not hold is left out"),
                Err(e) => tracing::warn!(tree, node, "a stored ask is unreadable: {e}"),
            }
        }
    }

    /// `GET …/graph`: the graph and its annotated nodes' marks.
    pub fn noted_graph(&self) -> NotedGraph {
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
        NotedGraph {
            graph: self.graph(),
            marks,
        }
    }

    /// `GET …/summaries`: each node's summary with its annotation.
    pub fn noted_summaries(&self) -> Vec<NotedSummary> {
        self.summaries()
            .into_iter()
            .map(|summary| NotedSummary {
                annotation: self.notes.get(&summary.id).cloned(),
                summary,
            })
            .collect()
    }

    /// `id` and its descendants, `id` first then breadth first (by id within a level).
    pub fn subtree(&self, id: NodeId) -> Vec<NodeId> {
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

    /// A lossless JSON snapshot of the whole tree (logs, ops, simulator states).
    pub fn export(&mut self) -> Result<TreeExport, TreeError> {
        self.check_exportable()?;
        let nodes = self
            .ids()
            .into_iter()
            .map(|id| self.export_node(id))
            .collect::<Result<_, TreeError>>()?;
        Ok(TreeExport {
            format: EXPORT_FORMAT.into(),
            scenario: self.scenario.clone(),
            name: None,
            description: None,
            document: self.document.as_deref().cloned(),
            scenario_version: self.scenario_version,
            root: 0,
            seq: self.next_id,
            nodes,
        })
    }

    /// Every node id, ascending (parents before children).
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// A tree is exported whole: not while a run is in flight.
    pub fn check_exportable(&self) -> Result<(), TreeError> {
        match self.running().first() {
            Some(&id) => Err(TreeError::Running(id)),
            None => Ok(()),
        }
    }

    /// One node of an export (streamed node by node by the HTTP layer).
    pub fn export_node(&mut self, id: NodeId) -> Result<NodeExport, TreeError> {
        let sim = self.sim(id)?;
        // Stored rows are verified as they are read; an entry that still is not JSON fails the
        // export as it is written, never exported as a silent `null`.
        let logs = LogEntries(self.log(id)?.entries());
        let n = self.node(id)?;
        Ok(NodeExport {
            id: n.id,
            parent: n.parent,
            depth: n.depth,
            edge_type: n.edge_type,
            ops: n.ops.clone(),
            status: n.status,
            error: n.error.clone(),
            sim: (*sim).clone(),
            logs,
            records: n.records.clone(),
            annotation: self.notes.get(&id).cloned(),
            asks: self.asks.get(&id).cloned().unwrap_or_default(),
        })
    }

    /// Rebuilds a tree from an export held in memory (see [`Importer`], which this uses).
    pub fn import(
        data: TreeExport,
        market: Option<&Arc<MarketData>>,
        limits: &ImportLimits,
    ) -> Result<SimTree, TreeError> {
        let mut importer = Importer::new(
            data.format,
            data.scenario,
            data.root,
            Some(data.seq),
            limits,
            market.cloned(),
        )?;
        importer.document = data.document;
        importer.scenario_version = data.scenario_version;
        importer.name = data.name;
        importer.description = data.description;
        for n in data.nodes {
            importer.add(n)?;
        }
        importer.finish(None)
    }
}

/// Rebuilds a tree from an export, node by node (a large import streams through it). The export
/// is untrusted (a file from anywhere): its structure is checked (one root 0, ids unique and
/// below `seq`, parents listed before their children — hence acyclic — and depths and edge types
/// consistent), every op and simulator is checked against the server's limits, and each simulator
/// is viewed once so that a state no run could have produced is refused here rather than failing
/// later. Nothing is registered unless all of it passes. `market` is re-attached to trading
/// episodes (it is not exported). With a store, each accepted node is handed to `on_node` and
/// its simulator and log leave memory (they are read back on demand).
pub struct Importer {
    scenario: String,
    seq: Option<NodeId>,
    limits: ImportLimits,
    market: Option<Arc<MarketData>>,
    nodes: BTreeMap<NodeId, Node>,
    count: usize,
    /// The export's sweeps as it holds them (after `nodes`); the workbench checks them.
    pub sweeps: Vec<Value>,
    /// The document the tree was made from, if the export carries one (the workbench checks it).
    pub document: Option<Value>,
    /// The saved scenario's version the document is, if the export says (`scenario` is its id).
    pub scenario_version: Option<u64>,
    /// The export's node annotations and asks, checked as they arrive.
    pub notes: BTreeMap<NodeId, Annotation>,
    pub asks: BTreeMap<NodeId, Vec<Ask>>,
    /// The export's tree name and description (unchecked: the workbench checks them).
    pub name: Option<String>,
    pub description: Option<String>,
}

/// Sweeps an export may carry at most.
pub const MAX_EXPORT_SWEEPS: usize = 1000;

impl Importer {
    pub fn new(
        format: String,
        scenario: String,
        root: NodeId,
        seq: Option<NodeId>,
        limits: &ImportLimits,
        market: Option<Arc<MarketData>>,
    ) -> Result<Importer, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        if format != EXPORT_FORMAT {
            return Err(bad(format!(
                "unsupported export format '{format}' (expected {EXPORT_FORMAT})"
            )));
        }
        if root != 0 {
            return Err(bad(format!("root must be node 0, not {root}")));
        }
        if let Some(seq) = seq
            && seq > MAX_NODE_ID + 1
        {
            return Err(bad(format!("seq {seq} is beyond the largest node id ({MAX_NODE_ID})")));
        }
        Ok(Importer {
            scenario,
            seq,
            limits: *limits,
            market,
            nodes: BTreeMap::new(),
            count: 0,
            sweeps: Vec::new(),
            document: None,
            scenario_version: None,
            notes: BTreeMap::new(),
            asks: BTreeMap::new(),
            name: None,
            description: None,
        })
    }

    /// The scenario the export names.
    pub fn scenario(&self) -> &str {
        &self.scenario
    }

    /// The export's `seq`, when it came after the nodes (checked in [`Self::finish`]).
    fn set_seq(&mut self, seq: NodeId) {
        self.seq = Some(seq);
    }

    /// Checks one node and attaches it; returns it (with its simulator) for the store.
    pub fn add(&mut self, n: NodeExport) -> Result<&Node, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        let i = self.count;
        let id = n.id;
        let at = |m: String| bad(format!("nodes[{i}] (node {id}): {m}"));
        if self.count >= self.limits.max_nodes {
            return Err(bad(format!(
                "the export has more than {} nodes; this server holds at most {} per tree",
                self.limits.max_nodes, self.limits.max_nodes
            )));
        }
        if self.nodes.contains_key(&id) {
            return Err(at("duplicate node id".into()));
        }
        if let Some(seq) = self.seq
            && id >= seq
        {
            return Err(at(format!("id is not below seq {seq}")));
        }
        if id > MAX_NODE_ID {
            return Err(at(format!("id is beyond the largest node id ({MAX_NODE_ID})")));
        }
        match (i, n.parent) {
            (0, None) if id == 0 => {}
            (0, _) => return Err(at("the first node must be the root: id 0, no parent".into())),
            (_, None) => return Err(at("only the root may have no parent".into())),
            (_, Some(p)) if !self.nodes.contains_key(&p) => {
                return Err(at(format!("parent {p} is not listed before it")));
            }
            _ => {}
        }
        let expected_depth = n.parent.map_or(0, |p| self.nodes[&p].depth + 1);
        if n.depth != expected_depth {
            return Err(at(format!("depth {} but its parent implies {expected_depth}", n.depth)));
        }
        let expected_edge = if n.parent.is_none() {
            EdgeType::Root
        } else {
            Op::edge_type_of(&n.ops)
        };
        // A sweep's (an exploration's) cells and replicates keep their ops but say `sweep`
        // (`explore`).
        let sweep =
            matches!(n.edge_type, EdgeType::Sweep | EdgeType::Explore) && n.parent.is_some() && !n.ops.is_empty();
        if n.edge_type != expected_edge && !sweep {
            return Err(at(format!(
                "edge type {:?} does not match its ops ({expected_edge:?})",
                n.edge_type
            )));
        }
        for op in &n.ops {
            if let Op::Advance { turns } = op
                && *turns > self.limits.max_turns
            {
                return Err(at(format!(
                    "an advance of {turns} turns is beyond this server's {} per request",
                    self.limits.max_turns
                )));
            }
        }
        let mut sim = n.sim;
        sim.attach(self.market.as_ref());
        sim.distrust();
        sim.check_imported().map_err(|e| at(e.to_string()))?;
        let viewable = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = (sim.view(), sim.state(), sim.turns());
        }));
        if viewable.is_err() {
            return Err(at("the simulator state is inconsistent".into()));
        }
        if let Some(p) = n.parent
            && let Some(parent) = self.nodes.get_mut(&p)
        {
            parent.children.push(id);
        }
        // Objects, checked as they were read (`log_entries`).
        let entries: Vec<String> = n.logs.0;
        let now = crate::store::now_ms();
        self.count += 1;
        let node = Node {
            id,
            parent: n.parent,
            depth: n.depth,
            edge_type: n.edge_type,
            ops: {
                let mut ops = n.ops;
                ops.shrink_to_fit();
                ops
            },
            children: Vec::new(),
            turns: sim.turns(),
            created: now,
            finished: Some(now),
            cost: 0,
            used: 0,
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
        };
        if let Some(a) = &n.annotation
            && let Some(a) = notebook::checked(a).map_err(|e| at(format!("annotation: {e}")))?
        {
            self.notes.insert(id, a);
        }
        if !n.asks.is_empty() {
            notebook::check_asks(&n.asks).map_err(|e| at(format!("asks: {e}")))?;
            self.asks.insert(id, n.asks);
        }
        Ok(self.nodes.entry(id).or_insert(node))
    }

    /// Drops a stored node's simulator and log from memory (they are in the store now).
    pub fn release(&mut self, id: NodeId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.sim = None;
            n.log = Arc::new(NodeLog::unloaded());
        }
    }

    /// The tree, once every node is in. `seq` is the export's when it came after the nodes.
    pub fn finish(mut self, source: Option<crate::store::TreeSource>) -> Result<SimTree, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        if !self.nodes.contains_key(&0) {
            return Err(bad("the export has no root node 0".into()));
        }
        let max_id = self.nodes.keys().next_back().copied().unwrap_or(0);
        let seq = self.seq.get_or_insert(max_id + 1);
        if *seq > MAX_NODE_ID + 1 {
            return Err(bad(format!("seq {seq} is beyond the largest node id ({MAX_NODE_ID})")));
        }
        if max_id >= *seq {
            return Err(bad(format!("node {max_id} is not below seq {seq}")));
        }
        Ok(SimTree {
            scenario: self.scenario,
            document: self.document.map(Arc::new),
            scenario_version: self.scenario_version,
            nodes: self.nodes,
            next_id: *seq,
            source,
            notes: self.notes,
            asks: self.asks,
        })
    }
}

/// Reads an export from `reader` node by node, handing each to `on_node` (which checks and keeps
/// it with [`Importer::add`]): memory holds one node's JSON at a time, whatever the export's
/// size. The header fields (`format`, `scenario`, `root`) must come before `nodes`, as exports
/// write them; `seq` may come before or after.
pub fn read_export<R: std::io::Read>(
    reader: R,
    limits: &ImportLimits,
    market: Option<Arc<MarketData>>,
    on_node: impl FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>,
) -> Result<Importer, TreeError> {
    use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

    struct State<'a, F> {
        limits: &'a ImportLimits,
        market: Option<Arc<MarketData>>,
        on_node: F,
        failure: Option<TreeError>,
    }
    struct Top<'s, 'a, F>(&'s mut State<'a, F>);
    struct Nodes<'s, 'a, F>(&'s mut State<'a, F>, &'s mut Importer);

    impl<'de, F: FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>> Visitor<'de> for Top<'_, '_, F> {
        type Value = Option<Importer>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a simtree export object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut format, mut scenario, mut root, mut seq) = (None, None, None, None);
            let mut importer: Option<Importer> = None;
            let mut document: Option<Value> = None;
            let mut version: Option<u64> = None;
            let (mut name, mut description) = (None, None);
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "scenario_version" => {
                        let v = map.next_value::<u64>()?;
                        match &mut importer {
                            Some(imp) => imp.scenario_version = Some(v),
                            None => version = Some(v),
                        }
                    }
                    "format" => format = Some(map.next_value::<String>()?),
                    "document" => {
                        let d = map.next_value::<Value>()?;
                        match &mut importer {
                            Some(imp) => imp.document = Some(d),
                            None => document = Some(d),
                        }
                    }
                    "scenario" => scenario = Some(map.next_value::<String>()?),
                    "name" | "description" => {
                        let v = map.next_value::<String>()?;
                        let slot = match (&mut importer, key.as_str()) {
                            (Some(imp), "name") => &mut imp.name,
                            (Some(imp), _) => &mut imp.description,
                            (None, "name") => &mut name,
                            (None, _) => &mut description,
                        };
                        *slot = Some(v);
                    }
                    "root" => root = Some(map.next_value::<NodeId>()?),
                    "seq" => {
                        let s = map.next_value::<NodeId>()?;
                        if let Some(imp) = &mut importer {
                            imp.set_seq(s);
                        }
                        seq = Some(s);
                    }
                    "nodes" => {
                        if importer.is_some() {
                            return Err(A::Error::custom("duplicate field `nodes`"));
                        }
                        let (Some(format), Some(scenario), Some(root)) = (format.take(), scenario.take(), root) else {
                            return Err(A::Error::custom(
                                "`format`, `scenario` and `root` must come before `nodes`",
                            ));
                        };
                        let mut imp =
                            match Importer::new(format, scenario, root, seq, self.0.limits, self.0.market.clone()) {
                                Ok(i) => i,
                                Err(e) => {
                                    self.0.failure = Some(e);
                                    return Err(A::Error::custom("refused"));
                                }
                            };
                        imp.document = document.take();
                        imp.scenario_version = version.take();
                        imp.name = name.take();
                        imp.description = description.take();
                        map.next_value_seed(Nodes(self.0, &mut imp))?;
                        importer = Some(imp);
                    }
                    "sweeps" => {
                        let Some(imp) = &mut importer else {
                            return Err(A::Error::custom("`sweeps` must come after `nodes`"));
                        };
                        imp.sweeps = map.next_value_seed(Sweeps)?;
                    }
                    other => {
                        return Err(A::Error::unknown_field(
                            other,
                            &[
                                "format",
                                "scenario",
                                "name",
                                "description",
                                "document",
                                "scenario_version",
                                "root",
                                "seq",
                                "nodes",
                                "sweeps",
                            ],
                        ));
                    }
                }
            }
            Ok(importer)
        }
    }

    impl<'de, F: FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>> DeserializeSeed<'de> for Nodes<'_, '_, F> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de, F: FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>> Visitor<'de> for Nodes<'_, '_, F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of nodes")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0usize;
            loop {
                let node = match seq.next_element::<NodeExport>() {
                    Ok(Some(n)) => n,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(A::Error::custom(format!("nodes[{i}]: {e}"))),
                };
                if let Err(e) = (self.0.on_node)(self.1, node) {
                    self.0.failure = Some(e);
                    return Err(A::Error::custom("refused"));
                }
                i += 1;
            }
        }
    }

    /// The `sweeps` list, refused past [`MAX_EXPORT_SWEEPS`] entries as it is read.
    struct Sweeps;

    impl<'de> DeserializeSeed<'de> for Sweeps {
        type Value = Vec<Value>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Value>, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Sweeps {
        type Value = Vec<Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of sweeps")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<Value>()? {
                if out.len() == MAX_EXPORT_SWEEPS {
                    return Err(A::Error::custom(format!("more than {MAX_EXPORT_SWEEPS} sweeps")));
                }
                out.push(s);
            }
            Ok(out)
        }
    }

    let mut state = State {
        limits,
        market,
        on_node,
        failure: None,
    };
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    let (parsed, too_large) = log_entries::with_budget(limits.max_memory, || {
        (&mut de)
            .deserialize_map(Top(&mut state))
            .and_then(|imp| de.end().map(|()| imp))
    });
    match (parsed, state.failure) {
        (_, Some(e)) => Err(e),
        (Ok(Some(imp)), None) => Ok(imp),
        (Ok(None), None) => Err(TreeError::InvalidOp("invalid export: missing field `nodes`".into())),
        (Err(e), None) if too_large => Err(TreeError::TooLarge(format!("import refused: {e}"))),
        (Err(e), None) => Err(TreeError::InvalidOp(format!("invalid export: {e}"))),
    }
}

/// What an imported tree may claim: the importing server's own limits.
#[derive(Clone, Copy, Debug)]
pub struct ImportLimits {
    pub max_nodes: usize,
    pub max_turns: u64,
    /// The server's memory budget in bytes (`--max-memory-mb`; 0: none), consulted while a
    /// node's log is read.
    pub max_memory: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_nodes: 100_000,
            max_turns: 1000,
            max_memory: 0,
        }
    }
}

pub const EXPORT_FORMAT: &str = "simtree-export/2";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeExport {
    pub format: String,
    pub scenario: String,
    /// The tree's name and description (absent in exports before the notebook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The document a user brought the scenario as (absent for a library scenario).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<Value>,
    /// The version of the saved scenario `scenario` the document is (a tree made from the
    /// library).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_version: Option<u64>,
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
    pub logs: LogEntries,
    /// Recorded LLM calls, so an imported tree can still be replayed offline.
    #[serde(default)]
    pub records: Vec<LlmRecord>,
    /// What a user wrote on the node (absent when nothing; exports before the notebook lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<Annotation>,
    /// The questions asked of its agents (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<Ask>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::assets_dir;
    use crate::llm::MockClient;
    use crate::scenario::Scenario;
    use serde_json::json;

    fn tree() -> SimTree {
        let s = Scenario::load_file(&assets_dir().unwrap().join("scenarios/simple_chat.json")).unwrap();
        SimTree::new("simple_chat", Sim::Social(s.build(None).unwrap()))
    }

    fn advance(t: &mut SimTree, parent: NodeId, turns: u64) -> NodeId {
        let (id, mut sim, log) = t.start_advance(parent, turns).unwrap();
        let mut sink = |e: Event| {
            log.push(&entry_json(&e, id));
        };
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
    fn entries_from_reads_the_entries_after_an_index() {
        let log = NodeLog::default();
        for e in ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"] {
            log.push(e);
        }
        assert_eq!(log.entries_from(0), log.entries());
        assert_eq!(log.entries_from(1), ["{\"b\":2}", "{\"c\":3}"]);
        assert_eq!(log.entries_from(3), Vec::<String>::new());
        assert_eq!(log.entries_from(7), Vec::<String>::new());
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
        assert_eq!(
            bcast.log.len(),
            1 + 3 + 1,
            "the counterfactual, three deltas and one system_broadcast"
        );
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
        let mut back = SimTree::import(serde_json::from_str(&json).unwrap(), None, &ImportLimits::default()).unwrap();
        assert_eq!(serde_json::to_string(&back.export().unwrap()).unwrap(), json);
        assert_eq!(back.logs(2).unwrap(), t.logs(2).unwrap());
        let mut broken: TreeExport = serde_json::from_str(&json).unwrap();
        broken.nodes[1].parent = Some(99);
        assert!(SimTree::import(broken, None, &ImportLimits::default()).is_err());
    }

    #[test]
    fn an_import_beyond_the_engine_limits_names_the_node_and_the_field() {
        let mut t = tree();
        advance(&mut t, 0, 1);
        let mut export = t.export().unwrap();
        let Sim::Social(s) = &mut export.nodes[1].sim else {
            panic!("a social tree")
        };
        s.max_steps_per_turn = 0;
        let Err(e) = SimTree::import(export, None, &ImportLimits::default()) else {
            panic!("a simulator of 0 steps per turn was imported")
        };
        assert_eq!(
            e.to_string(),
            "nodes[1] (node 1): max_steps_per_turn must be between 1 and 100, got 0"
        );
    }
}
