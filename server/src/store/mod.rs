//! Durable trees: what the workbench writes, when, and how a node comes back.
//!
//! One [`Database`] trait, two backends behind the same SQL ([`sql::Db`]): SQLite in the data
//! folder (the default) and PostgreSQL (`--database-url`). The database is driven by one thread
//! of its own ([`Store`]): writes are queued without waiting and committed in batches (in order,
//! one transaction; queued writes linger up to 5 ms to share it); reads and flushes wait for the
//! writes before them. The workbench flushes where durability is promised — a created tree, an
//! attached node, a run's final state before `run_finish`, a deletion — and lets log entries flow
//! in batches. With SQLite a flush is one append to the commit journal ([`journal`]); the writes
//! reach the database with the next group commit.
//!
//! What is stored, per node: its record (parent, edge type, ops, status, error, times, recorded
//! LLM calls), its own log entries (in rows of consecutive entries), and its final state in the
//! store form of [`crate::chunks`]: tails and chunk keys, with the chunks its run froze as rows of
//! its own. A chain of N nodes therefore stores O(N) bytes, and any node is rebuilt from its state
//! row plus the chunk rows of its root path. States and chunks are packed with LZ4. Agent-based
//! models' worker snapshots (pickles) are not stored: a model is rebuilt in the worker from its
//! specification, seed and recorded history, exactly as an imported one is (unpickling is code
//! execution; the history is plain data).

pub mod check;
pub mod jobs;
mod journal;
pub mod lease;
pub mod load;
mod packed;
mod postgres;
mod source;
mod sql;
mod sqlite;
mod thread;
mod vocab;

use std::path::Path;
use std::sync::{Arc, mpsc};

use simtree_shared::{EdgeType, NodeStatus, Op, SimKind};

use crate::chunks::ChunkKey;
use crate::llm::record::LlmRecord;
use journal::Journal;

use packed::unpack;
pub(crate) use source::encode_state;
pub use source::{EncodedState, Pressure, TreeSource};
pub(crate) use sql::index_text;
#[cfg(test)]
use thread::{Committer, push_merged};
use thread::{Gone, run};

/// Why the store could not do something, by cause. The text of every kind reads "store: …";
/// callers decide by the kind ([`StoreError::is_transient`]), never by the text.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The disk or the database has no room left. Not now: it passes once space is back.
    #[error("store: {0}")]
    Full(String),
    /// An I/O fault, a lost or refused connection, a lock held elsewhere, memory short. Not now.
    #[error("store: {0}")]
    Io(String),
    /// The database refused what it was asked (a constraint, a type, a statement it does not
    /// know, a schema newer than this simtree): asking again gives the same answer.
    #[error("store: {0}")]
    Db(String),
    /// Stored bytes that do not read back: a checksum, a record, a column, a packed block.
    #[error("store: {0}")]
    Corrupt(String),
    /// Another process holds the server lease of the database: this one may not write.
    #[error("store: {0}")]
    LeaseLost(String),
    /// Another process uses the data folder.
    #[error("store: {0}")]
    InUse(String),
    /// The store's thread has ended (the store is closing or closed).
    #[error("store: the store thread ended")]
    Closed,
}

impl StoreError {
    /// Whether asking again later may succeed (a full disk, an I/O or connection fault, a
    /// closing store), as against a refusal or damage that asking again only repeats.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, StoreError::Full(_) | StoreError::Io(_) | StoreError::Closed)
    }

    /// Whether the fault may pass by itself within seconds: a lost connection or an I/O error
    /// (a database restarting), which a run's store work waits out. A full disk waits for
    /// someone to free space, and a closed store does not come back: neither is waited for.
    pub(crate) fn may_pass_soon(&self) -> bool {
        matches!(self, StoreError::Io(_))
    }

    /// The message without the "store: " prefix.
    pub fn message(&self) -> &str {
        match self {
            StoreError::Full(m)
            | StoreError::Io(m)
            | StoreError::Db(m)
            | StoreError::Corrupt(m)
            | StoreError::LeaseLost(m)
            | StoreError::InUse(m) => m,
            StoreError::Closed => "the store thread ended",
        }
    }

    /// The same kind of error, its message put in context (`what` and then the message).
    pub(crate) fn context(self, what: impl std::fmt::Display) -> StoreError {
        let m = format!("{what}: {}", self.message());
        match self {
            StoreError::Full(_) => StoreError::Full(m),
            StoreError::Io(_) | StoreError::Closed => StoreError::Io(m),
            StoreError::Db(_) => StoreError::Db(m),
            StoreError::Corrupt(_) => StoreError::Corrupt(m),
            StoreError::LeaseLost(_) => StoreError::LeaseLost(m),
            StoreError::InUse(_) => StoreError::InUse(m),
        }
    }

    /// An I/O error by its cause: no space (or quota) is [`StoreError::Full`], the rest
    /// [`StoreError::Io`].
    pub(crate) fn from_io(message: String, e: &std::io::Error) -> StoreError {
        if matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
            || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        {
            StoreError::Full(message)
        } else {
            StoreError::Io(message)
        }
    }
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

/// Why one stored row cannot be given back: what is damaged in it (the text is shown after the
/// tree and node it belongs to).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    #[error("log row at entry {entry} fails its checksum")]
    LogChecksum { entry: u64 },
    /// A log row written before checksums with an entry that is not JSON.
    #[error("log entry {entry} is not JSON")]
    LogNotJson { entry: u64 },
    #[error("its record fails its checksum")]
    RecordChecksum,
    /// A column of a node record that does not parse (`what`), and why.
    #[error("its record's {what} cannot be read: {why}")]
    RecordColumn { what: &'static str, why: String },
}

/// A tree's row: its metadata and the next node id (ids are never reused, across restarts too).
#[derive(Debug, Clone, PartialEq)]
pub struct TreeRow {
    pub id: u64,
    pub(crate) name: String,
    pub(crate) scenario: String,
    pub(crate) kind: SimKind,
    /// Unix milliseconds.
    pub(crate) created: u64,
    pub(crate) last_activity: u64,
    pub(crate) seq: u64,
    pub(crate) nodes: u64,
    pub(crate) budget: Option<u64>,
    /// Written by [`Write::Describe`] only ([`Write::Tree`] leaves it as it is).
    pub(crate) description: Option<String>,
}

/// A node's record.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub id: u64,
    pub(crate) parent: Option<u64>,
    pub(crate) depth: u32,
    pub(crate) edge_type: EdgeType,
    pub(crate) ops: Vec<Op>,
    pub status: NodeStatus,
    pub(crate) error: Option<String>,
    /// Unix milliseconds: attached, and when its run ended.
    pub(crate) created: u64,
    pub(crate) finished: Option<u64>,
    /// Turns the node's simulator has run (summaries need no simulator).
    pub(crate) turns: u64,
    pub(crate) records: Vec<LlmRecord>,
}

/// A tree's node records as read: the intact ones, and the ids of those that are damaged (a
/// checksum that does not match, a column that does not parse) with what is wrong.
#[derive(Debug, Default)]
pub struct NodeRows {
    pub rows: Vec<NodeRow>,
    damaged: Vec<(u64, RowError)>,
}

impl NodeRows {
    /// The records of tree `tree` when every one is intact; else the damage of the first, naming
    /// the tree, the node and `location` (the store's file). Never a wrong node: a tree whose
    /// structure cannot be trusted is not loaded.
    pub(crate) fn intact(self, tree: u64, location: &str) -> Result<Vec<NodeRow>, SourceError> {
        match self.damaged.first() {
            None => Ok(self.rows),
            Some((node, why)) => Err(SourceError::Damaged(format!(
                "tree {tree}, node {node}: {why} in {location}: the record is damaged{more}; run `simtree data check`",
                more = match self.damaged.len() {
                    1 => String::new(),
                    n => format!(" (and {} other node record(s))", n - 1),
                }
            ))),
        }
    }
}

/// A stored row of a node's log: consecutive entries from entry `index` on, one per line, and
/// the CRC-32 of the text (`None` in rows written before checksums: format 0).
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    pub(crate) index: u64,
    pub entries: String,
    crc: Option<u32>,
}

impl LogRow {
    /// The row's entries, or what is wrong with it: a checksum that does not match, or (rows
    /// without one) an entry that is not JSON.
    pub(crate) fn verified(&self) -> Result<impl Iterator<Item = &str>, RowError> {
        match self.crc {
            Some(crc) if crc32fast::hash(self.entries.as_bytes()) != crc => {
                return Err(RowError::LogChecksum { entry: self.index });
            }
            Some(_) => {}
            None => {
                for (k, e) in self.entries.split('\n').filter(|e| !e.is_empty()).enumerate() {
                    if serde_json::from_str::<serde::de::IgnoredAny>(e).is_err() {
                        return Err(RowError::LogNotJson { entry: self.index + k as u64 });
                    }
                }
            }
        }
        Ok(self.entries.split('\n').filter(|e| !e.is_empty()))
    }
}

/// Why a node could not be given back: the store failed, or what it holds is damaged.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum SourceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Names the tree, the node, the file and what is wrong.
    #[error("{0}")]
    Damaged(String),
}

/// One change; a batch of them is one transaction.
#[derive(Debug)]
pub enum Write {
    Tree(TreeRow),
    Rename {
        tree: u64,
        name: String,
    },
    Touch {
        tree: u64,
        last_activity: u64,
        seq: u64,
        nodes: u64,
    },
    /// Inserts a node's record, or updates its status, error, end time and records.
    Node {
        tree: u64,
        row: NodeRow,
    },
    /// Consecutive log entries of a node from entry `index` on, one per line.
    Log {
        tree: u64,
        node: u64,
        index: u64,
        count: u64,
        entries: String,
    },
    /// A node's state (deflated store form) and the chunks it wrote first (deflated).
    State {
        tree: u64,
        node: u64,
        data: Vec<u8>,
        chunks: Vec<(ChunkKey, Vec<u8>)>,
    },
    DeleteNodes {
        tree: u64,
        nodes: Vec<u64>,
    },
    /// Inserts or replaces a sweep of a tree (its layout and results as JSON).
    Sweep {
        tree: u64,
        id: u64,
        body: String,
    },
    DeleteSweep {
        tree: u64,
        id: u64,
    },
    /// Inserts or replaces an exploration of a tree (its candidates and results as JSON).
    Explore {
        tree: u64,
        id: u64,
        body: String,
    },
    DeleteExplore {
        tree: u64,
        id: u64,
    },
    /// A tree's own money cap (`money_budget` of its creation, US dollars), written once with
    /// the tree.
    TreeMoney {
        tree: u64,
        money: f64,
    },
    DeleteTree {
        tree: u64,
    },
    /// An import of tree `tree` begins: a marker row (its rows are deleted at the next start-up
    /// unless [`Write::ImportEnd`] follows) and the tree id reserved for good.
    ImportBegin {
        tree: u64,
    },
    /// The import of `tree` is complete (written with its tree row, in the same commit).
    ImportEnd {
        tree: u64,
    },
    /// Records that the journal's groups up to `seq` are in the database (SQLite only; the last
    /// write of a journaled group's transaction).
    Applied {
        seq: u64,
    },
    /// The document a user brought a tree's scenario as (JSON text), written once with the tree.
    Document {
        tree: u64,
        body: String,
    },
    /// Inserts or replaces a market dataset (its checked CSV text).
    Dataset {
        name: String,
        body: String,
    },
    DeleteDataset {
        name: String,
    },
    /// A version of a saved scenario (its document as JSON text; `saved`: Unix milliseconds);
    /// also keeps the scenario's version counter at `version` or above.
    SaveScenario {
        id: String,
        version: u64,
        saved: u64,
        body: String,
    },
    /// Every version of a saved scenario (its version counter stays).
    DeleteScenario {
        id: String,
    },
    /// The saved scenario version a tree was made from, written once with the tree.
    Origin {
        tree: u64,
        scenario: String,
        version: u64,
    },
    /// What a user wrote on a node (an `Annotation` as JSON), or `None` to remove it; its
    /// title, note and tags are indexed for search in the same statement group.
    Annotate {
        tree: u64,
        node: u64,
        body: Option<String>,
    },
    /// A tree's description (`None` removes it).
    Describe {
        tree: u64,
        description: Option<String>,
    },
    /// A question asked of an agent at a node (a `shared::Ask` as JSON); its transcript is
    /// indexed for search with it.
    Ask {
        tree: u64,
        node: u64,
        seq: u64,
        body: String,
    },
    /// A piece of text for search that no log row carries (what agents' memories took in at a
    /// node; an ask's transcript), `ord` telling apart several of one kind.
    Text {
        tree: u64,
        node: u64,
        kind: String,
        ord: u64,
        body: String,
    },
    /// Queues the run of `node` as a job any process sharing the database can take (see
    /// [`jobs`]; PostgreSQL with `serve --jobs` only, so never journaled).
    Job {
        tree: u64,
        node: u64,
        kind: String,
        payload: String,
        max_attempts: u64,
    },
}

impl Write {
    /// A node's whole own log as one row (`None` when it has no entries).
    pub(crate) fn whole_log(tree: u64, node: u64, entries: &[String]) -> Option<Write> {
        (!entries.is_empty()).then(|| Write::Log {
            tree,
            node,
            index: 0,
            count: entries.len() as u64,
            entries: entries.join("\n"),
        })
    }
}

/// A stored version of a saved scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRow {
    pub(crate) id: String,
    pub(crate) version: u64,
    /// Unix milliseconds.
    saved: u64,
    pub(crate) body: String,
}

/// What a backend does; called only from the store's thread.
pub trait Database: Send {
    fn apply(&mut self, writes: &[Write]) -> StoreResult<()>;
    fn trees(&mut self) -> StoreResult<Vec<TreeRow>>;
    fn nodes(&mut self, tree: u64) -> StoreResult<NodeRows>;
    fn state(&mut self, tree: u64, node: u64) -> StoreResult<Option<Vec<u8>>>;
    /// Every chunk written by one of `nodes`.
    fn chunks(&mut self, tree: u64, nodes: &[u64]) -> StoreResult<Vec<(ChunkKey, Vec<u8>)>>;
    /// A node's log rows, in order (each holds one or more entries, one per line).
    fn log(&mut self, tree: u64, node: u64) -> StoreResult<Vec<LogRow>>;
    /// The log rows that may hold entry `from` or later: the row holding `from` (the last one
    /// starting at or before it) and every row after it. A relay that already has `from`
    /// entries reads only what is new, not the whole log again.
    fn log_from(&mut self, tree: u64, node: u64, from: u64) -> StoreResult<Vec<LogRow>> {
        let rows = self.log(tree, node)?;
        let start = rows.iter().rposition(|r| r.index <= from).unwrap_or(0);
        Ok(rows.into_iter().skip(start).collect())
    }
    /// A tree's sweeps (JSON bodies), in id order.
    fn sweeps(&mut self, tree: u64) -> StoreResult<Vec<String>>;
    /// A tree's explorations (JSON bodies), in id order.
    fn explores(&mut self, _tree: u64) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }
    /// The trees with an exploration stored as running or a sweep with a replicate stored as
    /// pending (their server stopped or died while they ran), in id order.
    fn trees_with_jobs_left(&mut self) -> StoreResult<Vec<u64>> {
        Ok(Vec::new())
    }
    /// A tree's own money cap, if it was made with one.
    fn tree_money(&mut self, _tree: u64) -> StoreResult<Option<f64>> {
        Ok(None)
    }
    /// Marks nodes whose run was in flight when the last server stopped, but those in `keep`
    /// (`(tree, node)`: runs whose jobs other processes still run, adopted by this server);
    /// returns how many were marked.
    fn interrupt_running(&mut self, keep: &[(u64, u64)]) -> StoreResult<u64>;
    /// Checks that the database takes writes again (after a failed commit, with nothing
    /// queued to retry): SQLite writes a scratch file beside the database (a full disk refuses
    /// it) and a row; PostgreSQL answers a query.
    fn probe(&mut self) -> StoreResult<()> {
        Ok(())
    }
    /// A cheap check that the database answers (PostgreSQL: `SELECT 1`, reconnecting if the
    /// connection was lost); SQLite always does.
    fn ping(&mut self) -> StoreResult<()> {
        Ok(())
    }
    /// The next tree id to hand out: never one a tree had, listed, deleted or half-imported.
    fn next_tree(&mut self) -> StoreResult<u64>;
    /// Takes the next tree id from the stored counter, atomically and durably: processes
    /// sharing the database never get the same one (PostgreSQL; a SQLite folder has one
    /// process, which counts in memory from [`Self::next_tree`]).
    fn take_tree_id(&mut self) -> StoreResult<u64> {
        Err(StoreError::Db("this store does not hand out tree ids".into()))
    }
    /// Renews the server lease, if this store holds one (see `store/lease.rs`); finding it lost
    /// is not an error here but [`Self::lease_lost`] from then on.
    fn heartbeat(&mut self) -> StoreResult<()> {
        Ok(())
    }
    /// Why writes are refused for good: the server lease was lost.
    fn lease_lost(&self) -> Option<String> {
        None
    }
    /// Gives the server lease up (the store is closing).
    fn release_lease(&mut self) {}
    /// Who holds the server lease now, and where it serves (PostgreSQL; see `store/lease.rs`).
    fn lease_holder(&mut self) -> StoreResult<Option<lease::Holder>> {
        Ok(None)
    }
    /// Deletes the rows of imports that never completed (the server stopped mid-import), in
    /// one transaction; returns each such tree with the number of node rows it had.
    fn abandoned_imports(&mut self) -> StoreResult<Vec<(u64, u64)>>;
    /// The document a tree was made from, if a user brought one.
    fn document(&mut self, _tree: u64) -> StoreResult<Option<String>> {
        Ok(None)
    }
    /// The names of the uploaded market datasets, in order.
    fn dataset_names(&mut self) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }
    /// One uploaded dataset's CSV text.
    fn dataset(&mut self, _name: &str) -> StoreResult<Option<String>> {
        Ok(None)
    }
    /// Every version of every saved scenario, by id and version.
    fn scenarios(&mut self) -> StoreResult<Vec<ScenarioRow>> {
        Ok(Vec::new())
    }
    /// The highest version each saved scenario (deleted ones included) was given.
    fn scenario_counters(&mut self) -> StoreResult<Vec<(String, u64)>> {
        Ok(Vec::new())
    }
    /// One version's document.
    fn scenario_body(&mut self, _id: &str, _version: u64) -> StoreResult<Option<String>> {
        Ok(None)
    }
    /// The saved scenario version a tree was made from.
    fn origin(&mut self, _tree: u64) -> StoreResult<Option<(String, u64)>> {
        Ok(None)
    }
    /// A tree's annotations: each annotated node and its annotation (JSON).
    fn annotations(&mut self, _tree: u64) -> StoreResult<Vec<(u64, String)>> {
        Ok(Vec::new())
    }
    /// A tree's asks: each node with an ask (JSON), by node then order.
    fn asks(&mut self, _tree: u64) -> StoreResult<Vec<(u64, String)>> {
        Ok(Vec::new())
    }
    /// The texts matching `phrase` (the user's words; the driver quotes them) in `tree` (or
    /// every tree), best first, at most `limit`.
    fn search(&mut self, _phrase: &str, _tree: Option<u64>, _limit: u64) -> StoreResult<Vec<TextMatch>> {
        Ok(Vec::new())
    }
    /// Sends `payload` to the processes listening on `channel` (PostgreSQL's NOTIFY, after the
    /// writes queued before it are committed; nothing elsewhere).
    fn notify(&mut self, _channel: &str, _payload: &str) -> StoreResult<()> {
        Ok(())
    }
    /// One node's record, if it has one and it is intact.
    fn node(&mut self, tree: u64, node: u64) -> StoreResult<Option<NodeRow>> {
        Ok(self.nodes(tree)?.rows.into_iter().find(|r| r.id == node))
    }
    /// The bodies of the texts `ids` (for excerpts), by id.
    fn texts(&mut self, _ids: &[u64]) -> StoreResult<Vec<(u64, String)>> {
        Ok(Vec::new())
    }
}

/// A text found by [`Database::search`].
#[derive(Debug, Clone, PartialEq)]
pub struct TextMatch {
    pub(crate) id: u64,
    pub(crate) tree: u64,
    pub(crate) node: u64,
    pub(crate) kind: String,
    /// Higher is better (the database's rank, in millionths).
    pub(crate) score: i64,
}

type Job = Box<dyn FnOnce(&mut dyn Database) + Send>;

/// Told how the commit holding the writes before a flush went.
type Ack = Box<dyn FnOnce(StoreResult<()>) + Send>;

enum Msg {
    Write(Write),
    /// The writes queued before it are in the journal as group `n` (or an earlier one).
    Mark(u64),
    /// Answered once every write queued before it is committed (or failed).
    Flush(Ack),
    /// Writes committed at once with everything queued before them, or dropped when that
    /// commit fails (see [`Store::commit_or_nothing`]).
    Attempt(Vec<Write>, Ack),
    Read(Job),
}

/// The handle to the store's thread. Cheap to share (`Arc`).
pub struct Store {
    mailbox: Arc<Mailbox>,
    /// The store's thread, joined on drop: once a `Store` is gone its writes are committed and
    /// its database closed (a SQLite folder can be copied or reopened at once).
    thread: Option<std::thread::JoinHandle<()>>,
    /// SQLite's commit journal, written from the callers' threads.
    front: Option<Arc<Front>>,
    /// `sqlite:<file>` or `postgresql` (the URL is not repeated: it may hold a password).
    pub(crate) location: String,
    /// Tree ids are taken from the database ([`Store::take_tree_id`]): PostgreSQL, which other
    /// processes may share. A SQLite folder has one process, which counts in memory.
    ids_from_database: bool,
}

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The journal side of a SQLite store. Writes are encoded into the journal's gathered group as
/// they are queued (under its lock, so the journal and the queue have one order); a flush appends
/// the group and queues its mark. The store thread reports what the database has.
struct Front {
    journal: Mutex<Journal>,
    /// The last journal group the database has.
    applied: AtomicU64,
    /// False while acknowledged writes failed to reach the database: flushes then wait for a
    /// commit (and hear how it went), and the journal is not emptied.
    healthy: AtomicBool,
}

impl Front {
    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends the gathered group and queues its mark (under the journal's lock).
    fn seal(&self, j: &mut Journal, mailbox: &Mailbox) -> StoreResult<()> {
        if let Some(seq) = j.seal(self.applied.load(Ordering::Acquire))? {
            mailbox.post(Msg::Mark(seq))?;
        }
        Ok(())
    }

    fn write(&self, mailbox: &Mailbox, w: Write) -> StoreResult<()> {
        let mut j = self.journal();
        j.stage(&w);
        mailbox.post(Msg::Write(w))?;
        if j.staged_bytes() >= journal::SEAL_BYTES
            && let Err(e) = self.seal(&mut j, mailbox)
        {
            tracing::warn!(error = %e, "journal");
        }
        Ok(())
    }

    /// Queues a roll-back's deletion and appends it to the journal at once, alone, into the room
    /// the journal keeps if need be (see [`Journal::seal_alone`]).
    fn write_removal(&self, mailbox: &Mailbox, w: Write) -> StoreResult<()> {
        let mut j = self.journal();
        let sealed = j.seal_alone(&w, self.applied.load(Ordering::Acquire));
        mailbox.post(Msg::Write(w))?;
        match sealed {
            Ok(Some(seq)) => mailbox.post(Msg::Mark(seq))?,
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "a deletion could not be journaled: it is durable once committed"),
        }
        Ok(())
    }

    /// Queues an attempt (see [`Store::commit_or_nothing`]) after sealing what was gathered, so
    /// that the journal's groups and the attempt keep the queue's order: every group sealed
    /// before it is marked before it, and everything gathered after it is replayed after it.
    /// A seal that fails leaves the journal marked unjournaled: the flushes that follow wait for
    /// a commit.
    fn attempt(&self, mailbox: &Mailbox, writes: Vec<Write>, ack: Ack) -> StoreResult<()> {
        let mut j = self.journal();
        if let Err(e) = self.seal(&mut j, mailbox) {
            tracing::debug!(error = %e, "journal append failed; the attempt commits it");
        }
        mailbox.post(Msg::Attempt(writes, ack))
    }

    /// Makes every write queued so far durable through the journal; false when only a database
    /// commit can (the caller then flushes through the store thread).
    fn flush(&self, mailbox: &Mailbox) -> bool {
        let mut j = self.journal();
        if !self.healthy.load(Ordering::Acquire) || j.unjournaled() {
            // The commit the caller waits for covers what was gathered.
            j.discard();
            return false;
        }
        match self.seal(&mut j, mailbox) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "journal append failed; committing instead");
                j.discard();
                false
            }
        }
    }
}

impl Store {
    /// Opens (creating if needed) `dir/simtree.db`.
    pub fn open_sqlite(dir: &Path) -> StoreResult<Store> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::from_io(format!("cannot create the data folder {}: {e}", dir.display()), &e))?;
        let file = dir.join("simtree.db");
        refuse_emptied(dir, &file)?;
        let mut db = sql::Db::new(sqlite::Sqlite::open(&file)?);
        db.migrate()?;
        let (journal, applied) = replay(&mut db, dir)?;
        let front = Arc::new(Front {
            journal: Mutex::new(journal),
            applied: AtomicU64::new(applied),
            healthy: AtomicBool::new(true),
        });
        Store::start(Box::new(db), format!("sqlite:{}", file.display()), front)
    }

    /// Opens a PostgreSQL database and takes its server lease of the default length.
    pub fn open_postgres(url: &str) -> StoreResult<Store> {
        Store::open_postgres_with(url, Some(lease::DEFAULT_LEASE))
    }

    /// Opens a PostgreSQL database; with `lease`, takes the server lease for that long (refused
    /// while another process holds it), renews it from the store thread and releases it on close.
    /// Without one, nothing guards the database against a second writer: only for what takes ids
    /// or reads (tests, tools).
    pub fn open_postgres_with(url: &str, lease: Option<std::time::Duration>) -> StoreResult<Store> {
        match Store::lead_postgres(url, lease.map(lease::Lease::this_process))? {
            Ok(store) => Ok(store),
            Err(other) => Err(lease::refusal(&other)),
        }
    }

    /// Opens a PostgreSQL database; with `lease`, takes that server lease (renewed from the store
    /// thread, released on close) — or, while another process holds it, answers who does
    /// (`serve` then follows that server: `http/fleet.rs`).
    pub(crate) fn lead_postgres(url: &str, lease: Option<lease::Lease>) -> StoreResult<Result<Store, lease::Holder>> {
        let url = url.to_string();
        // The client is created on the store's thread: it must never run inside the server's runtime.
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("simtree-store".into())
            .spawn(move || {
                let opened = postgres::Postgres::connect(&url).and_then(|sql| {
                    let mut db = sql::Db::new(sql);
                    db.migrate()?;
                    if let Some(me) = lease
                        && let Err(other) = db.take_lease(me)?
                    {
                        return Ok(Err(other));
                    }
                    Ok(Ok(db))
                });
                match opened {
                    Ok(Ok(mut db)) => {
                        let mailbox = Arc::new(Mailbox::default());
                        let _ = tx.send(Ok(Ok(mailbox.clone())));
                        let lease = db.lease.as_ref().map(|l| l.length);
                        if let Some(length) = lease {
                            let m = Arc::downgrade(&mailbox);
                            let _ =
                                std::thread::Builder::new().name("simtree-tick".into()).spawn(move || tick(m, length));
                        }
                        run(&mut db, &mailbox, None, lease);
                    }
                    Ok(Err(other)) => {
                        let _ = tx.send(Ok(Err(other)));
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| StoreError::Io(format!("cannot start the store's thread: {e}")))?;
        let mailbox = match rx.recv().map_err(|_| StoreError::Closed)?? {
            Ok(mailbox) => mailbox,
            Err(other) => {
                let _ = thread.join();
                return Ok(Err(other));
            }
        };
        Ok(Ok(Store {
            mailbox,
            thread: Some(thread),
            front: None,
            location: "postgresql".into(),
            ids_from_database: true,
        }))
    }

    fn start<D: Database + 'static>(mut db: Box<D>, location: String, front: Arc<Front>) -> StoreResult<Store> {
        let mailbox = Arc::new(Mailbox::default());
        let theirs = mailbox.clone();
        let theirs_front = front.clone();
        let thread = std::thread::Builder::new()
            .name("simtree-store".into())
            .spawn(move || run(&mut *db, &theirs, Some(theirs_front), None))
            .map_err(|e| StoreError::Io(format!("cannot start the store's thread: {e}")))?;
        Ok(Store { mailbox, thread: Some(thread), front: Some(front), location, ids_from_database: false })
    }

    fn send(&self, msg: Msg) -> StoreResult<()> {
        self.mailbox.post(msg)
    }

    /// Queues a write (committed with the next batch).
    pub fn write(&self, w: Write) {
        let posted = match &self.front {
            Some(front) => front.write(&self.mailbox, w),
            None => self.send(Msg::Write(w)),
        };
        if posted.is_err() {
            tracing::error!("store thread gone: a write was lost");
        }
    }

    /// Queues the deletion of `nodes` of `tree`, taken back out of the tree because their writes
    /// failed (a run's end, a branch). With SQLite it is journaled at once, even while commits
    /// fail, so that no restart brings back rows of them that reached the database before.
    pub(crate) fn write_removal(&self, tree: u64, nodes: Vec<u64>) {
        let w = Write::DeleteNodes { tree, nodes };
        let posted = match &self.front {
            Some(front) => front.write_removal(&self.mailbox, w),
            None => self.send(Msg::Write(w)),
        };
        if posted.is_err() {
            tracing::error!("store thread gone: a write was lost");
        }
    }

    /// The journal's flush, when it can make everything queued durable by itself.
    fn journaled(&self) -> bool {
        self.front.as_ref().is_some_and(|f| f.flush(&self.mailbox))
    }

    /// Waits until every write queued so far is durable: in the journal (SQLite), else
    /// committed.
    pub fn flush(&self) -> StoreResult<()> {
        if self.journaled() {
            return Ok(());
        }
        let (tx, rx) = mpsc::channel();
        self.send(Msg::Flush(Box::new(move |r| {
            let _ = tx.send(r);
        })))?;
        blocking(|| rx.recv().map_err(|_| StoreError::Closed)?)
    }

    /// Commits `writes` at once, in one transaction with every write queued before them, and
    /// answers how it went. When that commit fails they are dropped (the earlier writes are kept
    /// and retried as always) and the error is returned: for changes a caller makes in memory
    /// only once they are stored (a deletion, a rename, an annotation), so that a refusal leaves
    /// nothing changed, neither in memory nor, later, in the store. Not journaled: durable once
    /// committed.
    pub(crate) fn commit_or_nothing(&self, writes: Vec<Write>) -> StoreResult<()> {
        let (tx, rx) = mpsc::channel();
        let ack: Ack = Box::new(move |r| {
            let _ = tx.send(r);
        });
        match &self.front {
            Some(front) => front.attempt(&self.mailbox, writes, ack)?,
            None => self.send(Msg::Attempt(writes, ack))?,
        }
        blocking(|| rx.recv().map_err(|_| StoreError::Closed)?)
    }

    /// [`Self::flush`] without blocking a runtime thread.
    pub(crate) async fn flush_async(&self) -> StoreResult<()> {
        if self.journaled() {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Msg::Flush(Box::new(move |r| {
            let _ = tx.send(r);
        })))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Why the store cannot take writes now (its last commit failed: a full disk, a lost
    /// database), or `None`. The store thread retries every second, so this clears by itself
    /// once the cause is gone.
    /// A lost server lease is reported here too, for good.
    pub(crate) fn fault(&self) -> Option<String> {
        self.lease_lost().or_else(|| self.mailbox.fault.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Why a leading server must not answer now, or `None`: its lease is lost, or was last
    /// renewed longer ago than it lasts — the process was frozen (SIGSTOP, a paused VM) and
    /// continued, so another server may lead already — until a renewal succeeds again.
    pub(crate) fn lease_doubt(&self) -> Option<String> {
        if let Some(lost) = self.lease_lost() {
            return Some(lost);
        }
        let (_, length) = (*self.mailbox.renewed.lock().unwrap_or_else(|p| p.into_inner()))?;
        // Frozen now (the ticker has not run since), or seen frozen since the last renewal.
        let tick = *self.mailbox.tick.lock().unwrap_or_else(|p| p.into_inner());
        let now = tick.is_some_and(|t| t.elapsed() > frozen_after(length));
        let seen = self.mailbox.frozen.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        (now || seen).then(|| {
            format!(
                "this server was paused longer than its lease on the database lasts ({} s): another server may \
                 lead it now; it answers again once it has renewed its lease",
                length.as_secs()
            )
        })
    }

    /// Why writes are refused for good: the server lease was lost to another process.
    pub(crate) fn lease_lost(&self) -> Option<String> {
        self.mailbox.lease_lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A new tree id, or `None` when the caller counts them itself (a SQLite folder, whose one
    /// process counts in memory from [`Database::next_tree`]). With PostgreSQL the id is taken
    /// from the database's counter in one statement, so no two processes get the same one.
    pub fn take_tree_id(&self) -> StoreResult<Option<u64>> {
        if !self.ids_from_database {
            return Ok(None);
        }
        self.read(|db| db.take_tree_id()).map(Some)
    }

    /// Runs `f` on the database after every write queued so far, and waits for its answer.
    pub fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Database) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<R> {
        let (tx, rx) = mpsc::channel();
        self.send(Msg::Read(Box::new(move |db| {
            let _ = tx.send(f(db));
        })))?;
        blocking(|| rx.recv().map_err(|_| StoreError::Closed)?)
    }
}

/// A database file of zero bytes in a folder that was used before (its journal is there) lost
/// everything: SQLite would start an empty store in it (and hand out its tree ids again).
fn refuse_emptied(dir: &Path, file: &Path) -> StoreResult<()> {
    let empty = std::fs::metadata(file).is_ok_and(|m| m.len() == 0);
    if empty && dir.join("simtree.journal").exists() {
        return Err(StoreError::Corrupt(format!(
            "the database {} is empty (0 bytes) but this data folder was in use: it was damaged or truncated. \
             Restore it from a backup, or run `simtree data check --data {}`; remove the folder's files to start an empty store",
            file.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Runs blocking work (a wait on the store, a first start of the ABM worker) from any thread:
/// inside the multi-thread runtime the worker hands its other tasks over first.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The store thread's queue. Unlike a channel it does not wake the thread for a write while the
/// thread lingers for a group commit (it wakes at its deadline, or for a flush or a read), so a
/// run costs the store thread two wake-ups — its node attached, its end flushed — instead of one
/// per write; on a busy machine each wake-up is a context switch that can wait for a core.
#[derive(Default)]
struct Mailbox {
    inbox: Mutex<Inbox>,
    ready: std::sync::Condvar,
    /// Why the last commit failed, until one succeeds (`/ready` reports it).
    fault: Mutex<Option<String>>,
    /// Why writes are refused for good: the server lease was lost.
    lease_lost: Mutex<Option<String>>,
    /// When the server lease was last renewed, and how long it lasts (with a lease).
    renewed: Mutex<Option<(std::time::Instant, std::time::Duration)>>,
    /// With a lease: the last tick of the thread that notes the process runs, and when a gap
    /// longer than [`frozen_after`] between two ticks was seen (cleared by a later renewal).
    tick: Mutex<Option<std::time::Instant>>,
    frozen: Mutex<Option<std::time::Instant>>,
}

/// A pause of the whole process longer than this (or than the lease) may have cost it the lease.
fn frozen_after(length: std::time::Duration) -> std::time::Duration {
    length.max(std::time::Duration::from_secs(3))
}

/// Notes every 100 ms that the process runs (see `Mailbox::tick`), until the store ends. A
/// frozen process (SIGSTOP, a paused VM) leaves a gap; a busy store thread does not.
fn tick(mailbox: std::sync::Weak<Mailbox>, length: std::time::Duration) {
    loop {
        let Some(m) = mailbox.upgrade() else { return };
        if m.lock().ended {
            return;
        }
        let now = std::time::Instant::now();
        let mut last = m.tick.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|l| now - l > frozen_after(length)) {
            *m.frozen.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        }
        *last = Some(now);
        drop(last);
        drop(m);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[derive(Default)]
struct Inbox {
    msgs: Vec<Msg>,
    /// The thread waits for a group-commit deadline: writes need not wake it.
    lingering: bool,
    /// The [`Store`] was dropped: commit what is queued and end.
    closed: bool,
    /// The thread ended (it panicked, or the store closed): posts fail.
    ended: bool,
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn post(&self, msg: Msg) -> StoreResult<()> {
        let wake = {
            let mut inbox = self.lock();
            if inbox.ended {
                return Err(StoreError::Closed);
            }
            let wake = !(inbox.lingering && matches!(msg, Msg::Write(_) | Msg::Mark(_)));
            inbox.msgs.push(msg);
            wake
        };
        if wake {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Waits for messages (or, with a deadline, until it passes); `None` once the store is closed
    /// and everything posted was taken.
    fn take(&self, deadline: Option<std::time::Instant>) -> Option<Vec<Msg>> {
        let mut inbox = self.lock();
        loop {
            if !inbox.msgs.is_empty() {
                return Some(std::mem::take(&mut inbox.msgs));
            }
            if inbox.closed {
                return None;
            }
            match deadline.map(|d| d.saturating_duration_since(std::time::Instant::now())) {
                Some(left) if left.is_zero() => return Some(Vec::new()),
                Some(left) => {
                    inbox.lingering = true;
                    inbox = self.ready.wait_timeout(inbox, left).unwrap_or_else(|p| p.into_inner()).0;
                    inbox.lingering = false;
                }
                None => inbox = self.ready.wait(inbox).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

impl Store {
    /// Closes the store now, as dropping it does — what is queued is committed and, with
    /// PostgreSQL, the server lease released — and waits up to `within` for its thread to end.
    /// For a process about to exit while handles to the store may still be alive (connections a
    /// stopping runtime drops late): without it the process could end before the lease is
    /// released. False when the thread did not end in time.
    pub(crate) fn close(&self, within: std::time::Duration) -> bool {
        self.mailbox.lock().closed = true;
        self.mailbox.ready.notify_one();
        let until = std::time::Instant::now() + within;
        while !self.mailbox.lock().ended {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.mailbox.lock().closed = true;
        self.mailbox.ready.notify_one();
        // (Never from the store's own thread: a job there may hold the last handle.)
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = blocking(|| thread.join());
            // Closed with everything committed: the journal holds nothing a restart would need.
            if let Some(front) = &self.front
                && front.healthy.load(Ordering::Acquire)
                && let Err(e) = front.journal().clear()
            {
                tracing::warn!(error = %e, "journal");
            }
        }
    }
}

/// Marks the mailbox ended when the store thread stops, however it stops.
struct Ended<'a>(&'a Mailbox);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let mut inbox = self.0.lock();
        inbox.ended = true;
        // Flushes and reads still queued get their channels dropped: their waiters hear "ended".
        inbox.msgs.clear();
    }
}

/// Applies the groups a journal holds beyond the last one the database recorded (the server
/// stopped between acknowledging them and writing them), then empties it. Returns the journal
/// and the last group the database has.
///
/// A group that does not apply stops start-up with the journal left in place, whatever the
/// cause: nothing acknowledged is ever served around. A fault that passes (a full disk, I/O, a
/// lock) needs only a restart once it has passed; a group the database refuses needs
/// `simtree data repair` (issue #42: a full disk at start-up used to set the journal aside and
/// serve without the acknowledged nodes it held).
fn replay<S: vocab::Sql>(db: &mut sql::Db<S>, dir: &Path) -> StoreResult<(Journal, u64)> {
    let applied = db.journal_applied()?;
    let path = dir.join("simtree.journal");
    let (mut journal, pending) = Journal::open(&path, applied)?;
    let groups = pending.len();
    let applied = apply_groups(db, pending, applied).map_err(|r| r.at_start_up(&path, groups))?;
    if groups > 0 {
        tracing::warn!(groups, "journal: applied the groups the last server acknowledged but had not yet written");
    }
    journal.clear()?;
    for file in journal::AsideFile::list(dir)? {
        if file.why == journal::Aside::Reapplied {
            continue;
        }
        let lacking = file.groups(applied)?.len();
        if lacking > 0 {
            tracing::error!(
                kept = %file.path.display(),
                groups = lacking,
                "journal: a journal set aside holds acknowledged groups the database does not have; \
                 run `simtree data check` and `simtree data repair` with this data folder (with the server stopped)"
            );
        }
    }
    Ok((journal, applied))
}

/// A journaled group the database did not take: its number, the last group before it that
/// it has, and why.
struct Unapplied {
    seq: u64,
    applied: u64,
    error: StoreError,
}

impl Unapplied {
    /// The error that stops start-up, of the same kind as the cause.
    fn at_start_up(self, path: &Path, groups: usize) -> StoreError {
        let folder = path.parent().unwrap_or(path).display();
        let what = format!(
            "journal {}: group {} (of {groups} the last server acknowledged but had not yet written) cannot be applied",
            path.display(),
            self.seq
        );
        let hint = if self.error.is_transient() {
            "; start-up stops and keeps the journal in place, so nothing acknowledged is dropped: \
             free space on the data folder's disk (or clear the fault) and start again"
                .to_string()
        } else {
            format!(
                "; start-up stops so that nothing acknowledged is dropped: run `simtree data check --data {folder}` \
                 to see it, then `simtree data repair --data {folder}`, which applies the groups before it and \
                 sets the journal aside"
            )
        };
        let error = self.error.context(what);
        let message = format!("{}{hint}", error.message());
        match error {
            StoreError::Full(_) => StoreError::Full(message),
            StoreError::Io(_) | StoreError::Closed => StoreError::Io(message),
            _ => StoreError::Db(message),
        }
    }
}

/// Applies journaled groups in order, each in its own transaction that also records its
/// number; returns the last group applied, or the first that did not apply.
fn apply_groups(db: &mut dyn Database, pending: Vec<journal::Group>, mut applied: u64) -> Result<u64, Unapplied> {
    // Writes queued after their node or tree was deleted are dropped, as the store thread drops
    // them (a run stopped by a deletion may queue a few log entries after it).
    let mut gone = Gone::default();
    for (seq, writes) in pending {
        let mut writes: Vec<Write> = writes.into_iter().filter(|w| gone.admit(w)).collect();
        writes.push(Write::Applied { seq });
        if let Err(error) = db.apply(&writes) {
            return Err(Unapplied { seq, applied, error });
        }
        applied = seq;
    }
    Ok(applied)
}

/// Unix milliseconds now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(tree: u64, id: u64, body: &str) -> Write {
        Write::Sweep { tree, id, body: body.into() }
    }

    fn bodies(writes: &[Write]) -> Vec<String> {
        writes
            .iter()
            .map(|w| match w {
                Write::Sweep { tree, id, body } => format!("{tree}/{id}:{body}"),
                Write::DeleteSweep { tree, id } => format!("-{tree}/{id}"),
                _ => "other".into(),
            })
            .collect()
    }

    #[test]
    fn a_queued_sweep_row_is_replaced_by_its_newer_body_but_not_across_a_deletion() {
        let mut w = Vec::new();
        for x in [sweep(1, 0, "a"), sweep(1, 1, "b"), sweep(1, 0, "c")] {
            push_merged(&mut w, x);
        }
        assert_eq!(bodies(&w), ["1/0:c", "1/1:b"]);
        push_merged(&mut w, Write::DeleteSweep { tree: 1, id: 1 });
        push_merged(&mut w, sweep(1, 1, "d"));
        assert_eq!(bodies(&w), ["1/0:c", "1/1:b", "-1/1", "1/1:d"]);
    }

    #[test]
    fn a_queued_node_record_or_touch_is_replaced_by_its_newer_one_but_not_across_a_deletion() {
        let node = |id: u64, status: NodeStatus| Write::Node {
            tree: 1,
            row: NodeRow {
                id,
                parent: Some(0),
                depth: 1,
                edge_type: EdgeType::Advance,
                ops: Vec::new(),
                status,
                error: None,
                created: 1,
                finished: None,
                turns: 0,
                records: Vec::new(),
            },
        };
        let touch = |seq: u64| Write::Touch { tree: 1, last_activity: seq, seq, nodes: seq };
        let seen = |w: &[Write]| -> Vec<String> {
            w.iter()
                .map(|w| match w {
                    Write::Node { row, .. } => format!("n{}:{:?}", row.id, row.status),
                    Write::Touch { seq, .. } => format!("t{seq}"),
                    Write::DeleteNodes { .. } => "del".into(),
                    _ => "other".into(),
                })
                .collect()
        };
        let mut w = Vec::new();
        for x in
            [node(5, NodeStatus::Running), touch(1), node(6, NodeStatus::Running), node(5, NodeStatus::Done), touch(2)]
        {
            push_merged(&mut w, x);
        }
        assert_eq!(seen(&w), ["n5:Done", "t2", "n6:Running"]);
        push_merged(&mut w, Write::DeleteNodes { tree: 1, nodes: vec![6] });
        push_merged(&mut w, node(6, NodeStatus::Done));
        push_merged(&mut w, touch(3));
        assert_eq!(seen(&w), ["n5:Done", "t2", "n6:Running", "del", "n6:Done", "t3"]);
    }
}

#[cfg(test)]
mod journal_tests {
    use super::*;
    use crate::testing::Scratch;

    fn tree_row(id: u64, name: &str) -> TreeRow {
        TreeRow {
            id,
            name: name.into(),
            scenario: "simple_chat".into(),
            kind: SimKind::Social,
            created: 1,
            last_activity: 1,
            seq: 1,
            nodes: 1,
            budget: None,
            description: None,
        }
    }

    fn names(store: &Store) -> Vec<String> {
        store.read(|db| Ok(db.trees()?.into_iter().map(|t| t.name).collect())).unwrap()
    }

    /// A closed data folder `simtree-journal-<name>` holding one flushed tree ("first"): the
    /// folder, its journal's path and the last group the database applied.
    fn one_flushed_tree(name: &str) -> (std::path::PathBuf, std::path::PathBuf, u64) {
        let dir = std::env::temp_dir().join(format!("simtree-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open_sqlite(&dir).unwrap();
        store.write(Write::Tree(tree_row(1, "first")));
        store.flush().unwrap();
        drop(store);
        let applied = sql::Db::new(sqlite::Sqlite::open(&dir.join("simtree.db")).unwrap()).journal_applied().unwrap();
        let path = dir.join("simtree.journal");
        (dir, path, applied)
    }

    /// Two acknowledged groups the database does not have yet (what a server killed between
    /// answering and writing leaves): tree 1 renamed "renamed", a tree 2 "second".
    fn append_two_groups(path: &Path, applied: u64) {
        let (mut j, pending) = Journal::open(path, applied).unwrap();
        assert!(pending.is_empty(), "a closed store leaves nothing to replay");
        j.append(&[Write::Rename { tree: 1, name: "renamed".into() }]).unwrap().unwrap();
        j.append(&[Write::Tree(tree_row(2, "second"))]).unwrap().unwrap();
    }

    #[test]
    fn a_group_acknowledged_but_not_yet_in_the_database_is_applied_at_the_next_start() {
        // What a server killed between answering a flush and writing the group leaves behind:
        // the group in the journal, the database one group behind.
        let (dir, path, applied) = one_flushed_tree("replay");
        assert!(applied >= 1, "the flush went through the journal");
        append_two_groups(&path, applied);
        let store = Store::open_sqlite(&dir).unwrap();
        assert_eq!(names(&store), ["renamed", "second"]);
        drop(store);
        // Applied once: the journal was emptied and the database records the last group.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        let store = Store::open_sqlite(&dir).unwrap();
        assert_eq!(names(&store), ["renamed", "second"]);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue #42, item 1, in the store: a group that cannot be applied now (a full disk) stops
    /// start-up as a transient fault that says the journal is kept; one the database refuses
    /// stops it too, pointing at `data repair`. Neither sets anything aside.
    #[test]
    fn a_group_that_does_not_apply_stops_start_up_by_its_cause() {
        let groups = || vec![(5, vec![Write::Tree(tree_row(1, "a"))]), (6, vec![Write::Tree(tree_row(2, "b"))])];
        let path = Path::new("/data/simtree.journal");
        let mut full = Flaky { fail: true, ..Flaky::default() };
        let u = apply_groups(&mut full, groups(), 4).expect_err("not applied");
        assert_eq!((u.seq, u.applied), (5, 4));
        let e = u.at_start_up(path, 2);
        assert!(matches!(e, StoreError::Full(_)) && e.is_transient(), "{e:?}");
        assert!(
            e.message().contains("group 5 (of 2 the last server acknowledged")
                && e.message().contains("keeps the journal in place")
                && e.message().contains("disk full"),
            "{e}"
        );
        let mut refusing = Flaky { refuse: true, ..Flaky::default() };
        let e = apply_groups(&mut refusing, groups(), 4).err().unwrap().at_start_up(path, 2);
        assert!(!e.is_transient(), "{e:?}");
        assert!(e.message().contains("simtree data repair --data /data"), "{e}");
        let mut fine = Flaky::default();
        assert_eq!(apply_groups(&mut fine, groups(), 4).ok(), Some(6));
    }

    /// What a server before issue #42's fix left behind: a start-up that could not apply the
    /// journal (a full disk) renamed it `simtree.journal.failed-…` and served without its groups.
    /// Start-up now names it, `data check` lists it and `data repair` applies it; once the
    /// database took writes after the file was set aside, repair leaves it to a person.
    #[test]
    fn repair_applies_what_an_earlier_start_up_set_aside() {
        for written_after in [false, true] {
            let (dir, path, applied) = one_flushed_tree(&format!("aside-{written_after}"));
            append_two_groups(&path, applied);
            let aside = dir.join(format!("simtree.journal.failed-{}", now_ms() - 10));
            std::fs::rename(&path, &aside).unwrap();
            let store = Store::open_sqlite(&dir).unwrap();
            assert_eq!(names(&store), ["first"], "the old way: served without the groups");
            if written_after {
                let mut later = tree_row(3, "later");
                later.last_activity = now_ms();
                store.write(Write::Tree(later));
                store.flush().unwrap();
            }
            drop(store);
            let report = check::check(&dir).unwrap();
            assert!(
                report.problems.iter().any(|p| p.contains("acknowledged group(s) the database does not have")),
                "{report:?}"
            );
            let done = check::repair(&dir).unwrap();
            let store = Store::open_sqlite(&dir).unwrap();
            if written_after {
                assert!(done.contains("took writes after it was set aside"), "{done}");
                assert_eq!(names(&store), ["first", "later"]);
                assert!(aside.exists(), "left for a person");
            } else {
                assert!(done.contains("applied the 2 group(s)"), "{done}");
                assert_eq!(names(&store), ["renamed", "second"]);
                assert!(!aside.exists());
            }
            drop(store);
            if !written_after {
                assert!(check::check(&dir).unwrap().problems.is_empty());
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_damaged_journal_stops_start_up_and_repair_applies_the_groups_before_the_damage() {
        let (dir, path, applied) = one_flushed_tree("damage");
        // Three acknowledged groups the database does not have yet; the middle one damaged.
        let (mut j, _) = Journal::open(&path, applied).unwrap();
        for (id, name) in [(2, "second"), (3, "third"), (4, "fourth")] {
            j.append(&[Write::Tree(tree_row(id, name))]).unwrap().unwrap();
        }
        drop(j);
        let mut bytes = std::fs::read(&path).unwrap();
        let record = bytes.len() / 3;
        bytes[record + 30] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let e = Store::open_sqlite(&dir).err().expect("start-up stops");
        assert!(e.message().contains("is damaged") && e.message().contains("simtree data repair"), "{e}");
        let report = check::check(&dir).unwrap();
        assert_eq!(report.pending, 1, "{report:?}");
        assert!(report.problems.iter().any(|p| p.contains("is damaged")), "{report:?}");
        let done = check::repair(&dir).unwrap();
        assert!(done.contains("set aside"), "{done}");
        let store = Store::open_sqlite(&dir).unwrap();
        assert_eq!(names(&store), ["first", "second"]);
        drop(store);
        assert!(check::check(&dir).unwrap().problems.is_empty());
        let aside = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("simtree.journal.failed-"));
        assert!(aside, "the damaged journal is kept");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tree_ids_are_never_handed_out_twice_and_unfinished_imports_are_removed() {
        let dir = Scratch::new("tree-ids");
        let store = Store::open_sqlite(&dir).unwrap();
        store.write(Write::Tree(tree_row(0, "kept")));
        store.write(Write::Tree(tree_row(1, "deleted")));
        store.write(Write::DeleteTree { tree: 1 });
        // An import that never finished: its marker and a node row.
        store.write(Write::ImportBegin { tree: 2 });
        store.write(Write::Node {
            tree: 2,
            row: NodeRow {
                id: 0,
                parent: None,
                depth: 0,
                edge_type: simtree_shared::EdgeType::Root,
                ops: Vec::new(),
                status: NodeStatus::Done,
                error: None,
                created: 1,
                finished: None,
                turns: 0,
                records: Vec::new(),
            },
        });
        store.flush().unwrap();
        assert_eq!(store.read(|db| db.next_tree()).unwrap(), 3);
        assert_eq!(store.read(|db| db.abandoned_imports()).unwrap(), [(2, 1)]);
        assert!(store.read(|db| db.nodes(2)).unwrap().rows.is_empty());
        assert!(store.read(|db| db.abandoned_imports()).unwrap().is_empty());
        assert_eq!(store.read(|db| db.next_tree()).unwrap(), 3);
        drop(store);
    }

    #[test]
    fn one_node_is_read_alone_as_the_trees_records_hold_it() {
        let dir = Scratch::new("one-node");
        let store = Store::open_sqlite(&dir).unwrap();
        for tree in [0, 1] {
            store.write(Write::Tree(tree_row(tree, "t")));
            for id in 0..4 {
                let status = if id == 3 { NodeStatus::Running } else { NodeStatus::Done };
                store.write(Write::Node {
                    tree,
                    row: NodeRow {
                        id,
                        parent: id.checked_sub(1),
                        depth: id as u32,
                        edge_type: simtree_shared::EdgeType::Advance,
                        ops: Vec::new(),
                        status,
                        error: (tree == 1).then(|| format!("in tree {tree}")),
                        created: 10 * tree + id,
                        finished: None,
                        turns: id,
                        records: Vec::new(),
                    },
                });
            }
        }
        store.flush().unwrap();
        for tree in [0, 1] {
            let all = store.read(move |db| db.nodes(tree)).unwrap().rows;
            for id in 0..5 {
                let one = store.read(move |db| db.node(tree, id)).unwrap();
                assert_eq!(one.as_ref(), all.iter().find(|r| r.id == id), "node {id} of tree {tree}");
            }
        }
        drop(store);
    }

    /// A database whose applies fail while `fail` is set; it keeps what it applied.
    #[derive(Default)]
    struct Flaky {
        fail: bool,
        /// Refuses every apply as a database that will never take it.
        refuse: bool,
        applied: Vec<String>,
    }

    impl Database for Flaky {
        fn apply(&mut self, writes: &[Write]) -> StoreResult<()> {
            if self.fail {
                return Err(StoreError::Full("disk full".into()));
            }
            if self.refuse {
                return Err(StoreError::Db("constraint".into()));
            }
            self.applied.extend(writes.iter().map(|w| format!("{w:?}")));
            Ok(())
        }
        fn trees(&mut self) -> StoreResult<Vec<TreeRow>> {
            Ok(Vec::new())
        }
        fn nodes(&mut self, _: u64) -> StoreResult<NodeRows> {
            Ok(NodeRows::default())
        }
        fn state(&mut self, _: u64, _: u64) -> StoreResult<Option<Vec<u8>>> {
            Ok(None)
        }
        fn chunks(&mut self, _: u64, _: &[u64]) -> StoreResult<Vec<(ChunkKey, Vec<u8>)>> {
            Ok(Vec::new())
        }
        fn log(&mut self, _: u64, _: u64) -> StoreResult<Vec<LogRow>> {
            Ok(Vec::new())
        }
        fn sweeps(&mut self, _: u64) -> StoreResult<Vec<String>> {
            Ok(Vec::new())
        }
        fn interrupt_running(&mut self, _: &[(u64, u64)]) -> StoreResult<u64> {
            Ok(0)
        }
        fn next_tree(&mut self) -> StoreResult<u64> {
            Ok(0)
        }
        fn abandoned_imports(&mut self) -> StoreResult<Vec<(u64, u64)>> {
            Ok(Vec::new())
        }
    }

    fn waiter(out: &Arc<Mutex<Vec<bool>>>) -> Ack {
        let out = out.clone();
        Box::new(move |r| out.lock().unwrap().push(r.is_ok()))
    }

    /// What the store thread does with queued writes and marks.
    fn drain(mailbox: &Mailbox, queue: &mut Vec<Write>, c: &mut Committer) {
        for msg in mailbox.take(Some(std::time::Instant::now())).unwrap() {
            match msg {
                Msg::Write(w) => push_merged(queue, w),
                Msg::Mark(seq) => c.mark(seq),
                _ => unreachable!("the test posts writes and marks only"),
            }
        }
    }

    #[test]
    fn an_attempt_whose_commit_fails_is_dropped_and_the_writes_before_it_are_retried() {
        let mut c = Committer::new(None);
        let mut db = Flaky::default();
        let rename = |name: &str| Write::Rename { tree: 1, name: name.into() };
        let heard = Arc::new(Mutex::new(Vec::new()));
        db.fail = true;
        let (result, stored) =
            c.commit_with(&mut db, &mut vec![rename("queued")], &mut vec![waiter(&heard)], vec![rename("attempt")]);
        assert!(result.is_err() && stored.is_empty());
        assert_eq!(*heard.lock().unwrap(), [false]);
        assert_eq!(c.retained.len(), 1, "the queued write is kept, the attempt is not");
        db.fail = false;
        let (result, stored) = c.commit_with(&mut db, &mut Vec::new(), &mut Vec::new(), vec![rename("again")]);
        assert!(result.is_ok());
        assert_eq!(stored.len(), 1, "what was stored comes back (deletions are recorded from it)");
        assert!(c.retained.is_empty());
        assert_eq!(db.applied.len(), 2);
        assert!(db.applied[0].contains("\"queued\"") && db.applied[1].contains("\"again\""));
    }

    #[test]
    fn an_acknowledged_group_that_fails_to_commit_is_retried_first_and_flushes_then_wait_for_commits() {
        let dir = Scratch::new("journal-retry");
        let (journal, _) = Journal::open(&dir.join("simtree.journal"), 0).unwrap();
        let front = Arc::new(Front {
            journal: Mutex::new(journal),
            applied: AtomicU64::new(0),
            healthy: AtomicBool::new(true),
        });
        let mailbox = Mailbox::default();
        let mut c = Committer::new(Some(front.clone()));
        let mut db = Flaky::default();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let heard_now = |h: &Arc<Mutex<Vec<bool>>>| h.lock().unwrap().clone();
        let rename = |name: &str| Write::Rename { tree: 1, name: name.into() };
        // A flush through the journal needs no commit: it queues the group's mark.
        let mut queue = Vec::new();
        front.write(&mailbox, rename("a")).unwrap();
        assert!(front.flush(&mailbox));
        drain(&mailbox, &mut queue, &mut c);
        assert_eq!((queue.len(), c.last_seq), (1, Some(1)));
        // Log entries queued after it; the group commit fails: every write is kept with the
        // mark (the entries belong to a run whose end may still be acknowledged).
        front.write(&mailbox, Write::Log { tree: 1, node: 1, index: 0, count: 1, entries: "x".into() }).unwrap();
        drain(&mailbox, &mut queue, &mut c);
        db.fail = true;
        c.commit(&mut db, &mut queue, &mut Vec::new());
        assert!(queue.is_empty());
        assert_eq!(c.retained.len(), 3, "the journaled write, the entries and the mark");
        assert!(matches!(c.retained.last(), Some(Write::Applied { seq: 1 })));
        // Until they are in, the journal does not answer flushes: a commit does, and says how
        // it went.
        assert!(!front.flush(&mailbox));
        c.commit(&mut db, &mut vec![rename("b")], &mut vec![waiter(&heard)]);
        assert_eq!(heard_now(&heard), [false]);
        assert_eq!(c.retained.len(), 4);
        db.fail = false;
        c.commit(&mut db, &mut vec![rename("c")], &mut vec![waiter(&heard)]);
        assert_eq!(heard_now(&heard), [false, true]);
        assert!(c.retained.is_empty());
        assert_eq!(front.applied.load(Ordering::Acquire), 1);
        let applied: Vec<&str> = db.applied.iter().map(|w| w.split([' ', '{']).next().unwrap()).collect();
        assert_eq!(applied, ["Rename", "Log", "Applied", "Rename", "Rename"]);
        assert!(db.applied[0].contains("\"a\"") && db.applied[4].contains("\"c\""));
        // Healthy again: flushes go through the journal.
        front.write(&mailbox, rename("d")).unwrap();
        assert!(front.flush(&mailbox));
    }
}
