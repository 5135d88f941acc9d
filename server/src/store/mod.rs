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
mod journal;
pub mod lease;
mod postgres;
mod sql;
mod sqlite;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, mpsc};

use simtree_shared::{EdgeType, NodeStatus, Op, SimKind};

use crate::chunks::{ChunkCache, ChunkKey, Dedupe, NewChunk, read_chunks, write_chunks};
use crate::llm::ledger::LlmRecord;
use crate::sim::Sim;
use crate::trading::data::MarketData;
use journal::Journal;

pub use sql::SCHEMA_VERSION;
pub use sql::index_text;

#[derive(Debug, Clone, thiserror::Error)]
#[error("store: {0}")]
pub struct StoreError(pub String);

pub type StoreResult<T> = Result<T, StoreError>;

/// A tree's row: its metadata and the next node id (ids are never reused, across restarts too).
#[derive(Debug, Clone, PartialEq)]
pub struct TreeRow {
    pub id: u64,
    pub name: String,
    pub scenario: String,
    pub kind: SimKind,
    /// Unix milliseconds.
    pub created: u64,
    pub last_activity: u64,
    pub seq: u64,
    pub nodes: u64,
    pub budget: Option<u64>,
    /// Written by [`Write::Describe`] only ([`Write::Tree`] leaves it as it is).
    pub description: Option<String>,
}

/// A node's record.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub id: u64,
    pub parent: Option<u64>,
    pub depth: u32,
    pub edge_type: EdgeType,
    pub ops: Vec<Op>,
    pub status: NodeStatus,
    pub error: Option<String>,
    /// Unix milliseconds: attached, and when its run ended.
    pub created: u64,
    pub finished: Option<u64>,
    /// Turns the node's simulator has run (summaries need no simulator).
    pub turns: u64,
    pub records: Vec<LlmRecord>,
}

/// A stored row of a node's log: consecutive entries from entry `index` on, one per line, and
/// the CRC-32 of the text (`None` in rows written before checksums: format 0).
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    pub index: u64,
    pub entries: String,
    pub crc: Option<u32>,
}

impl LogRow {
    /// The row's entries, or what is wrong with it: a checksum that does not match, or (rows
    /// without one) an entry that is not JSON.
    pub fn verified(&self) -> Result<impl Iterator<Item = &str>, String> {
        match self.crc {
            Some(crc) if crc32fast::hash(self.entries.as_bytes()) != crc => {
                return Err(format!("log row at entry {} fails its checksum", self.index));
            }
            Some(_) => {}
            None => {
                for (k, e) in self.entries.split('\n').filter(|e| !e.is_empty()).enumerate() {
                    if serde_json::from_str::<serde::de::IgnoredAny>(e).is_err() {
                        return Err(format!("log entry {} is not JSON", self.index + k as u64));
                    }
                }
            }
        }
        Ok(self.entries.split('\n').filter(|e| !e.is_empty()))
    }
}

/// Why a node could not be given back: the store failed, or what it holds is damaged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
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
}

impl Write {
    /// A node's whole own log as one row (`None` when it has no entries).
    pub fn whole_log(tree: u64, node: u64, entries: &[String]) -> Option<Write> {
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
    pub id: String,
    pub version: u64,
    /// Unix milliseconds.
    pub saved: u64,
    pub body: String,
}

/// What a backend does; called only from the store's thread.
pub trait Database: Send {
    fn apply(&mut self, writes: &[Write]) -> StoreResult<()>;
    fn trees(&mut self) -> StoreResult<Vec<TreeRow>>;
    fn nodes(&mut self, tree: u64) -> StoreResult<Vec<NodeRow>>;
    fn state(&mut self, tree: u64, node: u64) -> StoreResult<Option<Vec<u8>>>;
    /// Every chunk written by one of `nodes`.
    fn chunks(&mut self, tree: u64, nodes: &[u64]) -> StoreResult<Vec<(ChunkKey, Vec<u8>)>>;
    /// A node's log rows, in order (each holds one or more entries, one per line).
    fn log(&mut self, tree: u64, node: u64) -> StoreResult<Vec<LogRow>>;
    /// A tree's sweeps (JSON bodies), in id order.
    fn sweeps(&mut self, tree: u64) -> StoreResult<Vec<String>>;
    /// A tree's explorations (JSON bodies), in id order.
    fn explores(&mut self, _tree: u64) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }
    /// A tree's own money cap, if it was made with one.
    fn tree_money(&mut self, _tree: u64) -> StoreResult<Option<f64>> {
        Ok(None)
    }
    /// Marks nodes whose run was in flight when the last server stopped; returns how many.
    fn interrupt_running(&mut self) -> StoreResult<u64>;
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
        Err(StoreError("this store does not hand out tree ids".into()))
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
    /// Deletes the rows of imports that never completed (the server stopped mid-import), in
    /// one transaction; returns each such tree with the number of node rows it had.
    fn abandoned_imports(&mut self) -> StoreResult<Vec<(u64, u64)>>;
    /// The document a tree was made from, if a user brought one.
    fn document(&mut self, _tree: u64) -> StoreResult<Option<String>> {
        Ok(None)
    }
    /// Every uploaded market dataset: its name and CSV text, by name.
    fn datasets(&mut self) -> StoreResult<Vec<(String, String)>> {
        Ok(Vec::new())
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
    /// The bodies of the texts `ids` (for excerpts), by id.
    fn texts(&mut self, _ids: &[u64]) -> StoreResult<Vec<(u64, String)>> {
        Ok(Vec::new())
    }
}

/// A text found by [`Database::search`].
#[derive(Debug, Clone, PartialEq)]
pub struct TextMatch {
    pub id: u64,
    pub tree: u64,
    pub node: u64,
    pub kind: String,
    /// Higher is better (the database's rank, in millionths).
    pub score: i64,
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
    pub location: String,
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

/// Writes committed per transaction at most (a long queue is committed in steps).
const BATCH: usize = 4096;

/// How long writes nobody waits for may wait for company before they are committed.
const GROUP: std::time::Duration = std::time::Duration::from_millis(5);

impl Store {
    /// Opens (creating if needed) `dir/simtree.db`.
    pub fn open_sqlite(dir: &Path) -> StoreResult<Store> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError(format!("cannot create the data folder {}: {e}", dir.display())))?;
        let file = dir.join("simtree.db");
        refuse_emptied(dir, &file)?;
        let mut db = sql::Db::new(sqlite::Sqlite::open(&file)?);
        db.migrate()?;
        let (journal, applied) = replay(&mut db, &dir.join("simtree.journal"))?;
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
        let url = url.to_string();
        // The client is created on the store's thread: it must never run inside the server's runtime.
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("simtree-store".into())
            .spawn(move || {
                let opened = postgres::Postgres::connect(&url).and_then(|sql| {
                    let mut db = sql::Db::new(sql);
                    db.migrate()?;
                    if let Some(length) = lease {
                        db.take_lease(lease::Lease::this_process(length))?;
                    }
                    Ok(db)
                });
                match opened {
                    Ok(mut db) => {
                        let mailbox = Arc::new(Mailbox::default());
                        let _ = tx.send(Ok(mailbox.clone()));
                        let heartbeat = db.lease.as_ref().map(lease::Lease::heartbeat);
                        run(&mut db, &mailbox, None, heartbeat);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| StoreError(e.to_string()))?;
        let mailbox = rx.recv().map_err(|_| StoreError("the store thread ended".into()))??;
        Ok(Store {
            mailbox,
            thread: Some(thread),
            front: None,
            location: "postgresql".into(),
            ids_from_database: true,
        })
    }

    fn start<D: Database + 'static>(mut db: Box<D>, location: String, front: Arc<Front>) -> StoreResult<Store> {
        let mailbox = Arc::new(Mailbox::default());
        let theirs = mailbox.clone();
        let theirs_front = front.clone();
        let thread = std::thread::Builder::new()
            .name("simtree-store".into())
            .spawn(move || run(&mut *db, &theirs, Some(theirs_front), None))
            .map_err(|e| StoreError(e.to_string()))?;
        Ok(Store {
            mailbox,
            thread: Some(thread),
            front: Some(front),
            location,
            ids_from_database: false,
        })
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
        blocking(|| rx.recv().map_err(|_| StoreError("the store thread ended".into()))?)
    }

    /// [`Self::flush`] without blocking a runtime thread.
    pub async fn flush_async(&self) -> StoreResult<()> {
        if self.journaled() {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Msg::Flush(Box::new(move |r| {
            let _ = tx.send(r);
        })))?;
        rx.await.map_err(|_| StoreError("the store thread ended".into()))?
    }

    /// Why the store cannot take writes now (its last commit failed: a full disk, a lost
    /// database), or `None`. The store thread retries every second, so this clears by itself
    /// once the cause is gone.
    /// A lost server lease is reported here too, for good.
    pub fn fault(&self) -> Option<String> {
        let lost = self
            .mailbox
            .lease_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        lost.or_else(|| self.mailbox.fault.lock().unwrap_or_else(|p| p.into_inner()).clone())
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
        blocking(|| rx.recv().map_err(|_| StoreError("the store thread ended".into()))?)
    }
}

/// A database file of zero bytes in a folder that was used before (its journal is there) lost
/// everything: SQLite would start an empty store in it (and hand out its tree ids again).
fn refuse_emptied(dir: &Path, file: &Path) -> StoreResult<()> {
    let empty = std::fs::metadata(file).is_ok_and(|m| m.len() == 0);
    if empty && dir.join("simtree.journal").exists() {
        return Err(StoreError(format!(
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
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
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
                return Err(StoreError("the store thread ended".into()));
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
                    inbox = self
                        .ready
                        .wait_timeout(inbox, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    inbox.lingering = false;
                }
                None => inbox = self.ready.wait(inbox).unwrap_or_else(|p| p.into_inner()),
            }
        }
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
fn replay<S: sql::Sql>(db: &mut sql::Db<S>, path: &Path) -> StoreResult<(Journal, u64)> {
    let applied = db.journal_applied()?;
    let (journal, pending) = Journal::open(path, applied)?;
    apply_groups(db, journal, pending, applied)
}

/// Applies journaled groups (in order) and empties the journal; a group the database refuses
/// sets the journal aside.
fn apply_groups<S: sql::Sql>(
    db: &mut sql::Db<S>,
    mut journal: Journal,
    pending: Vec<journal::Group>,
    mut applied: u64,
) -> StoreResult<(Journal, u64)> {
    let groups = pending.len();
    // Writes queued after their node or tree was deleted are dropped, as the store thread drops
    // them (a run stopped by a deletion may queue a few log entries after it).
    let mut gone = Gone::default();
    for (seq, writes) in pending {
        let mut writes: Vec<Write> = writes.into_iter().filter(|w| gone.admit(w)).collect();
        writes.push(Write::Applied { seq });
        if let Err(e) = db.apply(&writes) {
            let aside = journal.set_aside()?;
            tracing::error!(seq, error = %e, kept = %aside.display(), "journal: a group could not be applied; the journal was set aside");
            return Ok((journal, applied));
        }
        applied = seq;
    }
    if groups > 0 {
        tracing::warn!(
            groups,
            "journal: applied the groups the last server acknowledged but had not yet written"
        );
    }
    journal.clear()?;
    Ok((journal, applied))
}

/// How the store thread commits what is queued, and what it tells the journal.
struct Committer {
    /// SQLite's journal side: told the last group the database has, and whether commits fail.
    front: Option<Arc<Front>>,
    /// The queued writes are in the journal (their flushes were answered) up to group
    /// `last_seq`.
    last_seq: Option<u64>,
    /// Writes whose commit failed, with their journal marks: retried first, with every later
    /// commit.
    retained: Vec<Write>,
    /// Why the last commit failed, until one succeeds.
    fault: Option<String>,
}

impl Committer {
    fn new(front: Option<Arc<Front>>) -> Committer {
        Committer {
            front,
            last_seq: None,
            retained: Vec::new(),
            fault: None,
        }
    }

    /// The writes queued so far are in the journal up to group `seq`.
    fn mark(&mut self, seq: u64) {
        self.last_seq = Some(seq);
    }

    /// Commits everything queued (after any retained writes) and answers `flushes` with the
    /// outcome.
    fn commit(&mut self, db: &mut dyn Database, writes: &mut Vec<Write>, flushes: &mut Vec<Ack>) {
        let mut all = std::mem::take(&mut self.retained);
        // The last group these writes complete: a retained one's mark, or the newest mark.
        let retained_seq = all.iter().rev().find_map(|w| match w {
            Write::Applied { seq } => Some(*seq),
            _ => None,
        });
        all.append(writes);
        let seq = self.last_seq.take();
        all.extend(seq.map(|seq| Write::Applied { seq }));
        let result = match (all.is_empty(), &self.fault) {
            (false, _) => db.apply(&all),
            // Failed before, nothing to retry: does it take writes again?
            (true, Some(_)) => db.probe(),
            (true, None) => Ok(()),
        };
        match &result {
            Ok(()) => {
                if let Some(fault) = self.fault.take() {
                    tracing::warn!(was = %fault, "the store takes writes again");
                }
                if let Some(front) = &self.front {
                    if let Some(seq) = seq.max(retained_seq) {
                        front.applied.fetch_max(seq, Ordering::AcqRel);
                    }
                    front.healthy.store(true, Ordering::Release);
                }
            }
            Err(e) => {
                if self.fault.as_ref() != Some(&e.0) {
                    tracing::error!(error = %e, writes = all.len(), "store commit failed");
                }
                self.fault = Some(e.0.clone());
                // Every write is kept, in order, and retried (each is idempotent): the journaled
                // ones were acknowledged, and the others belong to runs still in flight, whose
                // end may yet be acknowledged, or to deletions of nodes taken back out of the
                // tree, which must not come back from rows that reached the database before.
                // Until they are in, flushes wait for commits (and fail with them), and new
                // work is refused (`Store::fault`), so what is kept stays bounded.
                self.retained = std::mem::take(&mut all);
                if let (false, Some(front)) = (self.retained.is_empty(), &self.front) {
                    front.healthy.store(false, Ordering::Release);
                }
            }
        }
        all.clear();
        *writes = all;
        for f in flushes.drain(..) {
            f(result.clone());
        }
    }
}

/// The store thread: commits queued writes in batches, answers reads and flushes in order.
/// With `heartbeat`, the server lease is renewed that often (see `store/lease.rs`) and released
/// when the store closes.
fn run(db: &mut dyn Database, mailbox: &Mailbox, front: Option<Arc<Front>>, heartbeat: Option<std::time::Duration>) {
    let _ended = Ended(mailbox);
    // What was deleted: a run stopped by a deletion may still queue a few log entries after it,
    // and they must not leave rows behind (ids are never reused, so this is exact).
    let mut gone = Gone::default();
    let mut writes: Vec<Write> = Vec::new();
    let mut flushes: Vec<Ack> = Vec::new();
    let mut c = Committer::new(front);
    // Group commit: writes linger up to GROUP so that they share a transaction with what
    // follows (journaled writes are durable already; others are log entries nobody waits for).
    // A flush waiting for a commit, a read, or a long queue commits at once.
    let mut oldest: Option<std::time::Instant> = None;
    let mut beat = heartbeat.map(|every| std::time::Instant::now() + every);
    loop {
        // While commits fail, wake every second to retry (or probe), so that the store recovers
        // by itself once space or the database is back.
        let retry = c.fault.as_ref().map(|_| std::time::Instant::now() + RETRY);
        let deadline = [oldest.map(|t| t + GROUP), retry, beat].into_iter().flatten().min();
        let Some(msgs) = mailbox.take(deadline) else {
            break;
        };
        if let (Some(at), Some(every)) = (beat, heartbeat)
            && std::time::Instant::now() >= at
        {
            // A database that is away fails this too; it is reported by commits and `/ready`.
            if let Err(e) = db.heartbeat() {
                tracing::debug!(error = %e, "the server lease could not be renewed now");
            }
            beat = Some(std::time::Instant::now() + every);
        }
        for msg in msgs {
            match msg {
                Msg::Write(w) => {
                    if gone.admit(&w) {
                        push_merged(&mut writes, w);
                        oldest.get_or_insert_with(std::time::Instant::now);
                    }
                }
                Msg::Mark(seq) => c.mark(seq),
                Msg::Flush(ack) => flushes.push(ack),
                Msg::Read(job) => {
                    c.commit(db, &mut writes, &mut flushes);
                    oldest = None;
                    job(db);
                }
            }
            if writes.len() >= BATCH {
                c.commit(db, &mut writes, &mut flushes);
                oldest = None;
            }
        }
        let due = oldest.is_some_and(|t| t.elapsed() >= GROUP);
        if !flushes.is_empty() || due || writes.is_empty() {
            c.commit(db, &mut writes, &mut flushes);
            oldest = None;
        }
        let mut fault = mailbox.fault.lock().unwrap_or_else(|p| p.into_inner());
        if *fault != c.fault {
            fault.clone_from(&c.fault);
        }
        drop(fault);
        if let Some(lost) = db.lease_lost() {
            mailbox
                .lease_lost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(lost);
        }
    }
    c.commit(db, &mut writes, &mut flushes);
    if c.fault.is_none() {
        db.release_lease();
    } else {
        // Writes are left that could not be stored: the lease lapses by itself instead, so that
        // the next server starts after this one's last attempts.
        tracing::warn!("the store closes with writes it could not store; its server lease lapses by itself");
    }
}

/// How often a store whose commits fail tries again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Deleted nodes and trees, so that late writes for them are dropped.
#[derive(Default)]
struct Gone {
    nodes: std::collections::HashSet<(u64, u64)>,
    trees: std::collections::HashSet<u64>,
}

impl Gone {
    /// Records a deletion; returns false for a write about something already deleted.
    fn admit(&mut self, w: &Write) -> bool {
        match w {
            Write::DeleteNodes { tree, nodes } => {
                self.nodes.extend(nodes.iter().map(|n| (*tree, *n)));
                true
            }
            Write::DeleteTree { tree } => {
                self.trees.insert(*tree);
                true
            }
            Write::Node { tree, row } => self.live(*tree, row.id),
            Write::Log { tree, node, .. } | Write::State { tree, node, .. } => self.live(*tree, *node),
            Write::Tree(t) => !self.trees.contains(&t.id),
            Write::Applied { .. }
            | Write::Dataset { .. }
            | Write::DeleteDataset { .. }
            | Write::SaveScenario { .. }
            | Write::DeleteScenario { .. } => true,
            Write::ImportBegin { tree }
            | Write::ImportEnd { tree }
            | Write::Document { tree, .. }
            | Write::TreeMoney { tree, .. }
            | Write::Origin { tree, .. } => !self.trees.contains(tree),
            Write::Annotate { tree, node, .. } | Write::Text { tree, node, .. } | Write::Ask { tree, node, .. } => {
                self.live(*tree, *node)
            }
            Write::Rename { tree, .. }
            | Write::Describe { tree, .. }
            | Write::Touch { tree, .. }
            | Write::Sweep { tree, .. }
            | Write::DeleteSweep { tree, .. }
            | Write::Explore { tree, .. }
            | Write::DeleteExplore { tree, .. } => !self.trees.contains(tree),
        }
    }

    fn live(&self, tree: u64, node: u64) -> bool {
        !self.trees.contains(&tree) && !self.nodes.contains(&(tree, node))
    }
}

/// Queues a write, appending log entries to the previous write when they continue it (a run's
/// entries arrive one by one; a row holds a batch).
fn push_merged(writes: &mut Vec<Write>, w: Write) {
    if let (
        Some(Write::Log {
            tree: t0,
            node: n0,
            index: i0,
            count: c0,
            entries: e0,
        }),
        Write::Log {
            tree,
            node,
            index,
            count,
            entries,
        },
    ) = (writes.last_mut(), &w)
        && *t0 == *tree
        && *n0 == *node
        && *i0 + *c0 == *index
    {
        e0.push('\n');
        e0.push_str(entries);
        *c0 += count;
        return;
    }
    // A sweep's row is rewritten whole as each replicate ends: a queued one it supersedes is
    // replaced in place (unless a deletion for its tree comes after it).
    if let Write::Sweep { tree, id, .. } = &w {
        for queued in writes.iter_mut().rev() {
            match queued {
                Write::Sweep { tree: t, id: i, .. } if t == tree && i == id => {
                    *queued = w;
                    return;
                }
                Write::DeleteSweep { tree: t, .. } | Write::DeleteTree { tree: t } if t == tree => break,
                _ => {}
            }
        }
    }
    // So is an exploration's.
    if let Write::Explore { tree, id, .. } = &w {
        for queued in writes.iter_mut().rev() {
            match queued {
                Write::Explore { tree: t, id: i, .. } if t == tree && i == id => {
                    *queued = w;
                    return;
                }
                Write::DeleteExplore { tree: t, .. } | Write::DeleteTree { tree: t } if t == tree => break,
                _ => {}
            }
        }
    }
    writes.push(w);
}

// ---- states ----

/// The first byte of a row in the second form (format 1): an LZ4 block follows, after its size
/// (u32, little endian). No raw deflate stream — format 0, the rows written first — can start
/// with it: its block type bits (1–2) are 11, which deflate reserves. Still read, no longer
/// written.
const LZ4_MARK: u8 = 0x06;

/// The first byte of a row in the current form (format 2): the size (u32), the CRC-32 of the
/// unpacked bytes (u32), then the LZ4 block; damage is found on read, not parsed into a state.
/// (0x07 is, like 0x06, a deflate block type no stream starts with.)
const LZ4_CRC_MARK: u8 = 0x07;

/// Rows larger than this once unpacked are refused as damaged (a state or chunk is kilobytes).
const MAX_UNPACKED: usize = 1 << 30;

/// A state or chunk as the store writes it. LZ4 rather than deflate: a node's state is a few
/// kilobytes written while its run waits for the commit, and LZ4 packs it in microseconds where
/// deflate took tens (with a fresh encoder, hundreds: it allocates and clears its tables).
fn pack(bytes: &[u8]) -> Vec<u8> {
    let block = lz4_flex::block::compress(bytes);
    let mut out = Vec::with_capacity(9 + block.len());
    out.push(LZ4_CRC_MARK);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    out.extend_from_slice(&block);
    out
}

/// The inverse of [`pack`]; also reads the rows that earlier versions wrote (LZ4 without a
/// checksum, raw deflate).
fn unpack(bytes: &[u8]) -> StoreResult<Vec<u8>> {
    let le = |b: [u8; 4]| u32::from_le_bytes(b);
    let (size, crc, block) = match *bytes {
        [LZ4_CRC_MARK, s0, s1, s2, s3, c0, c1, c2, c3, ref block @ ..] => {
            (le([s0, s1, s2, s3]), Some(le([c0, c1, c2, c3])), block)
        }
        [LZ4_MARK, s0, s1, s2, s3, ref block @ ..] => (le([s0, s1, s2, s3]), None, block),
        [LZ4_MARK | LZ4_CRC_MARK, ..] => return Err(StoreError("corrupt packed data: no size".into())),
        _ => return inflate(bytes),
    };
    let size = size as usize;
    if size > MAX_UNPACKED {
        return Err(StoreError(format!("corrupt packed data: it claims {size} bytes")));
    }
    let out = lz4_flex::block::decompress(block, size).map_err(|e| StoreError(format!("corrupt packed data: {e}")))?;
    match crc {
        Some(crc) if crc32fast::hash(&out) != crc => Err(StoreError("the data fails its checksum".into())),
        _ => Ok(out),
    }
}

/// Raw deflate, as rows were written before [`pack`]; the decompressor is kept per thread and
/// reset between uses (a fresh one allocates its tables each time).
fn inflate(bytes: &[u8]) -> StoreResult<Vec<u8>> {
    thread_local! {
        static DECOMPRESS: std::cell::RefCell<flate2::Decompress> =
            std::cell::RefCell::new(flate2::Decompress::new(false));
    }
    DECOMPRESS.with(|d| {
        let mut d = d.borrow_mut();
        d.reset(false);
        let mut out = Vec::with_capacity(bytes.len() * 4 + 64);
        loop {
            let (read, written) = (d.total_in(), d.total_out());
            let status = d
                .decompress_vec(&bytes[read as usize..], &mut out, flate2::FlushDecompress::None)
                .map_err(|e| StoreError(format!("corrupt compressed data: {e}")))?;
            if status == flate2::Status::StreamEnd {
                return Ok(out);
            }
            if out.len() < out.capacity() && (d.total_in(), d.total_out()) == (read, written) {
                // Room to write and nothing consumed: the stream ends before its last block.
                return Err(StoreError("corrupt compressed data: the stream is cut short".into()));
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity());
            }
        }
    })
}

/// A node's state in the store form: deflated JSON and the chunks it writes first. The size of
/// the uncompressed state (tails and keys, not chunks) is returned for cache accounting.
pub struct EncodedState {
    pub data: Vec<u8>,
    pub chunks: Vec<(ChunkKey, Vec<u8>)>,
    pub raw_len: usize,
}

pub fn encode_state(sim: &Sim, node: u64, dedupe: Option<Dedupe>) -> (StoreResult<EncodedState>, Option<Dedupe>) {
    let (json, chunks, dedupe) = write_chunks(node, dedupe, || serde_json::to_vec(sim));
    let encoded = json
        .map_err(|e| StoreError(format!("node {node}: state: {e}")))
        .map(|json| EncodedState {
            data: pack(&json),
            raw_len: json.len() + chunks.iter().map(|c| c.data.len()).sum::<usize>(),
            chunks: chunks
                .into_iter()
                .map(|NewChunk { key, data }| (key, pack(&data)))
                .collect(),
        });
    (encoded, dedupe)
}

/// Where the nodes of one stored tree come back from: their state (rebuilt from the state row and
/// the chunk rows of the root path, sharing chunks already in memory) and their logs.
pub struct TreeSource {
    pub store: Arc<Store>,
    pub tree: u64,
    pub cache: Arc<ChunkCache>,
    pub market: Option<Arc<MarketData>>,
    /// Told what each rebuild brings into memory, so the cache is trimmed before it overshoots.
    pub pressure: Arc<Pressure>,
}

/// What rebuilds (states, logs, tree structures) have brought into memory since the cache was
/// last trimmed. Past a threshold (an eighth of the budget) it wakes the cache sweeper at once
/// instead of at its next tick, so a burst of reads cannot push memory far past `--cache-mb`
/// between two ticks.
#[derive(Debug, Default)]
pub struct Pressure {
    loaded: std::sync::atomic::AtomicUsize,
    threshold: usize,
    pub wake: tokio::sync::Notify,
}

impl Pressure {
    pub fn new(budget: usize) -> Pressure {
        Pressure {
            threshold: (budget / 8).max(1),
            ..Pressure::default()
        }
    }

    /// Counts `bytes` brought in; wakes the sweeper when they pass the threshold.
    pub fn add(&self, bytes: usize) {
        use std::sync::atomic::Ordering;
        let before = self.loaded.fetch_add(bytes, Ordering::Relaxed);
        if before < self.threshold && before + bytes >= self.threshold {
            self.wake.notify_one();
        }
    }

    /// The sweeper ran: start counting again. Returns what was loaded since the last time.
    pub fn reset(&self) -> usize {
        self.loaded.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

impl TreeSource {
    /// The state of `node` (`path`: its root path), or `None` when it has none stored (a run
    /// that never finished).
    /// The second value is what the rebuilt state costs in memory, roughly, for the cache: its
    /// stored form plus the chunks read for it (an upper bound: some may be shared).
    pub fn state(&self, node: u64, path: &[u64]) -> Result<Option<(Sim, usize)>, SourceError> {
        let tree = self.tree;
        let Some(data) = self.store.read(move |db| db.state(tree, node))? else {
            return Ok(None);
        };
        let json = unpack(&data).map_err(|e| self.damaged(node, "state", e))?;
        let parse =
            |raw: HashMap<ChunkKey, Arc<[u8]>>| read_chunks(raw, &self.cache, || serde_json::from_slice::<Sim>(&json));
        let mut cost = json.len();
        let sim = match parse(HashMap::new()) {
            Some(sim) => sim,
            None => {
                let path = path.to_vec();
                let rows = self.store.read(move |db| db.chunks(tree, &path))?;
                let mut raw = HashMap::with_capacity(rows.len());
                for (key, bytes) in rows {
                    let what = format!("state chunk {} of node {}", key.1, key.0);
                    let bytes = unpack(&bytes).map_err(|e| self.damaged(node, &what, e))?;
                    cost += bytes.len();
                    raw.insert(key, Arc::from(bytes));
                }
                parse(raw).ok_or_else(|| self.damaged(node, "state", "a chunk of it is missing"))?
            }
        };
        let mut sim = sim.map_err(|e| self.damaged(node, "state", e))?;
        sim.attach(self.market.as_ref());
        self.pressure.add(cost);
        Ok(Some((sim, cost)))
    }

    /// A node's stored log entries (every row verified: a damaged one is an error, never a
    /// log with a hole or an entry that is not JSON).
    pub fn log(&self, node: u64) -> Result<Vec<String>, SourceError> {
        let tree = self.tree;
        let rows = self.store.read(move |db| db.log(tree, node))?;
        self.pressure.add(rows.iter().map(|r| r.entries.len()).sum());
        let mut out = Vec::new();
        for r in &rows {
            let entries = r.verified().map_err(|e| self.damaged(node, "log", e))?;
            out.extend(entries.map(str::to_string));
        }
        Ok(out)
    }

    /// The error for damaged data of `node`, naming the tree, the node and the file.
    fn damaged(&self, node: u64, what: &str, e: impl std::fmt::Display) -> SourceError {
        SourceError::Damaged(format!(
            "tree {}, node {node}: its {what} in {} is damaged ({e}); run `simtree data check`",
            self.tree, self.store.location
        ))
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_rows_round_trip_old_deflated_rows_still_read_and_damage_is_refused() {
        use std::io::Write as _;
        let big: Vec<u8> = (0..300_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for input in [b"{\"agents\":[]}".to_vec(), Vec::new(), big.clone(), big] {
            assert_eq!(unpack(&pack(&input)).unwrap(), input);
            // A row from before: raw deflate, read twice (the decompressor is reused).
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&input).unwrap();
            let old = e.finish().unwrap();
            assert_ne!(old.first(), Some(&LZ4_MARK));
            assert_eq!(unpack(&old).unwrap(), input);
            assert_eq!(unpack(&old).unwrap(), input);
        }
        // A row of the first LZ4 form (no checksum) is still read.
        let raw = b"{\"agents\":[1,2,3]}".repeat(50);
        let block = lz4_flex::block::compress(&raw);
        let mut v1 = vec![LZ4_MARK];
        v1.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        v1.extend_from_slice(&block);
        assert_eq!(unpack(&v1).unwrap(), raw);
        // Current rows carry a checksum: a flipped byte anywhere after the mark is an error, never
        // different bytes (a changed match offset may point at the same bytes: no harm).
        let packed = pack(&raw);
        assert_eq!(packed[0], LZ4_CRC_MARK);
        let mut found = 0;
        for at in 1..packed.len() {
            let mut bad = packed.clone();
            bad[at] ^= 0x20;
            match unpack(&bad) {
                Ok(out) => assert_eq!(out, raw, "a flipped byte at {at} gave different bytes"),
                Err(_) => found += 1,
            }
        }
        assert!(found > packed.len() / 2, "{found} of {}", packed.len());
        let packed = pack(&[7u8; 10_000]);
        assert!(unpack(&packed[..packed.len() / 2]).is_err(), "a cut block is an error");
        assert!(unpack(&[LZ4_MARK, 1]).is_err(), "no size");
        assert!(unpack(&[LZ4_CRC_MARK, 1, 0, 0, 0, 1]).is_err(), "no checksum");
        assert!(
            unpack(&[LZ4_MARK, 0xff, 0xff, 0xff, 0xff, 0]).is_err(),
            "an absurd size"
        );
        assert!(unpack(&[0xff, 0xff, 0xff]).is_err(), "garbage is an error");
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&[1u8; 10_000]).unwrap();
        let old = e.finish().unwrap();
        assert!(
            unpack(&old[..old.len() / 2]).is_err(),
            "a cut deflate stream is an error"
        );
        assert_eq!(unpack(&pack(b"after errors")).unwrap(), b"after errors");
    }

    fn sweep(tree: u64, id: u64, body: &str) -> Write {
        Write::Sweep {
            tree,
            id,
            body: body.into(),
        }
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
}

#[cfg(test)]
mod journal_tests {
    use super::*;

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
        store
            .read(|db| Ok(db.trees()?.into_iter().map(|t| t.name).collect()))
            .unwrap()
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
        let applied = sql::Db::new(sqlite::Sqlite::open(&dir.join("simtree.db")).unwrap())
            .journal_applied()
            .unwrap();
        let path = dir.join("simtree.journal");
        (dir, path, applied)
    }

    #[test]
    fn a_group_acknowledged_but_not_yet_in_the_database_is_applied_at_the_next_start() {
        // What a server killed between answering a flush and writing the group leaves behind:
        // the group in the journal, the database one group behind.
        let (dir, path, applied) = one_flushed_tree("replay");
        assert!(applied >= 1, "the flush went through the journal");
        let (mut j, pending) = Journal::open(&path, applied).unwrap();
        assert!(pending.is_empty(), "a closed store leaves nothing to replay");
        j.append(&[Write::Rename {
            tree: 1,
            name: "renamed".into(),
        }])
        .unwrap()
        .unwrap();
        j.append(&[Write::Tree(tree_row(2, "second"))]).unwrap().unwrap();
        drop(j);
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
        assert!(e.0.contains("is damaged") && e.0.contains("simtree data repair"), "{e}");
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
        let dir = std::env::temp_dir().join(format!("simtree-tree-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
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
        assert!(store.read(|db| db.nodes(2)).unwrap().is_empty());
        assert!(store.read(|db| db.abandoned_imports()).unwrap().is_empty());
        assert_eq!(store.read(|db| db.next_tree()).unwrap(), 3);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A database whose applies fail while `fail` is set; it keeps what it applied.
    #[derive(Default)]
    struct Flaky {
        fail: bool,
        applied: Vec<String>,
    }

    impl Database for Flaky {
        fn apply(&mut self, writes: &[Write]) -> StoreResult<()> {
            if self.fail {
                return Err(StoreError("disk full".into()));
            }
            self.applied.extend(writes.iter().map(|w| format!("{w:?}")));
            Ok(())
        }
        fn trees(&mut self) -> StoreResult<Vec<TreeRow>> {
            Ok(Vec::new())
        }
        fn nodes(&mut self, _: u64) -> StoreResult<Vec<NodeRow>> {
            Ok(Vec::new())
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
        fn interrupt_running(&mut self) -> StoreResult<u64> {
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
    fn an_acknowledged_group_that_fails_to_commit_is_retried_first_and_flushes_then_wait_for_commits() {
        let dir = std::env::temp_dir().join(format!("simtree-journal-retry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
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
        let rename = |name: &str| Write::Rename {
            tree: 1,
            name: name.into(),
        };
        // A flush through the journal needs no commit: it queues the group's mark.
        let mut queue = Vec::new();
        front.write(&mailbox, rename("a")).unwrap();
        assert!(front.flush(&mailbox));
        drain(&mailbox, &mut queue, &mut c);
        assert_eq!((queue.len(), c.last_seq), (1, Some(1)));
        // Log entries queued after it; the group commit fails: every write is kept with the
        // mark (the entries belong to a run whose end may still be acknowledged).
        front
            .write(
                &mailbox,
                Write::Log {
                    tree: 1,
                    node: 1,
                    index: 0,
                    count: 1,
                    entries: "x".into(),
                },
            )
            .unwrap();
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
        let _ = std::fs::remove_dir_all(&dir);
    }
}
