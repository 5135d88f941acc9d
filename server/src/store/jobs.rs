//! The run queue (issue 26, item 3): runs as rows that any process sharing a PostgreSQL
//! database can take, on the store's own client (tokio-postgres) — no second client or pool.
//!
//! A job is the run of one node, so it is keyed by `(tree, node)`. Its life:
//!
//! - **queued** — written by [`enqueue`] inside the write transaction that attaches the node
//!   (nothing runs a node that is not stored), with a `NOTIFY simtree_jobs` delivered at commit.
//! - **claimed** — [`claim`] takes up to n queued jobs, and claimed ones whose heartbeat lapsed,
//!   with `SELECT … FOR UPDATE SKIP LOCKED` (concurrent claimers skip each other's rows, so no
//!   job is taken twice), counting an attempt each time. The claimer renews `heartbeat_at` (the
//!   database's clock, as the server lease is timed) every sixth of its lapse.
//! - **done** / **failed** — [`finish`] ends it, fenced by `claimed_by`: a worker that lost its
//!   claim (it stopped heartbeating and another took it) has its commit refused, together with
//!   the node's rows it wrote in the same transaction. `failed` is a run that ended in an error
//!   (its node fails, as in-process); [`retry`] puts a job back for another attempt instead.
//! - **dead** — a job whose attempts reached `max_attempts` and whose worker stopped again (or
//!   was retried once more) is given up with an error saying so, never retried forever: a job
//!   that crashes every worker that takes it ends here.
//!
//! A job's `kind` is `run`, or [`ABM`] for a run of an agent-based model: a claimer takes each
//! kind into slots of its own ([`Slots`]; ABM slots are its Mesa pool's workers, offered in its
//! `workers` row).
//!
//! The serving process learns of ended jobs from the notification
//! (`done:<tree>:<node>:<status>`: a job done needs no read), or by polling [`ended`] when it
//! missed one, and [`forget`]s a job once its node shows the outcome.
//! A worker stopped gracefully hands its claims back ([`release`]: queued, attempts unchanged).
//!
//! A budgeted tree's spending is booked here too (schema 17), so that runs on several processes
//! charge one budget: [`budget_hold`] counts a call and holds its most possible cost in one
//! statement that updates the tree's row only when the call fits, [`budget_settle`] charges what
//! it cost, and a hold lapses with its job's claim (a dead worker's holds return when its job is
//! re-claimed) or, made on a leader, when the next leader starts. A budget is booked by its
//! [`BudgetKey`]: a tree's own (part 0), or an exploration's own caps within it (schema 18).
//!
//! The SQL is PostgreSQL's (`FOR UPDATE SKIP LOCKED`, `pg_notify`); SQLite has the tables (one
//! migration list for both) but its single process never uses them.

use std::time::Duration;

use super::lease::Lease;
pub(crate) use super::sql::{BudgetKey, QUEUED};
use super::sql::{CHANNEL, Db, enqueue, node_columns_of, node_of};
use super::vocab::{Cell, P, Sql, i};
use super::{Database, LogRow, NodeRow, StoreError, StoreResult, Write};
use crate::llm::budget::{Limits, Refusal, Totals};

/// The channel a worker tells the serving process on that a running node's log grew
/// (`<tree>:<node>`), so that it relays the new entries to the node's watchers.
pub(crate) const LOG_CHANNEL: &str = "simtree_log";
/// How long a claim lasts without a heartbeat (`--job-lapse-secs`).
pub(crate) const DEFAULT_LAPSE: Duration = Duration::from_secs(10);
/// How many times a job is tried before it is given up (dead).
pub(crate) const DEFAULT_MAX_ATTEMPTS: u64 = 3;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Queued,
    Claimed,
    Done,
    Failed,
    Dead,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Claimed => "claimed",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Dead => "dead",
        }
    }

    fn parse(s: &str) -> StoreResult<Status> {
        Ok(match s {
            "queued" => Status::Queued,
            "claimed" => Status::Claimed,
            "done" => Status::Done,
            "failed" => Status::Failed,
            "dead" => Status::Dead,
            other => return Err(StoreError::Corrupt(format!("unknown job status {other:?}"))),
        })
    }
}

/// A job as a claimer gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub tree: u64,
    pub node: u64,
    /// What to do (`run`), and its parameters (JSON).
    pub(crate) kind: String,
    pub(crate) payload: String,
    /// Claims so far, this one included.
    pub attempts: u64,
    max_attempts: u64,
    /// The node's record as the claim read it (its parent and the node are committed with or
    /// before the job): the worker needs no read of its own. `None`: gone, or damaged.
    pub(crate) attached: Option<NodeRow>,
}

/// A job's row, as [`row`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub(crate) tree: u64,
    pub node: u64,
    pub status: Status,
    pub attempts: u64,
    max_attempts: u64,
    pub claimed_by: Option<String>,
    pub error: Option<String>,
}

/// A cancelled job's row: `failed` with the error [`CANCELLED`] (as [`cancel`] writes it).
const CANCELLED: &str = "cancelled";

impl JobRow {
    /// The row of a job done, as its end's notification tells it (`done:<tree>:<node>:done`):
    /// what a leader needs of it without reading it.
    pub(crate) fn done(tree: u64, node: u64) -> JobRow {
        JobRow { tree, node, status: Status::Done, attempts: 0, max_attempts: 0, claimed_by: None, error: None }
    }

    /// Whether the job was cancelled ([`cancel`]) rather than failed by its run.
    pub(crate) fn cancelled(&self) -> bool {
        self.status == Status::Failed && self.error.as_deref() == Some(CANCELLED)
    }
}

fn int(c: Cell) -> u64 {
    match c {
        Cell::Int(v) => v.max(0) as u64,
        _ => 0,
    }
}

/// The first cell of the first row of a query's rows, as a count (0 when there is none).
fn first_int(rows: Vec<Vec<Cell>>) -> u64 {
    rows.into_iter().next().and_then(|r| r.into_iter().next()).map_or(0, int)
}

fn text(c: Cell) -> Option<String> {
    match c {
        Cell::Text(t) => Some(t),
        _ => None,
    }
}

/// Queues, in the write transaction under way, the deletion of a node's log rows and of the
/// search text made from them.
fn clear_log<S: Sql>(sql: &mut S, tree: u64, node: u64) -> StoreResult<()> {
    sql.write("DELETE FROM logs WHERE tree = $1 AND node = $2", &[i(tree), i(node)])?;
    sql.write("DELETE FROM texts WHERE tree = $1 AND node = $2 AND kind = 'event'", &[i(tree), i(node)])
}

/// Gives up, with an error saying why, the jobs whose claimer stopped heartbeating after their
/// last allowed attempt; returns them. Rows another claimer has locked are skipped (it is
/// burying or claiming them).
fn bury<S: Sql>(sql: &mut S, lapse: Duration) -> StoreResult<Vec<(u64, u64)>> {
    let now = sql.now_ms_sql();
    let rows = sql.query(
        &format!(
            "UPDATE jobs SET status = 'dead', claimed_by = NULL, updated = {now},
                error = 'given up after ' || attempts || ' attempts: the process running it stopped each time (crashed or killed) without finishing it'
             WHERE (tree, node) IN (
                SELECT tree, node FROM jobs
                WHERE status = 'claimed' AND heartbeat_at < {now} - $1 AND attempts >= max_attempts
                FOR UPDATE SKIP LOCKED)
             RETURNING tree, node"
        ),
        &[P::Int(lapse.as_millis() as i64)],
    )?;
    if !rows.is_empty() {
        sql.execute(&format!("SELECT pg_notify('{CHANNEL}', 'ended')"), &[])?;
    }
    Ok(rows
        .into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            (int(r.next().unwrap_or(Cell::Null)), int(r.next().unwrap_or(Cell::Null)))
        })
        .collect())
}

/// The kind of the jobs that run an agent-based model: only processes with a Mesa pool take
/// them, as many at once as their pool has workers ([`Slots::abm`]). Every other job is `run`.
pub const ABM: &str = "abm";

/// How many lapses a process's last heartbeat may be old and the process still counts as one
/// that takes jobs (a busy machine delays heartbeats; a dead process drops out after this).
const ALIVE: i64 = 3;

/// How many jobs a claimer takes at most: runs of any kind but agent-based models, and runs of
/// agent-based models ([`ABM`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Slots {
    pub(crate) runs: u64,
    pub(crate) abm: u64,
    /// Its ABM slots are used only while no `worker` process offering some is alive (a
    /// server's own worker: agent-based models go to the workers when there are any).
    pub(crate) abm_second: bool,
}

/// Claims up to `slots` jobs for `me`: queued ones, oldest first, and claimed ones whose
/// claimer's heartbeat is older than `me.length` (it stopped: crashed, killed, cut off). Each
/// claim counts an attempt; a lapsed job out of attempts is never claimed again (its
/// claimer's [`Queue`] gives it up, dead, at its next claim at most half a lapse later).
pub(crate) fn claim<S: Sql>(sql: &mut S, me: &Lease, slots: Slots) -> StoreResult<Vec<Job>> {
    if slots.runs == 0 && slots.abm == 0 {
        return Ok(Vec::new());
    }
    let lapse = me.length.as_millis() as i64;
    let now = sql.now_ms_sql();
    let takeable = format!(
        "(status = 'queued' OR (status = 'claimed' AND heartbeat_at < {now} - $2 AND attempts < max_attempts))"
    );
    let rows = sql.query(
        &format!(
            "WITH runs AS (SELECT tree, node FROM jobs WHERE kind <> '{ABM}' AND {takeable}
                   ORDER BY created, tree, node LIMIT $3 FOR UPDATE SKIP LOCKED),
                  abm AS (SELECT tree, node FROM jobs WHERE kind = '{ABM}' AND {takeable}
                   AND NOT ($5 = 1 AND EXISTS (SELECT 1 FROM workers w
                       WHERE w.role = 'worker' AND w.abm > 0 AND w.heartbeat_at >= {now} - {ALIVE} * $2))
                   ORDER BY created, tree, node LIMIT $4 FOR UPDATE SKIP LOCKED)
             UPDATE jobs j SET status = 'claimed', claimed_by = $1, heartbeat_at = {now}, updated = {now},
                attempts = j.attempts + 1
             FROM (SELECT p.tree AS job_tree, p.node AS job_node, {node}
                   FROM (SELECT tree, node FROM runs UNION ALL SELECT tree, node FROM abm) p
                   LEFT JOIN nodes n ON n.tree = p.tree AND n.id = p.node) picked
             WHERE j.tree = picked.job_tree AND j.node = picked.job_node
             RETURNING j.tree, j.node, j.kind, j.payload, j.attempts, j.max_attempts, {returned}",
            node = node_columns_of("n"),
            returned = node_columns_of("picked"),
        ),
        &[P::Text(&me.holder), P::Int(lapse), i(slots.runs), i(slots.abm), P::Int(i64::from(slots.abm_second))],
    )?;
    let mut jobs: Vec<Job> = rows
        .into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            let mut next = || r.next().unwrap_or(Cell::Null);
            Ok(Job {
                tree: int(next()),
                node: int(next()),
                kind: text(next()).unwrap_or_default(),
                payload: text(next()).unwrap_or_default(),
                attempts: int(next()),
                max_attempts: int(next()),
                attached: node_of(&mut next)?,
            })
        })
        .collect::<StoreResult<_>>()?;
    jobs.sort_by_key(|j| (j.tree, j.node));
    Ok(jobs)
}

/// Renews `me`'s claims and its `workers` row; returns the jobs it still holds (one taken over
/// by another claimer after a lapse is not among them: its run should stop).
pub(crate) fn heartbeat<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<Vec<(u64, u64)>> {
    let now = sql.now_ms_sql();
    sql.execute(&format!("UPDATE workers SET heartbeat_at = {now} WHERE holder = $1"), &[P::Text(&me.holder)])?;
    let rows = sql.query(
        &format!(
            "UPDATE jobs SET heartbeat_at = {now} WHERE claimed_by = $1 AND status = 'claimed' RETURNING tree, node"
        ),
        &[P::Text(&me.holder)],
    )?;
    let mut held: Vec<(u64, u64)> = rows
        .into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            (int(r.next().unwrap_or(Cell::Null)), int(r.next().unwrap_or(Cell::Null)))
        })
        .collect();
    held.sort_unstable();
    Ok(held)
}

/// Queues, in the write transaction under way, the end of `me`'s job of `node` as `status`
/// (done or failed) with `error`: refused at commit (division by zero) when the job is not
/// `me`'s claim any more, so that the node's rows written beside it are not committed either.
pub(crate) fn fence_finish<S: Sql>(
    sql: &mut S,
    me: &Lease,
    tree: u64,
    node: u64,
    status: Status,
    error: Option<&str>,
) -> StoreResult<()> {
    let now = sql.now_ms_sql();
    sql.write(
        &format!(
            "WITH mine AS (UPDATE jobs SET status = $1, error = $2, claimed_by = NULL, updated = {now}
                WHERE tree = $3 AND node = $4 AND claimed_by = $5 AND status = 'claimed' RETURNING 1)
             SELECT 1 / (SELECT COUNT(*)::INT FROM mine)"
        ),
        &[P::Text(status.as_str()), P::OptText(error), i(tree), i(node), P::Text(&me.holder)],
    )?;
    // (The payload is a parameter: one prepared statement serves every job's end. It names
    // the status, so that a leader waiting for a job that is done need not read the queue.)
    let done = format!("done:{tree}:{node}:{}", status.as_str());
    sql.write("SELECT pg_notify($1, $2)", &[P::Text(CHANNEL), P::Text(&done)])
}

/// Puts `me`'s job of `node` back for another attempt after a failure that may pass (`error`
/// says what happened), or gives it up (dead, with `error`) when it has had its attempts.
/// `None` when the job is not `me`'s any more.
pub(crate) fn retry<S: Sql>(sql: &mut S, me: &Lease, tree: u64, node: u64, error: &str) -> StoreResult<Option<Status>> {
    let now = sql.now_ms_sql();
    let rows = sql.query(
        &format!(
            "UPDATE jobs SET claimed_by = NULL, updated = {now},
                status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
                error = CASE WHEN attempts >= max_attempts THEN 'given up after ' || attempts || ' attempts: ' || $1 ELSE $1 END
             WHERE tree = $2 AND node = $3 AND claimed_by = $4 AND status = 'claimed' RETURNING status"
        ),
        &[P::Text(error), i(tree), i(node), P::Text(&me.holder)],
    )?;
    let status = match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
        Some(Cell::Text(s)) => Status::parse(&s)?,
        _ => return Ok(None),
    };
    sql.execute(&format!("SELECT pg_notify('{CHANNEL}', '{QUEUED}')"), &[])?;
    Ok(Some(status))
}

/// Hands every claim of `me` back (a graceful stop): queued again, the attempt not counted.
/// Returns how many.
pub(crate) fn release<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<u64> {
    let now = sql.now_ms_sql();
    let n = sql.execute(
        &format!(
            "UPDATE jobs SET status = 'queued', claimed_by = NULL, updated = {now}, attempts = GREATEST(attempts - 1, 0)
             WHERE claimed_by = $1 AND status = 'claimed'"
        ),
        &[P::Text(&me.holder)],
    )?;
    if n > 0 {
        sql.execute(&format!("SELECT pg_notify('{CHANNEL}', '{QUEUED}')"), &[])?;
    }
    Ok(n)
}

/// Jobs that ended (done, failed or dead) and are not yet forgotten: what the serving process
/// has to show on its nodes.
pub(crate) fn ended<S: Sql>(sql: &mut S) -> StoreResult<Vec<JobRow>> {
    rows(sql, "WHERE status IN ('done', 'failed', 'dead') ORDER BY tree, node", &[])
}

/// One job's row.
pub(crate) fn row<S: Sql>(sql: &mut S, tree: u64, node: u64) -> StoreResult<Option<JobRow>> {
    Ok(rows(sql, "WHERE tree = $1 AND node = $2", &[i(tree), i(node)])?.into_iter().next())
}

fn rows<S: Sql>(sql: &mut S, filter: &str, params: &[P<'_>]) -> StoreResult<Vec<JobRow>> {
    let rows = sql.query(
        &format!("SELECT tree, node, status, attempts, max_attempts, claimed_by, error FROM jobs {filter}"),
        params,
    )?;
    rows.into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            let mut next = || r.next().unwrap_or(Cell::Null);
            Ok(JobRow {
                tree: int(next()),
                node: int(next()),
                status: Status::parse(&text(next()).unwrap_or_default())?,
                attempts: int(next()),
                max_attempts: int(next()),
                claimed_by: text(next()),
                error: text(next()),
            })
        })
        .collect()
}

/// Stops the job of `node` where it is (queued or claimed: its claimer's result will be refused
/// and its heartbeat tells it to stop): failed, `cancelled`. False when it had ended already.
pub(crate) fn cancel<S: Sql>(sql: &mut S, tree: u64, node: u64) -> StoreResult<bool> {
    let now = sql.now_ms_sql();
    let n = sql.execute(
        &format!(
            "UPDATE jobs SET status = 'failed', error = $3, claimed_by = NULL, updated = {now}
             WHERE tree = $1 AND node = $2 AND status IN ('queued', 'claimed')"
        ),
        &[i(tree), i(node), P::Text(CANCELLED)],
    )?;
    Ok(n == 1)
}

/// What a serving process starting on the database takes over from the one before (see
/// `workbench/jobs.rs`, adoption): the jobs whose node is stored `running`, whatever their status
/// (a queued or claimed one is still run by workers; one that ended meanwhile is shown on its node
/// by the new server), as `(tree, node, payload)`. Every other job, and its recorded calls, is
/// forgotten: its node ended (its end is stored with it) or is gone. Sweeps' and explorations'
/// replicates are adopted like any run: the next server carries the sweep or exploration on and
/// waits for them (`workbench/sweep.rs`, `continue_sweeps`; `workbench/explore.rs`,
/// `continue_explores`).
pub(crate) fn adoptable<S: Sql>(sql: &mut S) -> StoreResult<Vec<(u64, u64, String)>> {
    const NODE_RUNS: &str = "SELECT 1 FROM nodes n WHERE n.tree = j.tree AND n.id = j.node AND n.status = 'running'";
    sql.execute(&format!("DELETE FROM job_calls j WHERE NOT EXISTS ({NODE_RUNS})"), &[])?;
    sql.execute(&format!("DELETE FROM jobs j WHERE NOT EXISTS ({NODE_RUNS})"), &[])?;
    // The last leader's budget holds lapse with it, and those of jobs no longer claimed.
    release_lapsed_holds(sql, None, true)?;
    let rows = sql.query("SELECT tree, node, payload FROM jobs ORDER BY tree, node", &[])?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            let mut next = || r.next().unwrap_or(Cell::Null);
            (int(next()), int(next()), text(next()).unwrap_or_default())
        })
        .collect())
}

/// Removes an ended job and its recorded calls (its node shows the outcome now).
pub(crate) fn forget<S: Sql>(sql: &mut S, tree: u64, node: u64) -> StoreResult<()> {
    sql.execute(
        "DELETE FROM jobs WHERE tree = $1 AND node = $2 AND status IN ('done', 'failed', 'dead')",
        &[i(tree), i(node)],
    )?;
    sql.execute("DELETE FROM job_calls WHERE tree = $1 AND node = $2", &[i(tree), i(node)]).map(drop)
}

/// Appends an LLM call (its record as JSON) to the recording of `me`'s job of `node`, as it
/// returns; refused (false) when the job is not `me`'s claim any more.
pub(crate) fn record_call<S: Sql>(sql: &mut S, me: &Lease, tree: u64, node: u64, body: &str) -> StoreResult<bool> {
    let n = sql.execute(
        "INSERT INTO job_calls (tree, node, seq, body)
         SELECT $1, $2, (SELECT COALESCE(MAX(seq) + 1, 0) FROM job_calls WHERE tree = $1 AND node = $2), $3
         WHERE EXISTS (SELECT 1 FROM jobs WHERE tree = $1 AND node = $2 AND claimed_by = $4 AND status = 'claimed')",
        &[i(tree), i(node), P::Text(body), P::Text(&me.holder)],
    )?;
    Ok(n == 1)
}

/// The LLM calls the job of `node` recorded so far (JSON records), in order.
pub(crate) fn recorded_calls<S: Sql>(sql: &mut S, tree: u64, node: u64) -> StoreResult<Vec<String>> {
    let rows =
        sql.query("SELECT body FROM job_calls WHERE tree = $1 AND node = $2 ORDER BY seq", &[i(tree), i(node)])?;
    Ok(rows.into_iter().filter_map(|r| r.into_iter().next().and_then(text)).collect())
}

/// Lists `me` among the processes taking jobs (`role`: `worker` or `serve`).
pub(crate) fn register<S: Sql>(sql: &mut S, me: &Lease, role: &str) -> StoreResult<()> {
    let now = sql.now_ms_sql();
    sql.execute(
        &format!(
            "INSERT INTO workers (holder, host, pid, role, heartbeat_at) VALUES ($1, $2, $3, $4, {now})
             ON CONFLICT (holder) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        ),
        &[P::Text(&me.holder), P::Text(&me.host), P::Int(i64::from(me.pid)), P::Text(role)],
    )
    .map(drop)
}

/// Says how many agent-based-model runs `me` takes at once (its row in `workers`).
pub(crate) fn offer_abm<S: Sql>(sql: &mut S, me: &Lease, abm: u64) -> StoreResult<()> {
    sql.execute("UPDATE workers SET abm = $2 WHERE holder = $1", &[P::Text(&me.holder), i(abm)]).map(drop)
}

/// How many agent-based-model runs the processes taking jobs run at once (those whose
/// heartbeat is younger than a few of `me`'s lapses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct AbmTakers {
    /// All of them together: none means an ABM job would wait for nobody.
    pub(crate) all: u64,
    /// Those of processes other than `me`'s (another host or pid): while there are some, `me`
    /// needs no Mesa of its own for a model's runs.
    pub(crate) others: u64,
}

/// See [`AbmTakers`].
pub(crate) fn abm_takers<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<AbmTakers> {
    let now = sql.now_ms_sql();
    let rows = sql.query(
        &format!(
            "SELECT COALESCE(SUM(abm), 0)::BIGINT,
                    COALESCE(SUM(abm) FILTER (WHERE NOT (host = $2 AND pid = $3)), 0)::BIGINT
             FROM workers WHERE heartbeat_at >= {now} - {ALIVE} * $1"
        ),
        &[P::Int(me.length.as_millis() as i64), P::Text(&me.host), P::Int(i64::from(me.pid))],
    )?;
    let mut row = rows.into_iter().next().unwrap_or_default().into_iter();
    let mut next = || int(row.next().unwrap_or(Cell::Null));
    Ok(AbmTakers { all: next(), others: next() })
}

/// How many processes other than `me`'s (another host or pid) take jobs and are alive.
pub(crate) fn others_taking_jobs<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<u64> {
    let now = sql.now_ms_sql();
    let rows = sql.query(
        &format!(
            "SELECT COUNT(*) FROM workers WHERE heartbeat_at >= {now} - {ALIVE} * $1 AND NOT (host = $2 AND pid = $3)"
        ),
        &[P::Int(me.length.as_millis() as i64), P::Text(&me.host), P::Int(i64::from(me.pid))],
    )?;
    Ok(first_int(rows))
}

/// Removes `me` from the processes taking jobs.
pub(crate) fn unregister<S: Sql>(sql: &mut S, me: &Lease) -> StoreResult<()> {
    sql.execute("DELETE FROM workers WHERE holder = $1", &[P::Text(&me.holder)]).map(drop)
}

// ---- the budget book: budgeted trees' spending, shared by every process that runs their calls ----

/// Dollars as a statement parameter (sent as text, cast by the statement: `$n::float8`).
fn dollars(v: f64) -> String {
    format!("{v}")
}

/// Dollars read back from `…::TEXT` (0 when absent or not a number).
fn dollars_of(c: Cell) -> f64 {
    text(c).and_then(|t| t.parse().ok()).unwrap_or(0.0)
}

/// Releases, in one statement, the holds of `tree`'s budgets that lapsed: those of a job whose
/// claim their holder no longer has (its process died and the job was re-claimed, buried,
/// handed back or ended). With `leader`, also every hold made outside a job (a leader's: the
/// last leader is gone when a new one starts), in every tree.
fn release_lapsed_holds<S: Sql>(sql: &mut S, tree: Option<u64>, leader: bool) -> StoreResult<u64> {
    sql.execute(
        "WITH gone AS (DELETE FROM budget_holds h
                WHERE ($1::BIGINT < 0 OR h.tree = $1::BIGINT)
                  AND ((h.job = 1 AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.tree = h.tree AND j.node = h.node
                        AND j.status = 'claimed' AND j.claimed_by = h.holder))
                       OR (h.job = 0 AND $2 = 1))
                RETURNING h.tree, h.part, h.money)
         UPDATE budget_spent s SET held = GREATEST(s.held - g.money, 0)
         FROM (SELECT tree, part, SUM(money) AS money FROM gone GROUP BY tree, part) g
         WHERE s.tree = g.tree AND s.part = g.part",
        &[P::Int(tree.map_or(-1, |t| t as i64)), P::Int(i64::from(leader))],
    )
}

/// One hold asked of a budget's row: its id (unique for its holder), the dollars it holds, and
/// whether it counts a call (an explicit cache stored for a fan-out is no call).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HoldAsk {
    pub id: u64,
    pub money: f64,
    pub call: bool,
}

/// Counts a call of budget `key` (when `ask.call`) and holds `ask.money` dollars for it as hold
/// `ask.id` of `me`, when `limits` admit it beside what is spent and held (one statement: the
/// budget's row is updated only if the call fits, so concurrent holds of any process are
/// admitted one after another, each seeing the others'). `job`: the node whose job makes the
/// call (the hold lapses with the claim); `None`: a call on the leader. A refusal says which cap,
/// with what the row holds.
pub(crate) fn budget_hold<S: Sql>(
    sql: &mut S,
    me: &Lease,
    key: BudgetKey,
    job: Option<u64>,
    limits: Limits,
    ask: HoldAsk,
) -> StoreResult<Result<(), Refusal>> {
    release_lapsed_holds(sql, Some(key.tree), false)?;
    let cap = |v: Option<u64>| P::OptInt(v.map(|v| v as i64));
    let money_cap = limits.money.map(dollars);
    let (id, money_f) = (ask.id, ask.money);
    let money = dollars(money_f);
    // Refused by the statement, a call is refused only when the row read after it shows which
    // cap stops it: a row made or changed in between (another process's first call of the
    // budget made it) is tried again.
    for _ in 0..8 {
        let admitted = sql.execute(
            "WITH ok AS (UPDATE budget_spent SET calls = calls + $11, held = held + $3::float8
                    WHERE tree = $1 AND part = $10 AND ($4::BIGINT IS NULL OR tokens < $4::BIGINT)
                      AND ($5::BIGINT IS NULL OR calls < $5::BIGINT)
                      AND ($6::TEXT IS NULL OR money + held + $3::float8 <= $6::float8)
                    RETURNING tree)
             INSERT INTO budget_holds (holder, id, tree, part, node, job, money)
             SELECT $2, $7, tree, $10, $8, $9, $3::float8 FROM ok",
            &[
                i(key.tree),
                P::Text(&me.holder),
                P::Text(&money),
                cap(limits.tokens),
                cap(limits.calls),
                P::OptText(money_cap.as_deref()),
                i(id),
                i(job.unwrap_or(0)),
                P::Int(i64::from(job.is_some())),
                i(key.part),
                P::Int(i64::from(ask.call)),
            ],
        )?;
        if admitted == 1 {
            return Ok(Ok(()));
        }
        match budget_totals(sql, key)? {
            // The budget's first call: its row, then the same again.
            None => budget_open(sql, key, 0, 0.0)?,
            Some(t) => {
                let refusal = if limits.tokens.is_some_and(|l| t.tokens >= l) {
                    Refusal::Tokens { spent: t.tokens }
                } else if limits.calls.is_some_and(|l| t.calls >= l) {
                    Refusal::Calls { made: t.calls }
                } else if limits.money.is_some_and(|l| t.money + t.held + money_f > l) {
                    Refusal::Money { spent: t.money, held: t.held }
                } else {
                    continue;
                };
                return Ok(Err(refusal));
            }
        }
    }
    Err(StoreError::Db(format!(
        "the budget of tree {} (part {}) changed under every try to hold a call",
        key.tree, key.part
    )))
}

/// Makes the row of budget `key`, with `tokens` and `money` dollars spent before it was booked
/// here (an exploration carried on from a version that kept its budget in memory); a row that
/// is there already is left as it is.
pub(crate) fn budget_open<S: Sql>(sql: &mut S, key: BudgetKey, tokens: u64, money: f64) -> StoreResult<()> {
    let money = dollars(money);
    sql.execute(
        "INSERT INTO budget_spent (tree, part, tokens, calls, money, held) VALUES ($1, $2, $3, 0, $4::float8, 0)
         ON CONFLICT (tree, part) DO NOTHING",
        &[i(key.tree), i(key.part), i(tokens), P::Text(&money)],
    )
    .map(drop)
}

/// Ends hold `id` of `me`: released, and `tokens` and `money` dollars charged to budget `key`;
/// with `undo` its call is taken back instead (a budget it is within refused it). A hold that
/// lapsed meanwhile (its claim lost) is released once only; what the call cost is charged
/// either way.
pub(crate) fn budget_settle<S: Sql>(
    sql: &mut S,
    me: &Lease,
    key: BudgetKey,
    id: u64,
    tokens: u64,
    money: f64,
    undo: bool,
) -> StoreResult<()> {
    let money = dollars(money);
    sql.execute(
        "WITH gone AS (DELETE FROM budget_holds WHERE holder = $1 AND id = $2 RETURNING money)
         UPDATE budget_spent SET tokens = tokens + $4, money = money + $5::float8, calls = calls - $6,
            held = GREATEST(held - COALESCE((SELECT SUM(money) FROM gone), 0), 0)
         WHERE tree = $3 AND part = $7",
        &[P::Text(&me.holder), i(id), i(key.tree), i(tokens), P::Text(&money), P::Int(i64::from(undo)), i(key.part)],
    )
    .map(drop)
}

/// What budget `key` has booked (`None`: nothing yet).
pub(crate) fn budget_totals<S: Sql>(sql: &mut S, key: BudgetKey) -> StoreResult<Option<Totals>> {
    let rows = sql.query(
        "SELECT tokens, calls, money::TEXT, held::TEXT FROM budget_spent WHERE tree = $1 AND part = $2",
        &[i(key.tree), i(key.part)],
    )?;
    Ok(rows.into_iter().next().map(|r| {
        let mut r = r.into_iter();
        let mut next = || r.next().unwrap_or(Cell::Null);
        Totals { tokens: int(next()), calls: int(next()), money: dollars_of(next()), held: dollars_of(next()) }
    }))
}

/// A connection of one process to the queue: its own client, its identity (`me`: holder,
/// host, pid, and the claims' lapse as `length`). Blocking: call it from a thread of its own
/// (or through [`crate::store::blocking`]), never from inside an async task.
pub struct Queue {
    db: Db<super::postgres::Postgres>,
    pub(crate) me: Lease,
    /// When this connection last gave up lapsed jobs out of attempts ([`Self::claim_slots`]).
    buried: Option<std::time::Instant>,
}

impl Queue {
    /// Connects to `url` (bringing the schema up to date) as `me`; listed among the processes
    /// taking jobs with `role` when it takes some (`None`: it only queues and watches them).
    pub fn connect(url: &str, me: Lease, role: Option<&str>) -> StoreResult<Queue> {
        let mut db = Db::new(super::postgres::Postgres::connect(url)?);
        db.migrate()?;
        if let Some(role) = role {
            register(&mut db.sql, &me, role)?;
        }
        Ok(Queue { db, me, buried: None })
    }

    /// Queues the job of `node` in a transaction of its own (the serving process queues it in
    /// the transaction that attaches the node instead).
    pub fn enqueue(&mut self, tree: u64, node: u64, kind: &str, payload: &str, max_attempts: u64) -> StoreResult<()> {
        let sql = &mut self.db.sql;
        sql.begin()?;
        if let Err(e) = enqueue(sql, tree, node, kind, payload, max_attempts) {
            sql.rollback();
            return Err(e);
        }
        sql.commit()
    }

    /// Claims up to `n` jobs that are not agent-based models (see [`Self::claim_slots`]).
    pub fn claim(&mut self, n: u64) -> StoreResult<Vec<Job>> {
        self.claim_slots(Slots { runs: n, ..Slots::default() })
    }

    /// [`claim`], after giving up the lapsed jobs out of attempts when that was last done half
    /// a lapse ago or more (a second at most): a claim is one statement, not two.
    pub(crate) fn claim_slots(&mut self, slots: Slots) -> StoreResult<Vec<Job>> {
        let every = (self.me.length / 2).min(Duration::from_secs(1));
        if self.buried.is_none_or(|at| at.elapsed() >= every) {
            bury(&mut self.db.sql, self.me.length)?;
            self.buried = Some(std::time::Instant::now());
        }
        claim(&mut self.db.sql, &self.me, slots)
    }

    pub(crate) fn offer_abm(&mut self, abm: u64) -> StoreResult<()> {
        offer_abm(&mut self.db.sql, &self.me, abm)
    }

    /// See [`abm_takers`].
    pub(crate) fn abm_takers(&mut self) -> StoreResult<AbmTakers> {
        abm_takers(&mut self.db.sql, &self.me)
    }

    pub(crate) fn others_taking_jobs(&mut self) -> StoreResult<u64> {
        others_taking_jobs(&mut self.db.sql, &self.me)
    }

    pub fn heartbeat(&mut self) -> StoreResult<Vec<(u64, u64)>> {
        heartbeat(&mut self.db.sql, &self.me)
    }

    /// Ends `me`'s job of `node` as `status` (done or failed) and commits `writes` (the node's
    /// rows) with it, in one transaction; refused, writing nothing, when the job is not `me`'s
    /// claim any more.
    pub fn finish(
        &mut self,
        tree: u64,
        node: u64,
        status: Status,
        error: Option<&str>,
        writes: &[Write],
    ) -> StoreResult<()> {
        self.end(tree, node, status, error, false, writes)
    }

    /// [`Self::finish`], or for a job run again (`anew`): then the log rows (and their search
    /// text) an earlier attempt left are deleted first, in the same transaction, and `writes`
    /// hold the whole log (batches of two attempts need not start at the same entries).
    pub(crate) fn end(
        &mut self,
        tree: u64,
        node: u64,
        status: Status,
        error: Option<&str>,
        anew: bool,
        writes: &[Write],
    ) -> StoreResult<()> {
        self.db.sql.begin()?;
        let queued = fence_finish(&mut self.db.sql, &self.me, tree, node, status, error)
            .and_then(|()| match anew {
                true => clear_log(&mut self.db.sql, tree, node),
                false => Ok(()),
            })
            .and_then(|()| writes.iter().try_for_each(|w| self.db.write_one(w)));
        if let Err(e) = queued {
            self.db.sql.rollback();
            return Err(e);
        }
        match self.db.sql.commit() {
            Ok(()) => Ok(()),
            Err(e) => Err(match row(&mut self.db.sql, tree, node) {
                Ok(Some(r)) if r.claimed_by.as_deref() != Some(&self.me.holder) || r.status != Status::Claimed => {
                    StoreError::LeaseLost(format!(
                        "the job of node {node} of tree {tree} is no longer this process's claim (it is {}{}): its result was not stored",
                        r.status.as_str(),
                        r.claimed_by.map(|by| format!(", claimed by {by}")).unwrap_or_default()
                    ))
                }
                Ok(None) => StoreError::Db(format!(
                    "the job of node {node} of tree {tree} is gone (its tree or node was deleted): its result was not stored"
                )),
                _ => e,
            }),
        }
    }

    pub fn retry(&mut self, tree: u64, node: u64, error: &str) -> StoreResult<Option<Status>> {
        retry(&mut self.db.sql, &self.me, tree, node, error)
    }

    pub(crate) fn release(&mut self) -> StoreResult<u64> {
        release(&mut self.db.sql, &self.me)
    }

    pub fn ended(&mut self) -> StoreResult<Vec<JobRow>> {
        ended(&mut self.db.sql)
    }

    pub fn row(&mut self, tree: u64, node: u64) -> StoreResult<Option<JobRow>> {
        row(&mut self.db.sql, tree, node)
    }

    /// Whether the job of `node` is still this process's claim.
    pub(crate) fn holds(&mut self, tree: u64, node: u64) -> StoreResult<bool> {
        Ok(self
            .row(tree, node)?
            .is_some_and(|r| r.status == Status::Claimed && r.claimed_by.as_deref() == Some(&self.me.holder)))
    }

    pub(crate) fn cancel(&mut self, tree: u64, node: u64) -> StoreResult<bool> {
        cancel(&mut self.db.sql, tree, node)
    }

    pub(crate) fn adoptable(&mut self) -> StoreResult<Vec<(u64, u64, String)>> {
        adoptable(&mut self.db.sql)
    }

    pub fn forget(&mut self, tree: u64, node: u64) -> StoreResult<()> {
        forget(&mut self.db.sql, tree, node)
    }

    pub(crate) fn record_call(&mut self, tree: u64, node: u64, body: &str) -> StoreResult<bool> {
        record_call(&mut self.db.sql, &self.me, tree, node, body)
    }

    pub(crate) fn recorded_calls(&mut self, tree: u64, node: u64) -> StoreResult<Vec<String>> {
        recorded_calls(&mut self.db.sql, tree, node)
    }

    /// Node `node`'s record and log rows, read on this connection (a job's end, as its worker
    /// committed it).
    pub(crate) fn node_end(&mut self, tree: u64, node: u64) -> StoreResult<(Option<NodeRow>, Vec<LogRow>)> {
        Ok((self.db.node(tree, node)?, self.db.log(tree, node)?))
    }

    /// See [`budget_hold`].
    pub(crate) fn budget_hold(
        &mut self,
        key: BudgetKey,
        job: Option<u64>,
        limits: Limits,
        ask: HoldAsk,
    ) -> StoreResult<Result<(), Refusal>> {
        budget_hold(&mut self.db.sql, &self.me, key, job, limits, ask)
    }

    /// See [`budget_settle`].
    pub(crate) fn budget_settle(
        &mut self,
        key: BudgetKey,
        id: u64,
        tokens: u64,
        money: f64,
        undo: bool,
    ) -> StoreResult<()> {
        budget_settle(&mut self.db.sql, &self.me, key, id, tokens, money, undo)
    }

    /// See [`budget_totals`] (zero for a budget that has booked nothing yet).
    pub(crate) fn budget_totals(&mut self, key: BudgetKey) -> StoreResult<Totals> {
        Ok(budget_totals(&mut self.db.sql, key)?.unwrap_or_default())
    }

    /// See [`budget_open`].
    pub(crate) fn budget_open(&mut self, key: BudgetKey, tokens: u64, money: f64) -> StoreResult<()> {
        budget_open(&mut self.db.sql, key, tokens, money)
    }

    /// Leaves the list of processes taking jobs.
    pub(crate) fn unregister(&mut self) -> StoreResult<()> {
        unregister(&mut self.db.sql, &self.me)
    }

    /// Hands the claims back and leaves the list of processes (a graceful stop).
    pub fn close(mut self) -> StoreResult<u64> {
        let n = self.release()?;
        unregister(&mut self.db.sql, &self.me)?;
        Ok(n)
    }
}

/// Wakes a process when jobs are queued or end (`LISTEN simtree_jobs`) and when a running job's
/// log grew (`simtree_log`), on a connection of its own. Only a wake-up: a notification sent while the connection was down is lost, so callers
/// also poll ([`Listener::wait`] returns after its timeout either way).
pub struct Listener(super::postgres::Listening);

impl Listener {
    pub fn connect(url: &str) -> StoreResult<Listener> {
        super::postgres::Listening::connect(url, &[CHANNEL, LOG_CHANNEL]).map(Listener)
    }

    /// Waits up to `timeout` for notifications; their payloads (`queued`, `ended`,
    /// `done:<tree>:<node>:<status>`, and the log channel's `<tree>:<node>` as
    /// `log:<tree>:<node>`), empty when none came (time to poll). Reconnects by itself.
    pub fn wait(&mut self, timeout: Duration) -> Vec<String> {
        self.0.wait(timeout)
    }
}
