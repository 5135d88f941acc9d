//! The workbench's side of the store: what is written when, trees loaded on first use, the
//! tree list with metadata, renames, and the cache of live simulators.
//!
//! Writes follow the tree's own order (they are queued under the tree's lock) and the store
//! thread commits what is queued in groups (within 5 ms). Durability points wait for that
//! commit: a created or imported tree, a branch, a finished run's state and record (before
//! `run_finish` is announced), a deletion, a rename. A run's node record is queued when it is
//! attached and its log entries as the run produces them; the run does not wait for them.
//!
//! The cache: every node holding a simulator or log in memory has a cost (its state's size in
//! the store form plus its log) and a last use. A sweeper keeps the sum under `--cache-mb` by
//! dropping the least recently used (they are rebuilt from the store on demand), then by closing
//! idle trees (no run, nobody holding them); their structure is read back on the next request.

use std::sync::Arc;

use serde_json::Value;
use simtree_shared::{SimKind, TreeInfo, TreeRef};

use super::explore::{ExploreData, restore_explores};
use super::job::{imported, parse_rows};
use super::sweep::{SweepData, restore_sweeps};
use super::table::Transfer;
use super::trees::Found;
use super::{Core, Full, TreeHandle, Trees, WorkbenchError, lock};
use crate::llm::budget::Limits as BudgetLimits;
use crate::sim::Sim;
use crate::store::{Store, StoreError, TreeRow, TreeSource, Write, encode_state, now_ms};
use crate::tree::{ImportLimits, NodeId, SimTree, TreeError};

service!(
    /// The server's housekeeping: whether the store takes writes, the cache of live simulators, and
    /// the runs in flight at shutdown.
    Upkeep
);

/// A tree's editable and descriptive metadata.
#[derive(Clone, Debug)]
pub struct Meta {
    pub(crate) name: String,
    /// What the tree is about (`PATCH /devui/simtree/{tree} {"description"}`).
    pub(crate) description: Option<String>,
    pub(crate) created: u64,
    pub(crate) last_activity: u64,
}

/// The longest tree name.
pub(crate) const MAX_NAME_CHARS: usize = 200;

impl TreeHandle {
    pub(super) fn persist(&self, w: Write) {
        if let Some(store) = &self.store {
            store.write(w);
        }
    }

    /// Waits until everything written for this tree so far is committed.
    pub(super) fn flush(&self) -> Result<(), WorkbenchError> {
        match &self.store {
            Some(s) => s.flush().map_err(WorkbenchError::from),
            None => Ok(()),
        }
    }

    /// Stores `writes` before the caller changes anything in memory: a change is made only
    /// once it is committed, and a commit that fails leaves nothing changed (the writes are
    /// dropped, not retried later) and answers 503 with the cause.
    pub(super) fn store_first(&self, writes: Vec<Write>) -> Result<(), WorkbenchError> {
        match &self.store {
            Some(s) => {
                s.commit_or_nothing(writes).map_err(|source| WorkbenchError::NotStored { what: "change", source })
            }
            None => Ok(()),
        }
    }

    pub(super) async fn flush_async(&self) -> Result<(), WorkbenchError> {
        match &self.store {
            Some(s) => s.flush_async().await.map_err(WorkbenchError::from),
            None => Ok(()),
        }
    }

    pub(super) fn stored(&self) -> bool {
        self.store.is_some()
    }

    /// Records activity: the tree row's last activity, next id and node count.
    pub(super) fn touch(&self, tree: &SimTree) {
        let now = now_ms();
        self.persist(self.touch_write(tree, tree.len(), now));
        lock(&self.meta).last_activity = now;
    }

    /// The write recording activity at `now` with `nodes` nodes.
    pub(super) fn touch_write(&self, tree: &SimTree, nodes: usize, now: u64) -> Write {
        Write::Touch { tree: self.id, last_activity: now, seq: tree.seq(), nodes: nodes as u64 }
    }

    /// Writes a node's record.
    pub(super) fn persist_row(&self, tree: &SimTree, id: NodeId) {
        if let (true, Ok(row)) = (self.stored(), tree.row(id)) {
            self.persist(Write::Node { tree: self.id, row });
        }
    }

    /// Writes a node with its state and its whole log (a new root, a branch, an imported node).
    pub(super) fn persist_node(&self, tree: &mut SimTree, id: NodeId) -> Result<(), WorkbenchError> {
        if !self.stored() {
            return Ok(());
        }
        let sim = tree.sim(id)?;
        self.persist_state(tree, id, &sim)?;
        self.persist_row(tree, id);
        if let Some(w) = Write::whole_log(self.id, id, &tree.log(id)?.entries()) {
            self.persist(w);
        }
        let marks = match tree.node(id)?.parent {
            Some(p) => tree.sim(p)?.memory_marks(),
            None => Vec::new(),
        };
        self.persist_memory(id, sim.memory_since(&marks));
        if let Some(a) = tree.notes.get(&id) {
            self.persist(Write::Annotate {
                tree: self.id,
                node: id,
                body: Some(serde_json::to_string(a).unwrap_or_default()),
            });
        }
        Ok(())
    }

    /// Indexes for search what the agents' memories took in at node `id`.
    pub(super) fn persist_memory(&self, id: NodeId, text: String) {
        if !text.trim().is_empty() {
            self.persist(Write::Text { tree: self.id, node: id, kind: "memory".into(), ord: 0, body: text });
        }
    }

    /// Writes a node's state (its chunks first written here are keyed by the node).
    pub(super) fn persist_state(&self, tree: &mut SimTree, id: NodeId, sim: &Sim) -> Result<(), WorkbenchError> {
        let (encoded, _) = encode_state(sim, id, None);
        let encoded = encoded?;
        tree.set_cost(id, encoded.raw_len);
        self.persist(Write::State { tree: self.id, node: id, data: encoded.data, chunks: encoded.chunks });
        Ok(())
    }

    /// Takes a node whose writes failed back out of the tree (and, later, out of the store:
    /// whatever of it reached the database is deleted with the next commit that succeeds).
    pub(super) fn roll_back(&self, id: NodeId) {
        let mut t = self.lock();
        if let Ok(removed) = t.delete_subtree(id) {
            self.persist_delete(&t, removed);
            self.sweeps.prune(self, &t);
            self.explores.prune(self, &t);
            self.send(super::TreeMsg::Deleted { node: id });
        }
    }

    pub(super) fn persist_delete(&self, tree: &SimTree, nodes: Vec<NodeId>) {
        if let Some(store) = &self.store {
            store.write_removal(self.id, nodes);
        }
        self.touch(tree);
    }

    pub(crate) fn info(&self) -> TreeInfo {
        let meta = lock(&self.meta).clone();
        let (scenario, nodes) = {
            let t = self.lock();
            (t.scenario.clone(), t.len() as u64)
        };
        TreeInfo {
            id: self.id,
            root: 0,
            name: meta.name,
            scenario,
            kind: self.kind,
            created: meta.created,
            nodes,
            last_activity: meta.last_activity,
            document: None,
            scenario_version: None,
            description: meta.description,
            provenance: None,
            scene: None,
            prompt_layout: None,
        }
    }

    pub(super) fn row(&self) -> TreeRow {
        let info = self.info();
        TreeRow {
            id: self.id,
            name: info.name,
            scenario: info.scenario,
            kind: info.kind,
            created: info.created,
            last_activity: info.last_activity,
            seq: self.lock().seq(),
            nodes: info.nodes,
            budget: self.budget.as_ref().and_then(|b| b.limits().tokens),
            description: info.description,
        }
    }
}

/// A running node's log entries on their way to the store: queued in batches (at most a tenth of a
/// second or 256 entries apart) rather than one by one, so a turn costs a commit, not one per
/// event. A crash loses at most the last batch of a run that was in flight anyway.
pub(super) struct LogBatch {
    node: NodeId,
    first: usize,
    count: u64,
    entries: String,
    since: Option<std::time::Instant>,
}

impl LogBatch {
    const MAX_ENTRIES: u64 = 256;
    const MAX_AGE: std::time::Duration = std::time::Duration::from_millis(100);

    pub(super) fn new(node: NodeId) -> LogBatch {
        LogBatch { node, first: 0, count: 0, entries: String::new(), since: None }
    }

    /// Adds entry `index` of the node's own log.
    pub(super) fn push(&mut self, handle: &TreeHandle, index: usize, entry: &str) {
        if self.count == 0 {
            self.first = index;
            self.since = Some(std::time::Instant::now());
        } else {
            self.entries.push('\n');
        }
        self.entries.push_str(entry);
        self.count += 1;
        if self.count >= Self::MAX_ENTRIES || self.since.is_some_and(|t| t.elapsed() >= Self::MAX_AGE) {
            self.flush(handle);
        }
    }

    /// Whether nothing waits in the batch (it was just flushed).
    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// What is batched, as a write of tree `tree` (for a transaction of the caller's own).
    pub(super) fn take(&mut self, tree: u64) -> Option<Write> {
        if self.count == 0 {
            return None;
        }
        self.since = None;
        Some(Write::Log {
            tree,
            node: self.node,
            index: self.first as u64,
            count: std::mem::take(&mut self.count),
            entries: std::mem::take(&mut self.entries),
        })
    }

    /// Queues what is batched.
    pub(super) fn flush(&mut self, handle: &TreeHandle) {
        if self.count == 0 {
            return;
        }
        handle.persist(Write::Log {
            tree: handle.id,
            node: self.node,
            index: self.first as u64,
            count: self.count,
            entries: std::mem::take(&mut self.entries),
        });
        self.count = 0;
        self.since = None;
    }
}

/// Hands memory the allocator keeps after an eviction back to the system (glibc keeps freed small
/// blocks in its arenas otherwise, and resident memory would not fall).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Why the store cannot take writes now ([`Core::ready`]): its commits fail, or a lost
/// database does not answer; the cause as the store gave it.
#[derive(Debug, thiserror::Error)]
#[error("the store cannot take writes: {0}")]
pub struct NotReady(pub String);

impl Core {
    /// Makes the workbench durable: trees in `store` are listed (and loaded on first use), runs
    /// the last server left in flight become `interrupted` (but those whose jobs are adopted,
    /// when jobs were enabled before), and every change from now on is written. Nothing but the
    /// tree list is read here.
    pub(crate) fn attach_store(&mut self, store: Store) -> Result<(), StoreError> {
        let store = Arc::new(store);
        let abandoned = store.read(|db| db.abandoned_imports())?;
        for (tree, nodes) in abandoned {
            tracing::warn!(
                tree,
                nodes,
                "an import the last server did not finish was removed (its tree id is not reused)"
            );
        }
        // Runs whose jobs other processes still run are adopted, not interrupted (jobs enabled
        // first: see `Core::enable_jobs`).
        let keep = self.jobs.get().map(|hub| hub.adopting()).unwrap_or_default();
        let interrupted = store.read(move |db| db.interrupt_running(&keep))?;
        let rows = store.read(|db| db.trees())?;
        if interrupted > 0 {
            tracing::warn!(nodes = interrupted, "runs in flight when the server stopped are marked interrupted");
        }
        // Stored, not derived from the listed trees: a deleted tree's or a dead import's id is
        // never handed out again (its rows could otherwise resurface in the new tree).
        let next = store.read(|db| db.next_tree())?;
        let next = rows.iter().map(|r| r.id + 1).max().unwrap_or(0).max(next);
        self.next_tree.store(next, std::sync::atomic::Ordering::SeqCst);
        for r in rows {
            self.trees.insert_stored(r);
        }
        self.library = super::library::Library::open(store.clone(), self.limits.max_body_bytes)?;
        self.store = Some(store);
        self.load_datasets()
    }
}

impl Upkeep<'_> {
    /// The cache's sweep ([`Core::sweep_cache`]), a task of its own for as long as the server runs.
    pub fn sweep_cache(&self) -> impl std::future::Future<Output = ()> + Send + 'static + use<> {
        Arc::clone(self.0).sweep_cache()
    }

    /// Whether acknowledged writes can be stored now: `Err` with the cause while the store's
    /// commits fail (a full disk, a lost database). Memory-only workbenches are always ready.
    pub(crate) fn ready(&self) -> Result<(), NotReady> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        if let Some(cause) = store.fault() {
            return Err(NotReady(cause));
        }
        // PostgreSQL: a lost connection shows only when used.
        store.read(|db| db.ping()).map_err(|e| NotReady(e.to_string()))
    }
}

impl Core {
    /// A tree id no other tree had or will have: from the database when it may be shared
    /// (PostgreSQL: taken atomically, so two processes never get the same), else counted here
    /// (memory only, or a SQLite folder, which one process holds).
    pub(super) fn new_tree_id(&self) -> Result<u64, WorkbenchError> {
        if let Some(store) = &self.store
            && let Some(id) = store.take_tree_id().map_err(WorkbenchError::NoTreeId)?
        {
            return Ok(id);
        }
        Ok(self.next_tree.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
    }

    /// Refuses new work (503) while the store's commits fail.
    pub(super) fn writable(&self) -> Result<(), WorkbenchError> {
        match self.store.as_ref().and_then(|s| s.fault()) {
            Some(cause) => Err(WorkbenchError::NotWritable(cause)),
            None => Ok(()),
        }
    }

    /// A stored tree's structure, read on first use.
    pub(super) fn load(&self, id: u64) -> Result<Option<Arc<TreeHandle>>, WorkbenchError> {
        let _one_at_a_time = lock(&self.loading);
        let (Some(store), Some(found)) = (&self.store, self.trees.get(id)) else {
            return Ok(None);
        };
        let row = match found {
            Found::Open(t) => return Ok(Some(t)),
            Found::Stored(row) => row,
        };
        let rows = store.read(move |db| db.nodes(id))?.intact(id, &store.location).map_err(TreeError::from)?;
        let document = store.read(move |db| db.document(id))?;
        let document: Option<Arc<serde_json::Value>> =
            document.and_then(|b| serde_json::from_str(&b).ok()).map(Arc::new);
        let version = store.read(move |db| db.origin(id))?.map(|(_, version)| version);
        let mut source = self.source(id);
        if let Some(name) = document.as_deref().and_then(super::dataset_of) {
            // A tree on an uploaded dataset trades on it again (a dataset in use is not deleted).
            source.market = self.market_for(Some(name))?;
        }
        let notes = store.read(move |db| db.annotations(id))?;
        let mut tree = SimTree::restore(row.scenario.clone(), row.seq, rows, source)?;
        if let Some(hub) = self.jobs.get() {
            // Runs adopted from the last server are running, not interrupted.
            for node in hub.adopting_in(id) {
                tree.resume_running(node);
            }
        }
        tree.document = document;
        tree.scenario_version = version;
        tree.set_notes(id, notes);
        let asks = store.read(move |db| db.asks(id))?;
        tree.set_asks(id, asks);
        if row.kind == SimKind::Abm && !self.abm_elsewhere() {
            // A restored model runs on the worker like a created one: start it now, not mid-run
            // (a worker that cannot start fails the run with the reason).
            let _ = self.abm_pool();
        }
        self.pressure.add(tree.structure_cost());
        let handle = Arc::new(self.handle(
            id,
            tree,
            row.kind,
            Meta {
                name: row.name.clone(),
                description: row.description.clone(),
                created: row.created,
                last_activity: row.last_activity,
            },
            BudgetLimits { tokens: row.budget, calls: None, money: store.read(move |db| db.tree_money(id))? },
        ));
        if self.runs_jobs_only {
            // A worker reads a tree to run its jobs: the sweeps and explorations are the
            // leader's (restoring them rewrote their rows, a running exploration as interrupted).
            return Ok(self.trees.opened(handle));
        }
        let sweeps = store.read(move |db| db.sweeps(id))?;
        // On a database a team shares, a sweep whose server died is carried on.
        restore_sweeps(&handle, parse_rows::<SweepData>(id, &sweeps), self.jobs.get().is_some());
        let explores = store.read(move |db| db.explores(id))?;
        restore_explores(&handle, parse_rows::<ExploreData>(id, &explores), self.jobs.get().is_some());
        Ok(self.trees.opened(handle))
    }

    fn source(&self, tree: u64) -> TreeSource {
        self.source_for(self.store.as_ref().expect("a stored tree has a store"), tree)
    }

    pub(super) fn source_for(&self, store: &Arc<Store>, tree: u64) -> TreeSource {
        TreeSource {
            store: store.clone(),
            tree,
            cache: Default::default(),
            market: self.market.clone(),
            pressure: self.pressure.clone(),
        }
    }

    /// Keeps the cache within `--cache-mb` for as long as the server runs: a trim every half
    /// second, and at once when rebuilds have brought in an eighth of the budget since the last.
    pub(crate) async fn sweep_cache(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                _ = self.pressure.wake.notified() => {}
            }
            let wb = self.clone();
            let _ = tokio::task::spawn_blocking(move || Upkeep(&wb).trim_cache()).await;
        }
    }
}

impl Trees<'_> {
    /// Every tree, loaded or not, by id.
    pub fn list(&self) -> Vec<TreeInfo> {
        self.trees.infos()
    }

    /// `GET /devui/simtree/{tree}`: the tree's list entry and the document it was made from.
    pub(crate) fn tree_info(&self, tree: u64) -> Result<TreeInfo, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut info = handle.info();
        {
            let mut t = handle.lock();
            info.document = t.document.as_deref().cloned();
            info.scenario_version = t.scenario_version;
            if let crate::sim::Sim::Social(s) = &*t.sim(0)? {
                info.scene = Some(s.scene_about());
                info.prompt_layout = Some(s.prompt_layout());
            }
        }
        info.provenance = Some(self.provenance(tree, 0)?);
        Ok(info)
    }
}

impl Core {
    /// Writes a new tree whole (its row and every node) and waits for the commit.
    pub(super) fn persist_tree(&self, handle: &TreeHandle) -> Result<(), WorkbenchError> {
        if !handle.stored() {
            return Ok(());
        }
        handle.persist(Write::Tree(handle.row()));
        if let Some(money) = handle.money_budget {
            handle.persist(Write::TreeMoney { tree: handle.id, money });
        }
        let written = {
            let mut t = handle.lock();
            if let Some(doc) = &t.document {
                handle.persist(Write::Document { tree: handle.id, body: doc.to_string() });
            }
            if let Some(version) = t.scenario_version {
                handle.persist(Write::Origin { tree: handle.id, scenario: t.scenario.clone(), version });
            }
            t.ids().into_iter().try_for_each(|id| handle.persist_node(&mut t, id))
        };
        let stored = written.and_then(|()| handle.flush());
        if stored.is_err() {
            // Not acknowledged: its rows, kept for a retry with the failed commit, go with it.
            handle.persist(Write::DeleteTree { tree: handle.id });
        }
        stored
    }
}

impl Transfer<'_> {
    /// Imports an export read node by node from `reader` (a spooled request body or a file):
    /// each node is checked, then (with a store) written and released from memory, so an import
    /// of any size needs memory for one node at a time. Nothing is listed unless all of it
    /// passes; a refused import leaves no rows. Also returns the export's statement of
    /// provenance as written, unread (see [`Core::provenance_check`]).
    pub(crate) fn import_stream(&self, reader: impl std::io::Read) -> Result<(TreeRef, Option<Value>), WorkbenchError> {
        self.writable()?;
        if self.tree_count() >= self.limits.max_trees {
            return Err(Full::Trees(self.limits.max_trees).into());
        }
        let id = self.new_tree_id()?;
        let limits = ImportLimits {
            max_nodes: self.limits.max_nodes_per_tree,
            max_turns: self.limits.max_turns_per_request,
            max_memory: self.memory.budget(),
        };
        let store = self.store.clone();
        let mut kind = None;
        // The root's rule hooks, checked as creating a tree checks them; a branch cannot change
        // them, so a node whose hooks differ is refused.
        let mut hooks: Option<Option<String>> = None;
        let mut dedupe = store.as_ref().map(|_| crate::chunks::Dedupe::default());
        let mut ancestors: std::collections::HashMap<NodeId, Vec<NodeId>> = Default::default();
        // Where each imported node's agents' memories end: what a node added is indexed.
        let mut marks: std::collections::HashMap<NodeId, Vec<(usize, usize)>> = Default::default();
        if let Some(store) = &store {
            // Before any of its rows: should the server stop mid-import, the next start-up finds
            // the marker and deletes what was written.
            store.write(Write::ImportBegin { tree: id });
        }
        let result = crate::tree::read_export(reader, &limits, self.market.clone(), |importer, n| {
            let node = importer.add(n)?;
            let id_n = node.id;
            if let Some(sim) = &node.sim {
                if kind.is_none() {
                    kind = Some(sim.sim_kind());
                }
                let source = sim.hook_source();
                match &hooks {
                    None => hooks = Some(source.map(str::to_string)),
                    Some(root) if root.as_deref() != source => {
                        return Err(TreeError::InvalidOp(format!(
                            "node {id_n}: its scene's rule hooks differ from the root's (no branch changes them)"
                        )));
                    }
                    Some(_) => {}
                }
            }
            if let Some(store) = &store {
                let sim = node.sim.clone().expect("an imported node has its simulator");
                let path = match node.parent {
                    Some(p) => {
                        let mut v = ancestors.get(&p).cloned().unwrap_or_default();
                        v.push(p);
                        v
                    }
                    None => Vec::new(),
                };
                let mut d = dedupe.take().unwrap_or_default();
                d.ancestors = path.iter().copied().collect();
                ancestors.insert(id_n, path);
                let (encoded, d) = encode_state(&sim, id_n, Some(d));
                dedupe = d;
                let encoded = encoded.map_err(|e| TreeError::Store(e.to_string()))?;
                let entries = node.log.entries();
                store.write(Write::Node { tree: id, row: node.row() });
                store.write(Write::State { tree: id, node: id_n, data: encoded.data, chunks: encoded.chunks });
                if let Some(w) = Write::whole_log(id, id_n, &entries) {
                    store.write(w);
                }
                let before = node.parent.and_then(|p| marks.get(&p)).map_or(&[][..], Vec::as_slice);
                let memory = sim.memory_since(before);
                if !memory.trim().is_empty() {
                    store.write(Write::Text { tree: id, node: id_n, kind: "memory".into(), ord: 0, body: memory });
                }
                marks.insert(id_n, sim.memory_marks());
                importer.release(id_n);
                if let Some(a) = importer.notes.get(&id_n) {
                    store.write(Write::Annotate {
                        tree: id,
                        node: id_n,
                        body: Some(serde_json::to_string(a).unwrap_or_default()),
                    });
                }
                for a in importer.asks.get(&id_n).into_iter().flatten() {
                    store.write(Write::Ask {
                        tree: id,
                        node: id_n,
                        seq: a.seq,
                        body: serde_json::to_string(a).unwrap_or_default(),
                    });
                }
            }
            Ok(())
        });
        let mut label = (None, None);
        let mut statement = None;
        let tree = result.and_then(|mut importer| {
            statement = importer.statement.take();
            let jobs = (
                std::mem::take(&mut importer.sweeps),
                std::mem::take(&mut importer.explores),
            );
            // A name and description travel with the tree, checked as if typed.
            if let Some(name) = importer.name.take() {
                label.0 = Some(super::check_name(&name).map_err(|e| TreeError::InvalidOp(format!("name: {e}")))?);
            }
            if let Some(d) = importer.description.take() {
                label.1 = crate::tree::notebook::description(&d).map_err(|e| TreeError::InvalidOp(e.to_string()))?;
            }
            // A document travels with its tree; it is checked like one posted to create a tree.
            if let Some(version) = importer.scenario_version {
                if importer.document.is_none() {
                    return Err(TreeError::InvalidOp(
                        "scenario_version: an export names a saved scenario's version only with its document".into(),
                    ));
                }
                super::library::check_scenario_name(importer.scenario())
                    .map_err(|e| TreeError::InvalidOp(format!("scenario: {e}")))?;
                if version == 0 {
                    return Err(TreeError::InvalidOp("scenario_version: versions start at 1".into()));
                }
            }
            if let Some(doc) = &importer.document {
                crate::scenario::UserScenario::from_document(super::DOCUMENT_ID, doc)
                    .map_err(|e| TreeError::InvalidOp(format!("document: {e}")))?;
                if let Some(name) = super::dataset_of(doc) {
                    return Err(TreeError::InvalidOp(format!(
                        "document: the tree trades on the uploaded dataset '{name}'; importing such trees is not supported yet"
                    )));
                }
            }
            Ok((importer.finish(store.as_ref().map(|_| self.source(id)))?, jobs))
        });
        let kind = kind.unwrap_or(SimKind::Social);
        let tree = tree.map_err(WorkbenchError::from).and_then(|(tree, (sweeps, explores))| {
            if let Some(Some(source)) = &hooks {
                self.check_hook_source(source)?;
            }
            if kind == SimKind::Abm && !self.abm_elsewhere() {
                // Imported models run on the worker like created ones; start it now, not mid-run.
                self.abm_pool()?;
            }
            let sweeps = imported::<SweepData>("sweeps", sweeps, &tree)?;
            let explores = imported::<ExploreData>("explores", explores, &tree)?;
            Ok(((sweeps, explores), tree))
        });
        let ((sweeps, explores), tree) = match tree {
            Ok(t) => t,
            Err(e) => {
                if let Some(store) = &store {
                    store.write(Write::DeleteTree { tree: id });
                    let _ = store.flush();
                }
                return Err(e);
            }
        };
        let now = now_ms();
        let (name, description) = label;
        let name = name.unwrap_or_else(|| tree.scenario.clone());
        let handle = Arc::new(self.handle(
            id,
            tree,
            kind,
            Meta { name, description: description.clone(), created: now, last_activity: now },
            BudgetLimits::default(),
        ));
        restore_sweeps(&handle, sweeps, false);
        restore_explores(&handle, explores, false);
        if let Some(store) = &store {
            store.write(Write::Tree(handle.row()));
            {
                let t = handle.lock();
                if let Some(doc) = &t.document {
                    store.write(Write::Document { tree: id, body: doc.to_string() });
                }
                if let Some(version) = t.scenario_version {
                    store.write(Write::Origin { tree: id, scenario: t.scenario.clone(), version });
                }
            }
            if description.is_some() {
                store.write(Write::Describe { tree: id, description });
            }
            store.write(Write::ImportEnd { tree: id });
            if let Err(e) = store.flush() {
                // Not acknowledged: its rows go (the marker makes sure of it at the next start).
                store.write(Write::DeleteTree { tree: id });
                return Err(e.into());
            }
        }
        self.trees.insert_open(handle);
        Ok((TreeRef { id, root: 0 }, statement))
    }
}

impl Core {
    pub(super) fn tree_count(&self) -> usize {
        self.trees.len()
    }
}

impl Upkeep<'_> {
    /// What the cache holds now by its own accounting: the loaded trees' structures and the
    /// simulators and logs in memory (trees being worked on are skipped).
    pub fn cache_bytes(&self) -> usize {
        self.cache_entries().1
    }
}

impl Core {
    /// Every cached simulator or log as (last use, tree, node, cost), and the total with the
    /// structures of loaded trees.
    fn cache_entries(&self) -> (Vec<(u64, u64, NodeId, usize)>, usize) {
        let mut entries = Vec::new();
        let mut total = 0usize;
        for t in self.trees.open_handles() {
            let Ok(tree) = t.tree.try_lock() else {
                continue;
            };
            total += tree.structure_cost();
            for (id, cost, used) in tree.cached() {
                total += cost;
                entries.push((used, t.id, id, cost));
            }
        }
        (entries, total)
    }
}

impl Upkeep<'_> {
    /// Keeps the live simulators and logs under the cache budget (see the module doc); returns
    /// the bytes freed.
    pub fn trim_cache(&self) -> usize {
        let loaded = self.pressure.reset();
        let budget = self.limits.cache_bytes;
        if self.store.is_none() || budget == 0 {
            return 0;
        }
        let (mut entries, total) = self.cache_entries();
        if total <= budget {
            // Rebuilds free large buffers (inflated chunks, state JSON) the allocator keeps.
            if loaded > 0 {
                release_freed_memory();
            }
            return 0;
        }
        entries.sort_unstable();
        let mut freed = 0;
        // Down to three quarters, so that reads between two trims have room.
        let target = budget - budget / 4;
        let mut touched = std::collections::BTreeSet::new();
        for (_, tree, node, cost) in entries {
            if total.saturating_sub(freed) <= target {
                break;
            }
            if let Some(t) = self.trees.open(tree)
                && let Ok(mut locked) = t.tree.try_lock()
                && locked.evict(node) > 0
            {
                freed += cost;
                touched.insert(tree);
            }
        }
        for tree in touched {
            if let Some(t) = self.trees.open(tree)
                && let Ok(locked) = t.tree.try_lock()
            {
                locked.prune_chunks();
            }
        }
        if total.saturating_sub(freed) > budget {
            freed += self.close_idle_trees(total.saturating_sub(freed) - target);
        }
        if freed > 0 {
            release_freed_memory();
        }
        freed
    }
}

impl Core {
    /// Closes the least recently active trees that nobody holds and that have no run in flight.
    fn close_idle_trees(&self, mut need: usize) -> usize {
        let mut idle: Vec<(u64, u64)> = self
            .trees
            .open_handles()
            .iter()
            .filter(|t| lock(&t.runs).is_empty())
            .map(|t| (lock(&t.meta).last_activity, t.id))
            .collect();
        idle.sort_unstable();
        let mut freed = 0;
        for (_, id) in idle {
            if need == 0 {
                break;
            }
            // Closed in one step: a request for the tree finds it open or stored, never missing.
            if let Some(handle) = self.trees.close_if(id, |t| lock(&t.runs).is_empty()) {
                let cost = {
                    let t = handle.lock();
                    t.structure_cost() + t.cached().iter().map(|c| c.1).sum::<usize>()
                };
                freed += cost;
                need = need.saturating_sub(cost);
            }
        }
        freed
    }
}
