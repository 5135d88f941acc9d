//! The store's SQL, written once for both databases.
//!
//! SQLite and PostgreSQL agree on everything used here (`$n` parameters, `ON CONFLICT … DO`,
//! 64-bit integers, text) but the name of the binary type, so each driver implements the small
//! [`Sql`] trait and everything else — schema, migrations, reads and the write batch — lives in
//! [`Db`] once.

use simtree_shared::{EdgeType, NodeStatus, Op, SimKind};

use super::lease::{self, Lease};
use super::vocab::{Cell, P, Sql, i};
use super::{
    Database, LogRow, NodeRow, NodeRows, RowError, ScenarioRow, StoreError, StoreResult, TextMatch, TreeRow, Write,
};
use crate::chunks::ChunkKey;

/// The channel workers and the serving process wake on.
pub(crate) const CHANNEL: &str = "simtree_jobs";
/// The payload on [`CHANNEL`] that says a job was queued (the others say one ended).
pub(crate) const QUEUED: &str = "queued";

/// Queues the job of `node` in the write transaction under way (see [`Sql::write`]); the
/// notification is delivered when it commits. A job already queued for the node is left as it is.
pub(crate) fn enqueue<S: Sql>(
    sql: &mut S,
    tree: u64,
    node: u64,
    kind: &str,
    payload: &str,
    max_attempts: u64,
) -> StoreResult<()> {
    let now = sql.now_ms_sql();
    sql.write(
        &format!(
            "INSERT INTO jobs (tree, node, kind, payload, status, attempts, max_attempts, created, updated)
             VALUES ($1, $2, $3, $4, 'queued', 0, $5, {now}, {now}) ON CONFLICT (tree, node) DO NOTHING"
        ),
        &[i(tree), i(node), P::Text(kind), P::Text(payload), i(max_attempts.max(1))],
    )?;
    sql.write(&format!("SELECT pg_notify('{CHANNEL}', '{QUEUED}')"), &[])
}

/// Schema versions, applied in order at start-up; each runs once, in a transaction.
const MIGRATIONS: &[&str] = &[
    // 1: trees, nodes, their states, the chunks states refer to, and logs.
    "CREATE TABLE trees (
        id BIGINT PRIMARY KEY, name TEXT NOT NULL, scenario TEXT NOT NULL, kind TEXT NOT NULL,
        created BIGINT NOT NULL, last_activity BIGINT NOT NULL, seq BIGINT NOT NULL,
        nodes BIGINT NOT NULL, budget BIGINT);
     CREATE TABLE nodes (
        tree BIGINT NOT NULL, id BIGINT NOT NULL, parent BIGINT, depth BIGINT NOT NULL,
        edge_type TEXT NOT NULL, ops TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
        created BIGINT NOT NULL, finished BIGINT, turns BIGINT NOT NULL, records TEXT NOT NULL,
        PRIMARY KEY (tree, id));
     CREATE TABLE states (tree BIGINT NOT NULL, node BIGINT NOT NULL, data {blob} NOT NULL,
        PRIMARY KEY (tree, node));
     CREATE TABLE chunks (tree BIGINT NOT NULL, node BIGINT NOT NULL, ord BIGINT NOT NULL,
        data {blob} NOT NULL, PRIMARY KEY (tree, node, ord));
     CREATE TABLE logs (tree BIGINT NOT NULL, node BIGINT NOT NULL, idx BIGINT NOT NULL,
        entries TEXT NOT NULL, PRIMARY KEY (tree, node, idx));",
    // 2: sweeps laid out in a tree, with their replicates' results (JSON).
    "CREATE TABLE sweeps (tree BIGINT NOT NULL, id BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tree, id));",
    // 3: the last group of SQLite's commit journal written to the database (unused on PostgreSQL).
    "CREATE TABLE journal (applied BIGINT NOT NULL); INSERT INTO journal (applied) VALUES (0);",
    // 4: the next tree id, kept so that no id is handed out twice (a deleted tree's, an
    // interrupted import's), and the imports in progress (a marker row per import, removed when
    // it is listed; rows of a marked tree left by a crash are deleted at start-up).
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
     INSERT INTO counters (name, value) SELECT 'next_tree', COALESCE(MAX(id) + 1, 0) FROM trees;
     CREATE TABLE imports (tree BIGINT PRIMARY KEY);",
    // 5: a CRC-32 of each log row's text (NULL in rows written before: read as they were).
    "ALTER TABLE logs ADD COLUMN crc BIGINT;",
    // 6: the documents users brought trees' scenarios as, and uploaded market datasets (CSV).
    "CREATE TABLE documents (tree BIGINT PRIMARY KEY, body TEXT NOT NULL);
     CREATE TABLE datasets (name TEXT PRIMARY KEY, body TEXT NOT NULL);",
    // 7: scenario library: saved scenarios, every version kept (the next version number of a
    // deleted one stays in `counters` as 'scenario:<id>', so no id@version names two documents),
    // and the saved version each tree was made from.
    "CREATE TABLE scenarios (id TEXT NOT NULL, version BIGINT NOT NULL, saved BIGINT NOT NULL,
        body TEXT NOT NULL, PRIMARY KEY (id, version));
     CREATE TABLE origins (tree BIGINT PRIMARY KEY, scenario TEXT NOT NULL, version BIGINT NOT NULL);",
    // 8 (issue 26): server lease — the one server a PostgreSQL database has until runs are
    // jobs (`store/lease.rs`): its holder, host and pid, when it was acquired and when it expires
    // (Unix ms, the database's clock). Unused on SQLite, whose data folder is locked instead.
    "CREATE TABLE lease (name TEXT PRIMARY KEY, holder TEXT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL,
        acquired BIGINT NOT NULL, expires BIGINT NOT NULL);",
    // 9 (notebook): what users write on nodes (an annotation row, JSON, per annotated node) and
    // on trees (a description), and the text search reads: a row per piece of text where it
    // entered the tree (`texts`: events, memories, annotations) under the database's own
    // full-text index ({search}: FTS5 with SQLite, a tsvector with PostgreSQL).
    "CREATE TABLE annotations (tree BIGINT NOT NULL, node BIGINT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (tree, node));
     ALTER TABLE trees ADD COLUMN description TEXT;
     {search}",
    // 10 (notebook): the questions asked of agents at nodes and their answers (JSON), in order.
    "CREATE TABLE asks (tree BIGINT NOT NULL, node BIGINT NOT NULL, seq BIGINT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (tree, node, seq));",
    // 11 (durable): a CRC-32 of each node record (`node_crc`; NULL in rows written before:
    // read as they were).
    "ALTER TABLE nodes ADD COLUMN crc BIGINT;",
    // 12 (explore): a tree's explorations, with their candidates' replicates and results (JSON).
    "CREATE TABLE explores (tree BIGINT NOT NULL, id BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tree, id));",
    // 13 (explore): a tree's own money cap in US dollars (its decimal text; Rust's shortest
    // round-trip form), for trees made with `money_budget`.
    "CREATE TABLE tree_money (tree BIGINT PRIMARY KEY, money TEXT NOT NULL);",
    // 14 (jobs helper, issue 26 item 3): the run queue of `store/jobs.rs` — one row per node
    // whose run is a job (queued, claimed, done, failed or dead; attempts; who claimed it and
    // when it last said it is alive, in the database clock's Unix ms; the error), the LLM calls
    // each job recorded as they returned (replayed when it is re-claimed), and the processes
    // taking jobs. Used with PostgreSQL only (SQLite runs everything in its one process).
    "CREATE TABLE jobs (tree BIGINT NOT NULL, node BIGINT NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
        status TEXT NOT NULL, attempts BIGINT NOT NULL, max_attempts BIGINT NOT NULL, claimed_by TEXT,
        heartbeat_at BIGINT, error TEXT, created BIGINT NOT NULL, updated BIGINT NOT NULL,
        PRIMARY KEY (tree, node));
     CREATE INDEX jobs_status ON jobs (status, created);
     CREATE TABLE job_calls (tree BIGINT NOT NULL, node BIGINT NOT NULL, seq BIGINT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (tree, node, seq));
     CREATE TABLE workers (holder TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL, role TEXT NOT NULL,
        heartbeat_at BIGINT NOT NULL);",
    // 15 (issue 26: leader address): the base URL of the server holding the lease
    // (`serve --advertise`), where the other servers on the database forward their requests
    // (`http/fleet.rs`). NULL in rows of servers before it, and of stores that serve no HTTP.
    "ALTER TABLE lease ADD COLUMN address TEXT;",
    // 16 (issue 40, item 2): how many agent-based-model runs each process taking jobs runs at
    // once (`--abm-workers`: its Mesa pool; 0 in rows of processes before it, which take none).
    "ALTER TABLE workers ADD COLUMN abm BIGINT NOT NULL DEFAULT 0;",
    // 17 (issue 40, item 4): budgeted trees' spending, shared by the processes that run their
    // calls (`store/jobs.rs`, the budget book): per tree the tokens and dollars charged, the
    // calls started and the dollars held by calls in flight; and each hold, by its holder (a
    // process) and an id of that process's, for a job's run (`job` 1: it lapses with the claim)
    // or one on the leader (0: it lapses when the next leader starts). Used with PostgreSQL
    // only; a tree without a row has spent nothing.
    "CREATE TABLE budget_spent (tree BIGINT PRIMARY KEY, tokens BIGINT NOT NULL, calls BIGINT NOT NULL,
        money DOUBLE PRECISION NOT NULL, held DOUBLE PRECISION NOT NULL);
     CREATE TABLE budget_holds (holder TEXT NOT NULL, id BIGINT NOT NULL, tree BIGINT NOT NULL, node BIGINT NOT NULL,
        job BIGINT NOT NULL, money DOUBLE PRECISION NOT NULL, PRIMARY KEY (holder, id));
     CREATE INDEX budget_holds_tree ON budget_holds (tree);",
    // 18 (issue 40, item 3): a budget's parts: an exploration with its own token or money cap
    // books it in the database too, as part `<exploration id>` of its tree (the tree's own
    // budget is part 0, which the rows of schema 17 become), and each hold names its part.
    "CREATE TABLE budget_parts (tree BIGINT NOT NULL, part BIGINT NOT NULL, tokens BIGINT NOT NULL,
        calls BIGINT NOT NULL, money DOUBLE PRECISION NOT NULL, held DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (tree, part));
     INSERT INTO budget_parts (tree, part, tokens, calls, money, held)
        SELECT tree, 0, tokens, calls, money, held FROM budget_spent;
     DROP TABLE budget_spent;
     ALTER TABLE budget_parts RENAME TO budget_spent;
     ALTER TABLE budget_holds ADD COLUMN part BIGINT NOT NULL DEFAULT 0;",
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub(crate) struct Db<S: Sql> {
    pub(crate) sql: S,
    /// The server lease this process holds (PostgreSQL): every write transaction renews it first,
    /// and is refused once it is lost.
    pub(crate) lease: Option<Lease>,
    /// Why writes are refused for good: the lease was lost (see `store/lease.rs`).
    lease_lost: Option<String>,
}

/// The columns [`StoredNode::read`] reads, in its order.
const NODE_COLUMNS: &str =
    "tree, id, parent, depth, edge_type, ops, status, error, created, finished, turns, records, crc";

/// [`NODE_COLUMNS`] of the table named `alias` in a query (`n.tree, n.id, …`), for a query that
/// reads a node's record beside other columns ([`node_of`]).
pub(super) fn node_columns_of(alias: &str) -> String {
    NODE_COLUMNS.split(", ").map(|c| format!("{alias}.{c}")).collect::<Vec<_>>().join(", ")
}

/// The node record in the next cells of a row, as [`NODE_COLUMNS`] hold it: `None` when there
/// is none (NULL, from an outer join) or it is damaged (as among a tree's records, where a
/// damaged one is listed apart).
pub(super) fn node_of(next: &mut dyn FnMut() -> Cell) -> StoreResult<Option<NodeRow>> {
    let first = next();
    if matches!(first, Cell::Null) {
        // (Every column of the record is read, so the cells after it stay in place.)
        for _ in 1..NODE_COLUMNS.split(", ").count() {
            next();
        }
        return Ok(None);
    }
    let mut first = Some(first);
    let (stored, crc) = StoredNode::read(&mut || first.take().unwrap_or_else(&mut *next))?;
    Ok(stored.row(crc).ok())
}

/// A node record as its columns hold it.
#[derive(Clone)]
struct StoredNode {
    tree: u64,
    id: u64,
    parent: Option<u64>,
    depth: u64,
    edge_type: String,
    ops: String,
    status: String,
    error: Option<String>,
    created: u64,
    finished: Option<u64>,
    turns: u64,
    records: String,
}

impl StoredNode {
    /// A row of [`NODE_COLUMNS`]: the record and its checksum (`None`: written before checksums).
    fn read(next: &mut dyn FnMut() -> Cell) -> StoreResult<(StoredNode, Option<i64>)> {
        let stored = StoredNode {
            tree: next().int()? as u64,
            id: next().int()? as u64,
            parent: next().opt_int()?.map(|p| p as u64),
            depth: next().int()? as u64,
            edge_type: next().text()?,
            ops: next().text()?,
            status: next().text()?,
            error: next().opt_text()?,
            created: next().int()? as u64,
            finished: next().opt_int()?.map(|f| f as u64),
            turns: next().int()? as u64,
            records: next().text()?,
        };
        Ok((stored, next().opt_int()?))
    }

    /// The CRC-32 of every column (and the tree), each as text followed by a byte no UTF-8 text
    /// holds (0xFF; 0xFE for a NULL), so that no two different rows give one sequence.
    fn crc(&self) -> u32 {
        let mut h = crc32fast::Hasher::new();
        let mut put = |v: Option<&str>| {
            if let Some(v) = v {
                h.update(v.as_bytes());
            }
            h.update(&[if v.is_some() { 0xFF } else { 0xFE }]);
        };
        let num = |v: u64| v.to_string();
        put(Some(&num(self.tree)));
        put(Some(&num(self.id)));
        put(self.parent.map(num).as_deref());
        put(Some(&num(self.depth)));
        put(Some(&self.edge_type));
        put(Some(&self.ops));
        put(Some(&self.status));
        put(self.error.as_deref());
        put(Some(&num(self.created)));
        put(self.finished.map(num).as_deref());
        put(Some(&num(self.turns)));
        put(Some(&self.records));
        h.finalize()
    }

    /// The record, or what is wrong with it: a checksum that does not match (`crc`: `None` in
    /// rows written before checksums), or a column that does not parse.
    fn row(self, crc: Option<i64>) -> Result<NodeRow, RowError> {
        if let Some(crc) = crc
            && crc as u32 != self.crc()
        {
            return Err(RowError::RecordChecksum);
        }
        let parse = |what: &'static str, why: String| RowError::RecordColumn { what, why };
        Ok(NodeRow {
            id: self.id,
            parent: self.parent,
            depth: u32::try_from(self.depth).map_err(|e| parse("depth", e.to_string()))?,
            edge_type: parse_enum::<EdgeType>(&self.edge_type)
                .map_err(|e| parse("edge type", e.message().to_string()))?,
            ops: exact(serde_json::from_str::<Vec<Op>>(&self.ops).map_err(|e| parse("ops", e.to_string()))?),
            status: parse_enum::<NodeStatus>(&self.status).map_err(|e| parse("status", e.message().to_string()))?,
            error: self.error,
            created: self.created,
            finished: self.finished,
            turns: self.turns,
            records: exact(serde_json::from_str(&self.records).map_err(|e| parse("records", e.to_string()))?),
        })
    }
}

/// Reads each result row with `read`, which takes the row's cells in order by calling `next`
/// (a cell past the row's end reads as NULL).
fn each<T>(
    rows: Vec<Vec<Cell>>,
    mut read: impl FnMut(&mut dyn FnMut() -> Cell) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    rows.into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            read(&mut || r.next().unwrap_or(Cell::Null))
        })
        .collect()
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

fn enum_text<T: serde::Serialize>(v: &T) -> String {
    json(v).trim_matches('"').to_string()
}

/// `v` moved into a list with no spare room. A tree keeps its nodes' op lists for as long as it
/// is open, and a list parsed from JSON has room for four: for the usual single op that is more
/// than three times the memory. The new list is allocated before the parsed one is freed, whole,
/// for the next node's parse to reuse (shrinking in place instead left a hole behind each list).
fn exact<T>(mut v: Vec<T>) -> Vec<T> {
    if v.capacity() == v.len() {
        return v;
    }
    let mut out = Vec::with_capacity(v.len());
    out.append(&mut v);
    out
}

fn parse_enum<T: serde::de::DeserializeOwned>(s: &str) -> StoreResult<T> {
    serde_json::from_value(serde_json::Value::String(s.into())).map_err(|e| StoreError::Corrupt(format!("'{s}': {e}")))
}

impl<S: Sql> Db<S> {
    pub(crate) fn new(sql: S) -> Db<S> {
        Db { sql, lease: None, lease_lost: None }
    }

    /// Takes the server lease `me` (after [`Self::migrate`]); while another process holds it,
    /// answers who does.
    pub(crate) fn take_lease(&mut self, me: Lease) -> StoreResult<Result<(), lease::Holder>> {
        if let Err(other) = lease::take(&mut self.sql, &me)? {
            return Ok(Err(other));
        }
        self.lease = Some(me);
        Ok(Ok(()))
    }

    /// A failed commit's error, or — when the lease's fence refused it (another process holds the
    /// lease now) — the lost lease's.
    fn lost_or(&mut self, e: StoreError) -> StoreError {
        let Some(me) = &self.lease else {
            return e;
        };
        match lease::holder(&mut self.sql) {
            Ok(h) if h.as_ref().is_none_or(|h| h.holder != me.holder) => {
                self.lose();
                StoreError::LeaseLost(self.lease_lost.clone().unwrap_or_default())
            }
            _ => e,
        }
    }

    /// Records that the lease is lost, naming the new holder if there is one.
    fn lose(&mut self) {
        let by = lease::holder(&mut self.sql).ok().flatten();
        let message = lease::lost(by.as_ref());
        tracing::error!("{message}");
        self.lease_lost = Some(message);
    }

    /// Creates the schema or brings it up to date. A database written by a newer build is refused.
    pub(crate) fn migrate(&mut self) -> StoreResult<()> {
        self.migrate_to(MIGRATIONS.len())
    }

    /// Brings the schema up to version `version` (tests start from an earlier one).
    fn migrate_to(&mut self, version: usize) -> StoreResult<()> {
        self.sql.batch("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")?;
        let rows = self.sql.query("SELECT version FROM schema_version", &[])?;
        let current = match rows.first() {
            Some(r) => r[0].int()?,
            None => {
                self.sql.execute("INSERT INTO schema_version (version) VALUES (0)", &[])?;
                0
            }
        };
        if current > SCHEMA_VERSION {
            return Err(StoreError::Db(format!(
                "the database has schema version {current}; this simtree understands up to {SCHEMA_VERSION} (upgrade simtree)"
            )));
        }
        let mut index_logs = false;
        for (n, m) in MIGRATIONS.iter().enumerate().take(version).skip(current as usize) {
            index_logs |= m.contains("{search}");
            let ddl = m.replace("{blob}", self.sql.blob_type()).replace("{search}", self.sql.fts().ddl);
            self.sql.batch("BEGIN")?;
            let applied = self.sql.batch(&ddl).and_then(|()| {
                self.sql.execute("UPDATE schema_version SET version = $1", &[P::Int(n as i64 + 1)]).map(drop)
            });
            match applied {
                Ok(()) => self.sql.batch("COMMIT")?,
                Err(e) => {
                    let _ = self.sql.batch("ROLLBACK");
                    return Err(e.context(format_args!("migration {}", n + 1)));
                }
            }
        }
        if index_logs {
            self.index_stored_logs()?;
        }
        Ok(())
    }

    /// Indexes for search the log rows a database had before it had a search index (once, as
    /// it gains one; new rows are indexed as they are written), a thousand rows a transaction.
    fn index_stored_logs(&mut self) -> StoreResult<()> {
        let mut after = (-1i64, -1i64, -1i64);
        loop {
            let rows = self.sql.query(
                "SELECT tree, node, idx, entries FROM logs WHERE (tree, node, idx) > ($1, $2, $3)
                 ORDER BY tree, node, idx LIMIT 1000",
                &[P::Int(after.0), P::Int(after.1), P::Int(after.2)],
            )?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = (last[0].int()?, last[1].int()?, last[2].int()?);
            self.sql.batch("BEGIN")?;
            for r in rows {
                let mut r = r.into_iter();
                let mut next = || r.next().unwrap_or(Cell::Null);
                let (tree, node, idx) = (next().int()? as u64, next().int()? as u64, next().int()? as u64);
                let text = index_text(next().text()?.split('\n'));
                if let Err(e) = put_text(&mut self.sql, tree, node, "event", idx, &text) {
                    let _ = self.sql.batch("ROLLBACK");
                    return Err(e.context("indexing the stored logs for search"));
                }
            }
            self.sql.batch("COMMIT")?;
        }
    }

    /// `(node, body)` rows of a tree (`$1`) that `query` selects.
    fn node_bodies(&mut self, query: &str, tree: u64) -> StoreResult<Vec<(u64, String)>> {
        let rows = self.sql.query(query, &[i(tree)])?;
        each(rows, |next| Ok((next().int()? as u64, next().text()?)))
    }

    /// The last journal group written to the database.
    pub(crate) fn journal_applied(&mut self) -> StoreResult<u64> {
        let rows = self.sql.query("SELECT applied FROM journal", &[])?;
        match rows.first().and_then(|r| r.first()) {
            Some(c) => Ok(c.int()? as u64),
            None => Err(StoreError::Corrupt("the journal table is empty".into())),
        }
    }

    pub(super) fn write_one(&mut self, w: &Write) -> StoreResult<()> {
        let sql = &mut self.sql;
        match w {
            Write::Tree(t) => {
                sql.write(
                    "INSERT INTO trees (id, name, scenario, kind, created, last_activity, seq, nodes, budget)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (id) DO UPDATE SET name = excluded.name, last_activity = excluded.last_activity,
                        seq = excluded.seq, nodes = excluded.nodes",
                    &[
                        i(t.id),
                        P::Text(&t.name),
                        P::Text(&t.scenario),
                        P::Text(&enum_text(&t.kind)),
                        i(t.created),
                        i(t.last_activity),
                        i(t.seq),
                        i(t.nodes),
                        P::OptInt(t.budget.map(|b| b as i64)),
                    ],
                )?;
                reserve_tree(sql, t.id)?;
            }
            Write::ImportBegin { tree } => {
                sql.write("INSERT INTO imports (tree) VALUES ($1) ON CONFLICT (tree) DO NOTHING", &[i(*tree)])?;
                reserve_tree(sql, *tree)?;
            }
            Write::ImportEnd { tree } => {
                sql.write("DELETE FROM imports WHERE tree = $1", &[i(*tree)])?;
            }
            Write::Rename { tree, name } => {
                sql.write("UPDATE trees SET name = $1 WHERE id = $2", &[P::Text(name), i(*tree)])?;
            }
            Write::Touch { tree, last_activity, seq, nodes } => {
                sql.write(
                    "UPDATE trees SET last_activity = $1, seq = $2, nodes = $3 WHERE id = $4",
                    &[i(*last_activity), i(*seq), i(*nodes), i(*tree)],
                )?;
            }
            Write::Node { tree, row } => {
                let stored = StoredNode {
                    tree: *tree,
                    id: row.id,
                    parent: row.parent,
                    depth: u64::from(row.depth),
                    edge_type: enum_text(&row.edge_type),
                    ops: json(&row.ops),
                    status: enum_text(&row.status),
                    error: row.error.clone(),
                    created: row.created,
                    finished: row.finished,
                    turns: row.turns,
                    records: json(&row.records),
                };
                sql.write(
                    "INSERT INTO nodes (tree, id, parent, depth, edge_type, ops, status, error, created, finished, turns, records, crc)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                     ON CONFLICT (tree, id) DO UPDATE SET status = excluded.status, error = excluded.error,
                        finished = excluded.finished, turns = excluded.turns, records = excluded.records,
                        crc = excluded.crc",
                    &[
                        i(*tree),
                        i(row.id),
                        P::OptInt(row.parent.map(|p| p as i64)),
                        i(stored.depth),
                        P::Text(&stored.edge_type),
                        P::Text(&stored.ops),
                        P::Text(&stored.status),
                        P::OptText(row.error.as_deref()),
                        i(row.created),
                        P::OptInt(row.finished.map(|f| f as i64)),
                        i(row.turns),
                        P::Text(&stored.records),
                        P::Int(i64::from(stored.crc())),
                    ],
                )?;
            }
            Write::Log { tree, node, index, entries, .. } => {
                sql.write(
                    "INSERT INTO logs (tree, node, idx, entries, crc) VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (tree, node, idx) DO UPDATE SET entries = excluded.entries, crc = excluded.crc",
                    &[
                        i(*tree),
                        i(*node),
                        i(*index),
                        P::Text(entries),
                        P::Int(i64::from(crc32fast::hash(entries.as_bytes()))),
                    ],
                )?;
                let text = index_text(entries.split('\n'));
                put_text(sql, *tree, *node, "event", *index, &text)?;
            }
            Write::State { tree, node, data, chunks } => {
                for (key, bytes) in chunks {
                    sql.write(
                        "INSERT INTO chunks (tree, node, ord, data) VALUES ($1, $2, $3, $4)
                         ON CONFLICT (tree, node, ord) DO NOTHING",
                        &[i(*tree), i(key.0), P::Int(key.1 as i64), P::Blob(bytes)],
                    )?;
                }
                sql.write(
                    "INSERT INTO states (tree, node, data) VALUES ($1, $2, $3)
                     ON CONFLICT (tree, node) DO UPDATE SET data = excluded.data",
                    &[i(*tree), i(*node), P::Blob(data)],
                )?;
            }
            Write::DeleteNodes { tree, nodes } => {
                for table in ["nodes", "states", "chunks", "logs", "annotations", "texts", "asks", "jobs", "job_calls"]
                {
                    let col = if table == "nodes" { "id" } else { "node" };
                    for list in id_lists(nodes) {
                        sql.write(&format!("DELETE FROM {table} WHERE tree = $1 AND {col} IN ({list})"), &[i(*tree)])?;
                    }
                }
            }
            Write::Sweep { tree, id, body } | Write::Explore { tree, id, body } => {
                let table = if matches!(w, Write::Sweep { .. }) { "sweeps" } else { "explores" };
                sql.write(
                    &format!(
                        "INSERT INTO {table} (tree, id, body) VALUES ($1, $2, $3)
                         ON CONFLICT (tree, id) DO UPDATE SET body = excluded.body"
                    ),
                    &[i(*tree), i(*id), P::Text(body)],
                )?;
            }
            Write::DeleteSweep { tree, id } => {
                sql.write("DELETE FROM sweeps WHERE tree = $1 AND id = $2", &[i(*tree), i(*id)])?;
            }
            Write::TreeMoney { tree, money } => {
                sql.write(
                    "INSERT INTO tree_money (tree, money) VALUES ($1, $2)
                     ON CONFLICT (tree) DO UPDATE SET money = excluded.money",
                    &[i(*tree), P::Text(&money.to_string())],
                )?;
            }
            Write::DeleteExplore { tree, id } => {
                sql.write("DELETE FROM explores WHERE tree = $1 AND id = $2", &[i(*tree), i(*id)])?;
                budget_forget(sql, BudgetKey::explore(*tree, *id))?;
            }
            Write::Applied { seq } => {
                sql.write("UPDATE journal SET applied = $1", &[i(*seq)])?;
            }
            Write::DeleteTree { tree } => delete_tree(sql, *tree)?,
            Write::Document { tree, body } => {
                sql.write(
                    "INSERT INTO documents (tree, body) VALUES ($1, $2)
                     ON CONFLICT (tree) DO UPDATE SET body = excluded.body",
                    &[i(*tree), P::Text(body)],
                )?;
            }
            Write::Dataset { name, body } => {
                sql.write(
                    "INSERT INTO datasets (name, body) VALUES ($1, $2)
                     ON CONFLICT (name) DO UPDATE SET body = excluded.body",
                    &[P::Text(name), P::Text(body)],
                )?;
            }
            Write::DeleteDataset { name } => {
                sql.write("DELETE FROM datasets WHERE name = $1", &[P::Text(name)])?;
            }
            Write::SaveScenario { id, version, saved, body } => {
                sql.write(
                    "INSERT INTO scenarios (id, version, saved, body) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (id, version) DO UPDATE SET saved = excluded.saved, body = excluded.body",
                    &[P::Text(id), i(*version), i(*saved), P::Text(body)],
                )?;
                let counter = format!("scenario:{id}");
                sql.write(
                    "INSERT INTO counters (name, value) VALUES ($1, $2)
                     ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE counters.value < excluded.value",
                    &[P::Text(&counter), i(*version)],
                )?;
            }
            Write::DeleteScenario { id } => {
                sql.write("DELETE FROM scenarios WHERE id = $1", &[P::Text(id)])?;
            }
            Write::Origin { tree, scenario, version } => {
                sql.write(
                    "INSERT INTO origins (tree, scenario, version) VALUES ($1, $2, $3)
                     ON CONFLICT (tree) DO UPDATE SET scenario = excluded.scenario, version = excluded.version",
                    &[i(*tree), P::Text(scenario), i(*version)],
                )?;
            }
            Write::Annotate { tree, node, body } => {
                let key = [i(*tree), i(*node)];
                match body {
                    Some(body) => sql.write(
                        "INSERT INTO annotations (tree, node, body) VALUES ($1, $2, $3)
                         ON CONFLICT (tree, node) DO UPDATE SET body = excluded.body",
                        &[i(*tree), i(*node), P::Text(body)],
                    )?,
                    None => sql.write("DELETE FROM annotations WHERE tree = $1 AND node = $2", &key)?,
                };
                sql.write(
                    "DELETE FROM texts WHERE tree = $1 AND node = $2 AND kind IN ('title', 'note', 'tag')",
                    &key,
                )?;
                let a: simtree_shared::Annotation = match body {
                    Some(b) => serde_json::from_str(b).map_err(|e| StoreError::Corrupt(format!("annotation: {e}")))?,
                    None => Default::default(),
                };
                let tags = a.tags.join(" ");
                for (kind, text) in [("title", a.title.as_deref()), ("note", a.note.as_deref()), ("tag", Some(&tags))] {
                    put_text(sql, *tree, *node, kind, 0, text.unwrap_or(""))?;
                }
            }
            Write::Describe { tree, description } => {
                sql.write(
                    "UPDATE trees SET description = $1 WHERE id = $2",
                    &[P::OptText(description.as_deref()), i(*tree)],
                )?;
            }
            Write::Job { tree, node, kind, payload, max_attempts } => {
                enqueue(sql, *tree, *node, kind, payload, *max_attempts)?
            }
            Write::Text { tree, node, kind, ord, body } => put_text(sql, *tree, *node, kind, *ord, body)?,
            Write::Ask { tree, node, seq, body } => {
                sql.write(
                    "INSERT INTO asks (tree, node, seq, body) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (tree, node, seq) DO UPDATE SET body = excluded.body",
                    &[i(*tree), i(*node), i(*seq), P::Text(body)],
                )?;
                let a: simtree_shared::Ask =
                    serde_json::from_str(body).map_err(|e| StoreError::Corrupt(format!("ask: {e}")))?;
                put_text(sql, *tree, *node, "ask", *seq, &format!("{}\n{}", a.question, a.answer))?;
            }
        }
        Ok(())
    }
}

/// The most text one search row holds (bytes); the rest of a larger piece is not searched.
const MAX_TEXT: usize = 256 << 10;

/// Writes (or replaces) one search row; an empty text writes none.
fn put_text<S: Sql>(sql: &mut S, tree: u64, node: u64, kind: &str, ord: u64, text: &str) -> StoreResult<()> {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text = text[..end].trim();
    if text.is_empty() {
        return Ok(());
    }
    sql.write(
        "INSERT INTO texts (tree, node, kind, ord, body) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (tree, node, kind, ord) DO UPDATE SET body = excluded.body",
        &[i(tree), i(node), P::Text(kind), i(ord), P::Text(text)],
    )
}

/// The searchable text of log entries (`{type, data, node}` JSON, one per item): every string
/// in each entry's `data`, one per line (keys, numbers and the entry's type are not text a
/// user wrote or read).
pub(crate) fn index_text<'a>(entries: impl Iterator<Item = &'a str>) -> String {
    fn strings(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::String(s) if !s.trim().is_empty() => {
                out.push_str(s);
                out.push('\n');
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    for e in entries.filter(|e| !e.is_empty()) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(e)
            && let Some(data) = v.get("data")
        {
            strings(data, &mut out);
        }
    }
    out
}

/// `ids` as comma-separated lists of at most 500, for `IN (…)` (numbers only: no injection).
fn id_lists(ids: &[u64]) -> impl Iterator<Item = String> + '_ {
    ids.chunks(500).map(|batch| batch.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

/// Keeps the stored next tree id past `tree` (it never goes down).
fn reserve_tree<S: Sql>(sql: &mut S, tree: u64) -> StoreResult<()> {
    sql.write("UPDATE counters SET value = $1 WHERE name = 'next_tree' AND value < $1", &[i(tree + 1)])
}

/// Deletes every row of a tree, and its import marker.
fn delete_tree<S: Sql>(sql: &mut S, tree: u64) -> StoreResult<()> {
    for table in [
        "nodes",
        "states",
        "chunks",
        "logs",
        "sweeps",
        "explores",
        "tree_money",
        "documents",
        "annotations",
        "texts",
        "origins",
        "jobs",
        "job_calls",
        "budget_spent",
        "budget_holds",
    ] {
        sql.write(&format!("DELETE FROM {table} WHERE tree = $1"), &[i(tree)])?;
    }
    sql.write("DELETE FROM trees WHERE id = $1", &[i(tree)])?;
    sql.write("DELETE FROM imports WHERE tree = $1", &[i(tree)])?;
    Ok(())
}

/// Log rows read as `idx, entries, crc`.
fn log_rows(rows: Vec<Vec<Cell>>) -> StoreResult<Vec<LogRow>> {
    each(rows, |next| {
        Ok(LogRow { index: next().int()? as u64, entries: next().text()?, crc: next().opt_int()?.map(|c| c as u32) })
    })
}

impl<S: Sql> Database for Db<S> {
    fn apply(&mut self, writes: &[Write]) -> StoreResult<()> {
        if let Some(lost) = &self.lease_lost {
            return Err(StoreError::LeaseLost(lost.clone()));
        }
        self.sql.begin()?;
        let queued = match &self.lease {
            Some(me) => lease::fence(&mut self.sql, me),
            None => Ok(()),
        };
        if let Err(e) = queued.and_then(|()| writes.iter().try_for_each(|w| self.write_one(w))) {
            self.sql.rollback();
            return Err(e);
        }
        self.sql.commit().map_err(|e| self.lost_or(e))
    }

    fn trees(&mut self) -> StoreResult<Vec<TreeRow>> {
        let rows = self.sql.query(
            "SELECT id, name, scenario, kind, created, last_activity, seq, nodes, budget, description FROM trees ORDER BY id",
            &[],
        )?;
        each(rows, |next| {
            Ok(TreeRow {
                id: next().int()? as u64,
                name: next().text()?,
                scenario: next().text()?,
                kind: parse_enum::<SimKind>(&next().text()?)?,
                created: next().int()? as u64,
                last_activity: next().int()? as u64,
                seq: next().int()? as u64,
                nodes: next().int()? as u64,
                budget: next().opt_int()?.map(|b| b as u64),
                description: next().opt_text()?,
            })
        })
    }

    fn nodes(&mut self, tree: u64) -> StoreResult<NodeRows> {
        let rows =
            self.sql.query(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE tree = $1 ORDER BY id"), &[i(tree)])?;
        let mut out = NodeRows::default();
        for (stored, crc) in each(rows, StoredNode::read)? {
            let id = stored.id;
            match stored.row(crc) {
                Ok(row) => out.rows.push(row),
                Err(why) => out.damaged.push((id, why)),
            }
        }
        Ok(out)
    }

    // (The trait's default reads the whole tree's records: a job's worker and its leader each
    // read one node per job, which grew with the tree.)
    fn node(&mut self, tree: u64, node: u64) -> StoreResult<Option<NodeRow>> {
        let rows = self
            .sql
            .query(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE tree = $1 AND id = $2"), &[i(tree), i(node)])?;
        Ok(each(rows, node_of)?.into_iter().next().flatten())
    }

    fn state(&mut self, tree: u64, node: u64) -> StoreResult<Option<Vec<u8>>> {
        let rows = self.sql.query("SELECT data FROM states WHERE tree = $1 AND node = $2", &[i(tree), i(node)])?;
        rows.into_iter().next().map(|r| r.into_iter().next().unwrap_or(Cell::Null).blob()).transpose()
    }

    fn chunks(&mut self, tree: u64, nodes: &[u64]) -> StoreResult<Vec<(ChunkKey, Vec<u8>)>> {
        let mut out = Vec::new();
        for list in id_lists(nodes) {
            let rows = self.sql.query(
                &format!("SELECT node, ord, data FROM chunks WHERE tree = $1 AND node IN ({list})"),
                &[i(tree)],
            )?;
            out.extend(each(rows, |next| {
                let node = next().int()? as u64;
                let ord = next().int()? as u32;
                Ok(((node, ord), next().blob()?))
            })?);
        }
        Ok(out)
    }

    fn log(&mut self, tree: u64, node: u64) -> StoreResult<Vec<LogRow>> {
        let rows = self.sql.query(
            "SELECT idx, entries, crc FROM logs WHERE tree = $1 AND node = $2 ORDER BY idx",
            &[i(tree), i(node)],
        )?;
        log_rows(rows)
    }

    fn log_from(&mut self, tree: u64, node: u64, from: u64) -> StoreResult<Vec<LogRow>> {
        let rows = self.sql.query(
            "SELECT idx, entries, crc FROM logs WHERE tree = $1 AND node = $2 AND idx >= \
             (SELECT COALESCE(MAX(idx), 0) FROM logs WHERE tree = $1 AND node = $2 AND idx <= $3) \
             ORDER BY idx",
            &[i(tree), i(node), i(from)],
        )?;
        log_rows(rows)
    }

    fn sweeps(&mut self, tree: u64) -> StoreResult<Vec<String>> {
        let rows = self.sql.query("SELECT body FROM sweeps WHERE tree = $1 ORDER BY id", &[i(tree)])?;
        rows.into_iter().map(|r| r.into_iter().next().unwrap_or(Cell::Null).text()).collect()
    }

    fn explores(&mut self, tree: u64) -> StoreResult<Vec<String>> {
        let rows = self.sql.query("SELECT body FROM explores WHERE tree = $1 ORDER BY id", &[i(tree)])?;
        rows.into_iter().map(|r| r.into_iter().next().unwrap_or(Cell::Null).text()).collect()
    }

    fn trees_with_jobs_left(&mut self) -> StoreResult<Vec<u64>> {
        // (The bodies are serde_json's compact text of `ExploreData` and `SweepData`: an
        // exploration's status is written `"status":"running"` while it runs, a replicate still
        // to measure `"pending"`. A cell label that reads "pending" only costs a look.)
        let rows = self.sql.query(
            "SELECT tree FROM explores WHERE body LIKE '%\"status\":\"running\"%'
             UNION SELECT tree FROM sweeps WHERE body LIKE '%\"pending\"%' ORDER BY tree",
            &[],
        )?;
        Ok(rows
            .into_iter()
            .filter_map(|r| match r.into_iter().next() {
                Some(Cell::Int(t)) => Some(t.max(0) as u64),
                _ => None,
            })
            .collect())
    }

    fn tree_money(&mut self, tree: u64) -> StoreResult<Option<f64>> {
        let rows = self.sql.query("SELECT money FROM tree_money WHERE tree = $1", &[i(tree)])?;
        match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
            None => Ok(None),
            Some(cell) => {
                let text = cell.text()?;
                text.parse::<f64>().ok().filter(|m| m.is_finite() && *m > 0.0).map(Some).ok_or_else(|| {
                    StoreError::Corrupt(format!("tree {tree}: its money budget {text:?} is not a number of dollars"))
                })
            }
        }
    }

    fn probe(&mut self) -> StoreResult<()> {
        self.sql.probe_space()?;
        self.sql.execute("UPDATE journal SET applied = applied", &[]).map(drop)
    }

    fn ping(&mut self) -> StoreResult<()> {
        self.sql.ping()
    }

    fn next_tree(&mut self) -> StoreResult<u64> {
        let rows = self.sql.query("SELECT value FROM counters WHERE name = 'next_tree'", &[])?;
        let counter = match rows.first().and_then(|r| r.first()) {
            Some(c) => c.int()? as u64,
            None => 0,
        };
        let rows = self.sql.query("SELECT MAX(id) FROM trees", &[])?;
        let listed = match rows.first().and_then(|r| r.first()) {
            Some(c) => c.opt_int()?.map_or(0, |m| m as u64 + 1),
            None => 0,
        };
        Ok(counter.max(listed))
    }

    fn take_tree_id(&mut self) -> StoreResult<u64> {
        // One statement: concurrent servers each get their own id (the row is locked while it
        // is updated). The counter is also kept past every listed tree (ids written by builds
        // before it was, or by an import).
        let rows = self.sql.query(
            "UPDATE counters SET value = 1 + CASE WHEN value >= listed.n THEN value ELSE listed.n END
             FROM (SELECT COALESCE(MAX(id) + 1, 0) AS n FROM trees) AS listed
             WHERE name = 'next_tree' RETURNING value - 1",
            &[],
        )?;
        match rows.first().and_then(|r| r.first()) {
            Some(c) => Ok(c.int()? as u64),
            None => Err(StoreError::Corrupt("the tree id counter is missing".into())),
        }
    }

    fn heartbeat(&mut self) -> StoreResult<()> {
        if self.lease.is_none() || self.lease_lost.is_some() {
            return Ok(());
        }
        let me = self.lease.clone().expect("checked");
        if !lease::renew(&mut self.sql, &me)? {
            self.lose();
        }
        Ok(())
    }

    fn lease_lost(&self) -> Option<String> {
        self.lease_lost.clone()
    }

    fn lease_holder(&mut self) -> StoreResult<Option<lease::Holder>> {
        lease::holder(&mut self.sql)
    }

    fn notify(&mut self, channel: &str, payload: &str) -> StoreResult<()> {
        self.sql.execute("SELECT pg_notify($1, $2)", &[P::Text(channel), P::Text(payload)]).map(drop)
    }

    fn release_lease(&mut self) {
        if let (Some(me), None) = (&self.lease, &self.lease_lost)
            && let Err(e) = lease::release(&mut self.sql, me)
        {
            tracing::warn!(error = %e, "could not release the server lease (it lapses by itself)");
        }
    }

    fn abandoned_imports(&mut self) -> StoreResult<Vec<(u64, u64)>> {
        let rows = self.sql.query(
            "SELECT i.tree, (SELECT COUNT(*) FROM nodes n WHERE n.tree = i.tree) FROM imports i ORDER BY i.tree",
            &[],
        )?;
        let found =
            rows.into_iter().map(|r| Ok((r[0].int()? as u64, r[1].int()? as u64))).collect::<StoreResult<Vec<_>>>()?;
        if found.is_empty() {
            return Ok(found);
        }
        self.sql.begin()?;
        for (tree, _) in &found {
            if let Err(e) = delete_tree(&mut self.sql, *tree) {
                self.sql.rollback();
                return Err(e);
            }
        }
        self.sql.commit()?;
        Ok(found)
    }

    fn document(&mut self, tree: u64) -> StoreResult<Option<String>> {
        let rows = self.sql.query("SELECT body FROM documents WHERE tree = $1", &[i(tree)])?;
        rows.into_iter().next().map(|r| r.into_iter().next().unwrap_or(Cell::Null).text()).transpose()
    }

    fn dataset_names(&mut self) -> StoreResult<Vec<String>> {
        let rows = self.sql.query("SELECT name FROM datasets ORDER BY name", &[])?;
        each(rows, |next| next().text())
    }

    fn dataset(&mut self, name: &str) -> StoreResult<Option<String>> {
        let rows = self.sql.query("SELECT body FROM datasets WHERE name = $1", &[P::Text(name)])?;
        rows.into_iter().next().map(|r| r.into_iter().next().unwrap_or(Cell::Null).text()).transpose()
    }

    fn scenarios(&mut self) -> StoreResult<Vec<ScenarioRow>> {
        let rows = self.sql.query("SELECT id, version, saved, body FROM scenarios ORDER BY id, version", &[])?;
        each(rows, |next| {
            Ok(ScenarioRow {
                id: next().text()?,
                version: next().int()? as u64,
                saved: next().int()? as u64,
                body: next().text()?,
            })
        })
    }

    fn scenario_counters(&mut self) -> StoreResult<Vec<(String, u64)>> {
        let rows = self.sql.query("SELECT name, value FROM counters WHERE name LIKE 'scenario:%'", &[])?;
        each(rows, |next| {
            let name = next().text()?;
            let id = name.strip_prefix("scenario:").unwrap_or(&name).to_string();
            Ok((id, next().int()? as u64))
        })
    }

    fn scenario_body(&mut self, id: &str, version: u64) -> StoreResult<Option<String>> {
        let rows =
            self.sql.query("SELECT body FROM scenarios WHERE id = $1 AND version = $2", &[P::Text(id), i(version)])?;
        rows.into_iter().next().map(|r| r.into_iter().next().unwrap_or(Cell::Null).text()).transpose()
    }

    fn origin(&mut self, tree: u64) -> StoreResult<Option<(String, u64)>> {
        let rows = self.sql.query("SELECT scenario, version FROM origins WHERE tree = $1", &[i(tree)])?;
        Ok(each(rows, |next| Ok((next().text()?, next().int()? as u64)))?.into_iter().next())
    }

    fn annotations(&mut self, tree: u64) -> StoreResult<Vec<(u64, String)>> {
        self.node_bodies("SELECT node, body FROM annotations WHERE tree = $1 ORDER BY node", tree)
    }

    fn asks(&mut self, tree: u64) -> StoreResult<Vec<(u64, String)>> {
        self.node_bodies("SELECT node, body FROM asks WHERE tree = $1 ORDER BY node, seq", tree)
    }

    fn search(&mut self, phrase: &str, tree: Option<u64>, limit: u64) -> StoreResult<Vec<TextMatch>> {
        let fts = self.sql.fts();
        let q = (fts.phrase)(phrase);
        let tree = tree.map_or(-1, |t| t as i64);
        let rows = self.sql.query(fts.query, &[P::Text(&q), P::Int(tree), i(limit)])?;
        each(rows, |next| {
            Ok(TextMatch {
                id: next().int()? as u64,
                tree: next().int()? as u64,
                node: next().int()? as u64,
                kind: next().text()?,
                score: next().int()?,
            })
        })
    }

    fn texts(&mut self, ids: &[u64]) -> StoreResult<Vec<(u64, String)>> {
        let mut out = Vec::new();
        for list in id_lists(ids) {
            let rows = self.sql.query(&format!("SELECT id, body FROM texts WHERE id IN ({list})"), &[])?;
            out.extend(each(rows, |next| Ok((next().int()? as u64, next().text()?)))?);
        }
        Ok(out)
    }

    fn interrupt_running(&mut self, keep: &[(u64, u64)]) -> StoreResult<u64> {
        // The status changes, so does the record's checksum. One that did not match stays as it
        // was (damage is never made to look intact); rows from before checksums keep none.
        let rows = self.sql.query(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE status = 'running'"), &[])?;
        let mut running = each(rows, StoredNode::read)?;
        running.retain(|(n, _)| !keep.contains(&(n.tree, n.id)));
        if running.is_empty() {
            return Ok(0);
        }
        self.sql.begin()?;
        for (mut n, crc) in running.iter().map(|(n, crc)| (n.clone(), *crc)) {
            let intact = crc.is_some_and(|c| c as u32 == n.crc());
            n.status = enum_text(&NodeStatus::Interrupted);
            let crc = if intact { Some(i64::from(n.crc())) } else { crc };
            if let Err(e) = self.sql.write(
                "UPDATE nodes SET status = $1, crc = $2 WHERE tree = $3 AND id = $4",
                &[P::Text(&n.status), P::OptInt(crc), i(n.tree), i(n.id)],
            ) {
                self.sql.rollback();
                return Err(e);
            }
        }
        self.sql.commit()?;
        Ok(running.len() as u64)
    }
}

/// Which budget a row books: a tree's own (`part` 0), or the caps of one of its explorations
/// (`part`: the exploration's id + 1), charged within the tree's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetKey {
    pub(crate) tree: u64,
    pub(crate) part: u64,
}

impl BudgetKey {
    /// Tree `tree`'s own budget.
    pub(crate) fn tree(tree: u64) -> BudgetKey {
        BudgetKey { tree, part: 0 }
    }

    /// The own caps of exploration `id` of tree `tree`.
    pub(crate) fn explore(tree: u64, id: u64) -> BudgetKey {
        BudgetKey { tree, part: id + 1 }
    }
}

/// Forgets the book of budget `key` and its holds (an exploration dropped: its id may be
/// given to the next one).
fn budget_forget<S: Sql>(sql: &mut S, key: BudgetKey) -> StoreResult<()> {
    for table in ["budget_spent", "budget_holds"] {
        sql.write(&format!("DELETE FROM {table} WHERE tree = $1 AND part = $2"), &[i(key.tree), i(key.part)])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::Sqlite;
    use crate::testing::Scratch;

    /// Schema 18 keeps what schema 17 booked: a tree's spending becomes its budget's part 0, and
    /// its holds are of part 0.
    #[test]
    fn migration_18_keeps_a_trees_booked_spending_as_its_part_0() {
        let dir = Scratch::new("migrate-18");
        let mut db = Db::new(Sqlite::open(&dir.join("simtree.db")).unwrap());
        db.migrate_to(17).unwrap();
        db.sql
            .batch(
                "INSERT INTO budget_spent (tree, tokens, calls, money, held) VALUES (4, 1200, 9, 0.25, 0.5);
                 INSERT INTO budget_holds (holder, id, tree, node, job, money) VALUES ('h/1/a', 3, 4, 7, 1, 0.5);",
            )
            .unwrap();
        db.migrate().unwrap();
        let spent = db.sql.query("SELECT tree, part, tokens, calls FROM budget_spent", &[]).unwrap();
        let cells: Vec<String> = spent[0].iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(spent.len(), 1);
        assert_eq!(cells, ["Int(4)", "Int(0)", "Int(1200)", "Int(9)"]);
        let holds = db.sql.query("SELECT part FROM budget_holds", &[]).unwrap();
        assert_eq!(format!("{:?}", holds[0][0]), "Int(0)");
        // Two parts of one tree are two rows now.
        db.sql
            .batch("INSERT INTO budget_spent (tree, part, tokens, calls, money, held) VALUES (4, 1, 0, 0, 0, 0)")
            .unwrap();
    }

    /// A relay that has some entries reads from the row holding the next one on, not the whole
    /// log again (both dialects run the same statement; PostgreSQL through tests/tests/jobs.rs).
    #[test]
    fn log_from_reads_from_the_row_holding_the_first_missing_entry() {
        let dir = Scratch::new("log-from");
        let mut db = Db::new(Sqlite::open(&dir.join("simtree.db")).unwrap());
        db.migrate().unwrap();
        // Rows of entries 0–2, 3–4 and 5.
        let row = |index: u64, count: u64| Write::Log {
            tree: 1,
            node: 2,
            index,
            count,
            entries: (index..index + count).map(|k| format!("{{\"e\":{k}}}")).collect::<Vec<_>>().join("\n"),
        };
        db.apply(&[row(0, 3), row(3, 2), row(5, 1)]).unwrap();
        let starts = |from: u64, db: &mut Db<Sqlite>| -> Vec<u64> {
            db.log_from(1, 2, from).unwrap().iter().map(|r| r.index).collect()
        };
        assert_eq!(starts(0, &mut db), [0, 3, 5]);
        assert_eq!(starts(2, &mut db), [0, 3, 5], "entry 2 is in the first row");
        assert_eq!(starts(4, &mut db), [3, 5]);
        assert_eq!(starts(5, &mut db), [5]);
        assert_eq!(starts(9, &mut db), [5], "past the end: the last row, nothing new in it");
        assert_eq!(db.log(1, 2).unwrap().len(), 3);
    }
}
