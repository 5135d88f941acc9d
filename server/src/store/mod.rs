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

mod journal;
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
    DeleteTree {
        tree: u64,
    },
    /// Records that the journal's groups up to `seq` are in the database (SQLite only; the last
    /// write of a journaled group's transaction).
    Applied {
        seq: u64,
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

/// What a backend does; called only from the store's thread.
pub trait Database: Send {
    fn apply(&mut self, writes: &[Write]) -> StoreResult<()>;
    fn trees(&mut self) -> StoreResult<Vec<TreeRow>>;
    fn nodes(&mut self, tree: u64) -> StoreResult<Vec<NodeRow>>;
    fn state(&mut self, tree: u64, node: u64) -> StoreResult<Option<Vec<u8>>>;
    /// Every chunk written by one of `nodes`.
    fn chunks(&mut self, tree: u64, nodes: &[u64]) -> StoreResult<Vec<(ChunkKey, Vec<u8>)>>;
    /// A node's log rows, in order (each holds one or more entries, one per line).
    fn log(&mut self, tree: u64, node: u64) -> StoreResult<Vec<String>>;
    /// A tree's sweeps (JSON bodies), in id order.
    fn sweeps(&mut self, tree: u64) -> StoreResult<Vec<String>>;
    /// Marks nodes whose run was in flight when the last server stopped; returns how many.
    fn interrupt_running(&mut self) -> StoreResult<u64>;
}

type Job = Box<dyn FnOnce(&mut dyn Database) + Send>;

/// Told how the commit holding the writes before a flush went.
type Ack = Box<dyn FnOnce(StoreResult<()>) + Send>;

enum Msg {
    Write(Write),
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
    /// `sqlite:<file>` or `postgresql` (the URL is not repeated: it may hold a password).
    pub location: String,
}

use std::sync::Mutex;

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
        let mut db = sql::Db {
            sql: sqlite::Sqlite::open(&file)?,
        };
        db.migrate()?;
        let journal = replay(&mut db, &dir.join("simtree.journal"))?;
        Store::start(Box::new(db), format!("sqlite:{}", file.display()), journal)
    }

    pub fn open_postgres(url: &str) -> StoreResult<Store> {
        let url = url.to_string();
        // The client is created on the store's thread: it must never run inside the server's runtime.
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("simtree-store".into())
            .spawn(move || {
                let db = postgres::Postgres::connect(&url).map(|sql| sql::Db { sql });
                match db {
                    Ok(mut db) => match db.migrate() {
                        Ok(()) => {
                            let mailbox = Arc::new(Mailbox::default());
                            let _ = tx.send(Ok(mailbox.clone()));
                            run(&mut db, &mailbox, None);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    },
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
            location: "postgresql".into(),
        })
    }

    fn start<D: Database + 'static>(mut db: Box<D>, location: String, journal: Journal) -> StoreResult<Store> {
        let mailbox = Arc::new(Mailbox::default());
        let theirs = mailbox.clone();
        let thread = std::thread::Builder::new()
            .name("simtree-store".into())
            .spawn(move || run(&mut *db, &theirs, Some(journal)))
            .map_err(|e| StoreError(e.to_string()))?;
        Ok(Store {
            mailbox,
            thread: Some(thread),
            location,
        })
    }

    fn send(&self, msg: Msg) -> StoreResult<()> {
        self.mailbox.post(msg)
    }

    /// Queues a write (committed with the next batch).
    pub fn write(&self, w: Write) {
        if self.send(Msg::Write(w)).is_err() {
            tracing::error!("store thread gone: a write was lost");
        }
    }

    /// Waits until every write queued so far is committed.
    pub fn flush(&self) -> StoreResult<()> {
        let (tx, rx) = mpsc::channel();
        self.send(Msg::Flush(Box::new(move |r| {
            let _ = tx.send(r);
        })))?;
        blocking(|| rx.recv().map_err(|_| StoreError("the store thread ended".into()))?)
    }

    /// [`Self::flush`] without blocking a runtime thread.
    pub async fn flush_async(&self) -> StoreResult<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Msg::Flush(Box::new(move |r| {
            let _ = tx.send(r);
        })))?;
        rx.await.map_err(|_| StoreError("the store thread ended".into()))?
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
            let wake = !(inbox.lingering && matches!(msg, Msg::Write(_)));
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
/// stopped between acknowledging them and writing them), then empties it.
fn replay<S: sql::Sql>(db: &mut sql::Db<S>, path: &Path) -> StoreResult<Journal> {
    let (mut journal, pending) = Journal::open(path, db.journal_applied()?)?;
    let groups = pending.len();
    for (seq, mut writes) in pending {
        writes.push(Write::Applied { seq });
        if let Err(e) = db.apply(&writes) {
            let aside = journal.set_aside()?;
            tracing::error!(seq, error = %e, kept = %aside.display(), "journal: a group could not be applied; the journal was set aside");
            return Ok(journal);
        }
    }
    if groups > 0 {
        tracing::warn!(
            groups,
            "journal: applied the groups the last server acknowledged but had not yet written"
        );
    }
    journal.clear()?;
    Ok(journal)
}

/// How the store thread makes writes durable and commits them.
///
/// With a journal (SQLite), a flush appends the queued writes not yet journaled as one group and
/// answers its waiters at once; the writes stay queued and are committed to the database with
/// whatever follows them, when the group-commit deadline passes, a read comes, the queue is long
/// or the store closes — one transaction for many runs' ends instead of one each. Without one
/// (PostgreSQL, or a group too large to journal), a flush commits the queue and answers with the
/// outcome.
struct Committer {
    journal: Option<Journal>,
    /// `writes[..journaled]` are in the journal (their waiters were answered), the last of
    /// them in group `last_seq`.
    journaled: usize,
    last_seq: Option<u64>,
    /// Journaled writes whose commit failed: retried first, with every later commit. Until they
    /// are in the database the journal is not used (waiters hear how their own commit went) nor
    /// emptied (a restart replays them).
    retained: Vec<Write>,
}

impl Committer {
    fn new(journal: Option<Journal>) -> Committer {
        Committer {
            journal,
            journaled: 0,
            last_seq: None,
            retained: Vec::new(),
        }
    }

    /// Makes the queued writes durable and answers `flushes`.
    fn flush(&mut self, db: &mut dyn Database, writes: &mut Vec<Write>, flushes: &mut Vec<Ack>) {
        if let (true, Some(j)) = (self.retained.is_empty(), &mut self.journal) {
            let new = &writes[self.journaled..];
            let appended = if new.is_empty() {
                Ok(self.last_seq)
            } else {
                j.append(new)
            };
            match appended {
                Ok(seq) if new.is_empty() || seq.is_some() => {
                    self.journaled = writes.len();
                    self.last_seq = seq;
                    for f in flushes.drain(..) {
                        f(Ok(()));
                    }
                    return;
                }
                // Too large to journal: committed before the waiters hear, as without a journal.
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "journal append failed; committing directly"),
            }
        }
        self.commit(db, writes, flushes);
    }

    /// Commits everything queued (after any retained writes) and answers `flushes` with the
    /// outcome.
    fn commit(&mut self, db: &mut dyn Database, writes: &mut Vec<Write>, flushes: &mut Vec<Ack>) {
        let mut all = std::mem::take(&mut self.retained);
        let acknowledged = all.len() + std::mem::take(&mut self.journaled);
        all.append(writes);
        let seq = self.last_seq.take();
        all.extend(seq.map(|seq| Write::Applied { seq }));
        let result = if all.is_empty() { Ok(()) } else { db.apply(&all) };
        match &result {
            Ok(()) => {
                if let Some(j) = &mut self.journal {
                    j.all_applied();
                }
            }
            Err(e) => {
                tracing::error!(error = %e, writes = all.len(), "store commit failed");
                // The journaled writes were acknowledged: kept, with their mark, and retried.
                all.truncate(acknowledged);
                all.extend(seq.map(|seq| Write::Applied { seq }));
                self.retained = std::mem::take(&mut all);
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
fn run(db: &mut dyn Database, mailbox: &Mailbox, journal: Option<Journal>) {
    let _ended = Ended(mailbox);
    // What was deleted: a run stopped by a deletion may still queue a few log entries after it,
    // and they must not leave rows behind (ids are never reused, so this is exact).
    let mut gone = Gone::default();
    let mut writes: Vec<Write> = Vec::new();
    let mut flushes: Vec<Ack> = Vec::new();
    let mut c = Committer::new(journal);
    // Group commit: writes linger up to GROUP so that they share a transaction with what follows.
    // A flush makes them durable at once (in the journal, or by committing them); a read, a long
    // queue or the deadline commits them.
    let mut oldest: Option<std::time::Instant> = None;
    while let Some(msgs) = mailbox.take(oldest.map(|t| t + GROUP)) {
        for msg in msgs {
            match msg {
                Msg::Write(w) => {
                    if gone.admit(&w) {
                        push_merged(&mut writes, w, c.journaled);
                        oldest.get_or_insert_with(std::time::Instant::now);
                    }
                }
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
        if due || writes.is_empty() {
            c.commit(db, &mut writes, &mut flushes);
            oldest = None;
        } else if !flushes.is_empty() {
            c.flush(db, &mut writes, &mut flushes);
            if writes.is_empty() {
                oldest = None;
            }
        }
    }
    c.commit(db, &mut writes, &mut flushes);
    // Closed with everything committed: the journal has nothing a restart would need.
    if c.retained.is_empty()
        && let Some(j) = &mut c.journal
        && let Err(e) = j.clear()
    {
        tracing::warn!(error = %e, "journal");
    }
}

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
            Write::Applied { .. } => true,
            Write::Rename { tree, .. }
            | Write::Touch { tree, .. }
            | Write::Sweep { tree, .. }
            | Write::DeleteSweep { tree, .. } => !self.trees.contains(tree),
        }
    }

    fn live(&self, tree: u64, node: u64) -> bool {
        !self.trees.contains(&tree) && !self.nodes.contains(&(tree, node))
    }
}

/// Queues a write, appending log entries to the previous write when they continue it (a run's
/// entries arrive one by one; a row holds a batch). Writes before `floor` are in the journal
/// already and stay as they are.
fn push_merged(writes: &mut Vec<Write>, w: Write, floor: usize) {
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
    ) = (writes[floor..].last_mut(), &w)
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
        for queued in writes[floor..].iter_mut().rev() {
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
    writes.push(w);
}

// ---- states ----

/// The first byte of a row in the current form: an LZ4 block follows, after its size (u32, little
/// endian). No raw deflate stream — the form of rows written before — can start with it: its
/// block type bits (1–2) are 11, which deflate reserves.
const LZ4_MARK: u8 = 0x06;

/// Rows larger than this once unpacked are refused as damaged (a state or chunk is kilobytes).
const MAX_UNPACKED: usize = 1 << 30;

/// A state or chunk as the store writes it. LZ4 rather than deflate: a node's state is a few
/// kilobytes written while its run waits for the commit, and LZ4 packs it in microseconds where
/// deflate took tens (with a fresh encoder, hundreds: it allocates and clears its tables).
fn pack(bytes: &[u8]) -> Vec<u8> {
    let block = lz4_flex::block::compress(bytes);
    let mut out = Vec::with_capacity(5 + block.len());
    out.push(LZ4_MARK);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&block);
    out
}

/// The inverse of [`pack`]; also reads the deflated rows that earlier versions wrote.
fn unpack(bytes: &[u8]) -> StoreResult<Vec<u8>> {
    let [LZ4_MARK, rest @ ..] = bytes else {
        return inflate(bytes);
    };
    let (size, block) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| StoreError("corrupt packed data: no size".into()))?;
    let size = u32::from_le_bytes(*size) as usize;
    if size > MAX_UNPACKED {
        return Err(StoreError(format!("corrupt packed data: it claims {size} bytes")));
    }
    lz4_flex::block::decompress(block, size).map_err(|e| StoreError(format!("corrupt packed data: {e}")))
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
    pub fn state(&self, node: u64, path: &[u64]) -> StoreResult<Option<(Sim, usize)>> {
        let tree = self.tree;
        let Some(data) = self.store.read(move |db| db.state(tree, node))? else {
            return Ok(None);
        };
        let json = unpack(&data)?;
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
                    let bytes = unpack(&bytes)?;
                    cost += bytes.len();
                    raw.insert(key, Arc::from(bytes));
                }
                parse(raw).ok_or_else(|| StoreError(format!("node {node}: a chunk of its state is missing")))?
            }
        };
        let mut sim = sim.map_err(|e| StoreError(format!("node {node}: state: {e}")))?;
        sim.attach(self.market.as_ref());
        self.pressure.add(cost);
        Ok(Some((sim, cost)))
    }

    /// A node's stored log entries.
    pub fn log(&self, node: u64) -> StoreResult<Vec<String>> {
        let tree = self.tree;
        let rows = self.store.read(move |db| db.log(tree, node))?;
        self.pressure.add(rows.iter().map(String::len).sum());
        Ok(rows
            .iter()
            .flat_map(|r| r.split('\n'))
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect())
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
        let packed = pack(&[7u8; 10_000]);
        assert!(unpack(&packed[..packed.len() / 2]).is_err(), "a cut block is an error");
        assert!(unpack(&[LZ4_MARK, 1]).is_err(), "no size");
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
            push_merged(&mut w, x, 0);
        }
        assert_eq!(bodies(&w), ["1/0:c", "1/1:b"]);
        push_merged(&mut w, Write::DeleteSweep { tree: 1, id: 1 }, 0);
        push_merged(&mut w, sweep(1, 1, "d"), 0);
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
        }
    }

    fn names(store: &Store) -> Vec<String> {
        store
            .read(|db| Ok(db.trees()?.into_iter().map(|t| t.name).collect()))
            .unwrap()
    }

    #[test]
    fn a_group_acknowledged_but_not_yet_in_the_database_is_applied_at_the_next_start() {
        let dir = std::env::temp_dir().join(format!("simtree-journal-replay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open_sqlite(&dir).unwrap();
        store.write(Write::Tree(tree_row(1, "first")));
        store.flush().unwrap();
        drop(store);
        // What a server killed between answering a flush and writing the group leaves behind:
        // the group in the journal, the database one group behind.
        let path = dir.join("simtree.journal");
        let mut db = sql::Db {
            sql: sqlite::Sqlite::open(&dir.join("simtree.db")).unwrap(),
        };
        let applied = db.journal_applied().unwrap();
        assert!(applied >= 1, "the flush went through the journal");
        drop(db);
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
        fn log(&mut self, _: u64, _: u64) -> StoreResult<Vec<String>> {
            Ok(Vec::new())
        }
        fn sweeps(&mut self, _: u64) -> StoreResult<Vec<String>> {
            Ok(Vec::new())
        }
        fn interrupt_running(&mut self) -> StoreResult<u64> {
            Ok(0)
        }
    }

    fn waiter(out: &Arc<Mutex<Vec<bool>>>) -> Ack {
        let out = out.clone();
        Box::new(move |r| out.lock().unwrap().push(r.is_ok()))
    }

    #[test]
    fn an_acknowledged_group_that_fails_to_apply_is_retried_first_and_waiters_then_hear_the_truth() {
        let dir = std::env::temp_dir().join(format!("simtree-journal-retry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (journal, _) = Journal::open(&dir.join("simtree.journal"), 0).unwrap();
        let mut c = Committer::new(Some(journal));
        let mut db = Flaky {
            fail: true,
            ..Flaky::default()
        };
        let heard = Arc::new(Mutex::new(Vec::new()));
        let rename = |name: &str| Write::Rename {
            tree: 1,
            name: name.into(),
        };
        let heard_now = |h: &Arc<Mutex<Vec<bool>>>| h.lock().unwrap().clone();
        // A flush journals the queue and answers at once; the writes stay queued.
        let mut queue = vec![rename("a")];
        c.flush(&mut db, &mut queue, &mut vec![waiter(&heard)]);
        assert_eq!(heard_now(&heard), [true]);
        assert_eq!((queue.len(), c.journaled), (1, 1));
        // Log entries that continue a journaled row start a row of their own.
        let log = |index, entries: &str| Write::Log {
            tree: 1,
            node: 1,
            index,
            count: 1,
            entries: entries.into(),
        };
        push_merged(&mut queue, log(0, "x"), c.journaled);
        c.flush(&mut db, &mut queue, &mut vec![waiter(&heard)]);
        push_merged(&mut queue, log(1, "y"), c.journaled);
        assert_eq!(queue.len(), 3, "the journaled row is left as it was journaled");
        // The deadline's commit fails: the journaled writes are kept with their mark; the
        // unjournaled entry is dropped, as a failed commit drops writes nobody waits for.
        db.fail = true;
        c.commit(&mut db, &mut queue, &mut Vec::new());
        assert!(queue.is_empty());
        assert_eq!(c.retained.len(), 3, "two journaled writes and the journal mark");
        assert!(matches!(c.retained.last(), Some(Write::Applied { seq: 2 })));
        // While they are kept the journal is not used: the next waiter hears the failure, its
        // writes are dropped, the kept ones stay.
        c.flush(&mut db, &mut vec![rename("b")], &mut vec![waiter(&heard)]);
        assert_eq!(heard_now(&heard), [true, true, false]);
        assert_eq!(c.retained.len(), 3);
        // Recovered: the kept writes go first, then the new one, in one transaction.
        db.fail = false;
        c.flush(&mut db, &mut vec![rename("c")], &mut vec![waiter(&heard)]);
        assert_eq!(heard_now(&heard), [true, true, false, true]);
        assert!(c.retained.is_empty());
        let applied: Vec<&str> = db.applied.iter().map(|w| w.split([' ', '{']).next().unwrap()).collect();
        assert_eq!(applied, ["Rename", "Log", "Applied", "Rename"]);
        assert!(db.applied[0].contains("\"a\"") && db.applied[3].contains("\"c\""));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
