//! The store's thread: it takes queued writes, commits them in groups (a transaction at most
//! every 5 ms, or at once for a flush, a read or an attempt), keeps and retries what a failed
//! commit held, drops late writes for what was deleted, and renews the server lease.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Ack, Database, Ended, Front, Mailbox, Msg, StoreResult, Write};

/// Writes committed per transaction at most (a long queue is committed in steps).
const BATCH: usize = 4096;

/// How long writes nobody waits for may wait for company before they are committed.
const GROUP: std::time::Duration = std::time::Duration::from_millis(5);

/// How the store thread commits what is queued, and what it tells the journal.
pub(super) struct Committer {
    /// SQLite's journal side: told the last group the database has, and whether commits fail.
    pub(super) front: Option<Arc<Front>>,
    /// The queued writes are in the journal (their flushes were answered) up to group
    /// `last_seq`.
    pub(super) last_seq: Option<u64>,
    /// Writes whose commit failed, with their journal marks: retried first, with every later
    /// commit.
    pub(super) retained: Vec<Write>,
    /// Why the last commit failed, until one succeeds.
    pub(super) fault: Option<String>,
}

impl Committer {
    pub(super) fn new(front: Option<Arc<Front>>) -> Committer {
        Committer { front, last_seq: None, retained: Vec::new(), fault: None }
    }

    /// The writes queued so far are in the journal up to group `seq`.
    pub(super) fn mark(&mut self, seq: u64) {
        self.last_seq = Some(seq);
    }

    /// Commits everything queued (after any retained writes) and answers `flushes` with the
    /// outcome.
    pub(super) fn commit(&mut self, db: &mut dyn Database, writes: &mut Vec<Write>, flushes: &mut Vec<Ack>) {
        // (The outcome is told to the flushes.)
        let _ = self.commit_with(db, writes, flushes, Vec::new());
    }

    /// [`Self::commit`] with `attempt` in the same transaction, after the rest; when it fails
    /// the attempt is dropped rather than retained. The outcome, and on success the attempted
    /// writes back.
    pub(super) fn commit_with(
        &mut self,
        db: &mut dyn Database,
        writes: &mut Vec<Write>,
        flushes: &mut Vec<Ack>,
        attempt: Vec<Write>,
    ) -> (StoreResult<()>, Vec<Write>) {
        let mut all = std::mem::take(&mut self.retained);
        // The last group these writes complete: a retained one's mark, or the newest mark.
        let retained_seq = all.iter().rev().find_map(|w| match w {
            Write::Applied { seq } => Some(*seq),
            _ => None,
        });
        all.append(writes);
        let seq = self.last_seq.take();
        all.extend(seq.map(|seq| Write::Applied { seq }));
        let kept = all.len();
        all.extend(attempt);
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
                if self.fault.as_deref() != Some(e.message()) {
                    tracing::error!(error = %e, writes = all.len(), "store commit failed");
                }
                self.fault = Some(e.message().to_string());
                all.truncate(kept);
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
        let attempted = if result.is_ok() { all.split_off(kept) } else { Vec::new() };
        all.clear();
        *writes = all;
        for f in flushes.drain(..) {
            f(result.clone());
        }
        (result, attempted)
    }
}

/// The store thread: commits queued writes in batches, answers reads and flushes in order.
/// With a server lease of length `lease`, it is renewed every sixth of that (see
/// `store/lease.rs`), each renewal noted in the mailbox, and released when the store closes.
pub(super) fn run(
    db: &mut dyn Database,
    mailbox: &Mailbox,
    front: Option<Arc<Front>>,
    lease: Option<std::time::Duration>,
) {
    let heartbeat = lease.map(|length| length / 6);
    let renewed = |at: std::time::Instant| {
        if let Some(length) = lease {
            *mailbox.renewed.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, length));
            // A pause seen before this renewal began is over: the lease is still ours.
            let mut frozen = mailbox.frozen.lock().unwrap_or_else(|p| p.into_inner());
            if frozen.is_some_and(|f| f <= at) {
                *frozen = None;
            }
        }
    };
    // Taken just now, as the store opened.
    renewed(std::time::Instant::now());
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
            let began = std::time::Instant::now();
            match db.heartbeat() {
                Ok(()) if db.lease_lost().is_none() => renewed(began),
                Ok(()) => {}
                Err(e) => tracing::debug!(error = %e, "the server lease could not be renewed now"),
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
                Msg::Attempt(attempt, ack) => {
                    let (result, stored) = c.commit_with(db, &mut writes, &mut flushes, attempt);
                    oldest = None;
                    // Deletions count from their commit on (one refused never happened).
                    for w in &stored {
                        gone.admit(w);
                    }
                    ack(result);
                }
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
            mailbox.lease_lost.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(lost);
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
pub(super) struct Gone {
    nodes: std::collections::HashSet<(u64, u64)>,
    trees: std::collections::HashSet<u64>,
}

impl Gone {
    /// Records a deletion; returns false for a write about something already deleted.
    pub(super) fn admit(&mut self, w: &Write) -> bool {
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
            Write::Annotate { tree, node, .. }
            | Write::Text { tree, node, .. }
            | Write::Ask { tree, node, .. }
            | Write::Job { tree, node, .. } => self.live(*tree, *node),
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

/// A sweep's or exploration's row as (is an exploration, tree, id).
fn job_row(w: &Write) -> Option<(bool, u64, u64)> {
    match *w {
        Write::Sweep { tree, id, .. } => Some((false, tree, id)),
        Write::Explore { tree, id, .. } => Some((true, tree, id)),
        _ => None,
    }
}

/// Whether `w` deletes the rows of `row`'s kind in its tree.
fn deletes_job_rows(w: &Write, (explore, tree, _): (bool, u64, u64)) -> bool {
    match *w {
        Write::DeleteTree { tree: t } => t == tree,
        Write::DeleteSweep { tree: t, .. } => !explore && t == tree,
        Write::DeleteExplore { tree: t, .. } => explore && t == tree,
        _ => false,
    }
}

/// Queues a write, appending log entries to the previous write when they continue it (a run's
/// entries arrive one by one; a row holds a batch).
pub(super) fn push_merged(writes: &mut Vec<Write>, w: Write) {
    if let (
        Some(Write::Log { tree: t0, node: n0, index: i0, count: c0, entries: e0 }),
        Write::Log { tree, node, index, count, entries },
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
    // A sweep's or exploration's row is rewritten whole as each replicate ends: a queued one it
    // supersedes is replaced in place (unless a deletion for its tree comes after it).
    if let Some(row) = job_row(&w) {
        for queued in writes.iter_mut().rev() {
            if job_row(queued) == Some(row) {
                *queued = w;
                return;
            }
            if deletes_job_rows(queued, row) {
                break;
            }
        }
    }
    // A node's record is written when it is attached and again when its run ends, and a tree's
    // activity is touched by both, usually within one commit: the newer write replaces the
    // queued one in place (same end state, two statements fewer per run on PostgreSQL). Not
    // across anything that deletes, imports or rewrites the tree (or, for a node, deletes it).
    let key = match &w {
        Write::Node { tree, row } => Some((*tree, Some(row.id))),
        Write::Touch { tree, .. } => Some((*tree, None)),
        _ => None,
    };
    if let Some((tree, node)) = key
        && let Some(k) = superseded(writes, tree, node)
    {
        writes[k] = w;
        return;
    }
    writes.push(w);
}

/// Where a queued write that `w` replaces is (a [`Write::Node`] of node `node`, or a
/// [`Write::Touch`] of `tree` when `node` is `None`), if none of the writes after it stands in
/// the way.
fn superseded(writes: &[Write], tree: u64, node: Option<u64>) -> Option<usize> {
    for (k, queued) in writes.iter().enumerate().rev() {
        match queued {
            Write::Node { tree: t, row } if *t == tree && node == Some(row.id) => return Some(k),
            Write::Touch { tree: t, .. } if *t == tree && node.is_none() => return Some(k),
            Write::Tree(row) if row.id == tree => return None,
            Write::DeleteTree { tree: t }
            | Write::DeleteNodes { tree: t, .. }
            | Write::ImportBegin { tree: t }
            | Write::ImportEnd { tree: t }
                if *t == tree =>
            {
                return None;
            }
            _ => {}
        }
    }
    None
}
