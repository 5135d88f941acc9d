//! The vocabulary the store's SQL is written in: a statement's parameters ([`P`]), a row's
//! cells ([`Cell`]), what each database driver provides ([`Sql`]) and its full-text search
//! ([`Fts`]). It names nothing else of the store, so the drivers, the lease and the job queue
//! use it without depending on [`super::sql::Db`], which uses them.

use super::{StoreError, StoreResult};

/// A statement parameter.
pub(crate) enum P<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'a str),
    OptText(Option<&'a str>),
    Blob(&'a [u8]),
}

/// A result cell.
#[derive(Debug)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl Cell {
    pub(super) fn int(&self) -> StoreResult<i64> {
        match self {
            Cell::Int(i) => Ok(*i),
            other => Err(StoreError::Corrupt(format!("expected an integer, found {other:?}"))),
        }
    }

    pub(super) fn opt_int(&self) -> StoreResult<Option<i64>> {
        match self {
            Cell::Null => Ok(None),
            c => c.int().map(Some),
        }
    }

    pub(super) fn text(self) -> StoreResult<String> {
        match self {
            Cell::Text(t) => Ok(t),
            other => Err(StoreError::Corrupt(format!("expected text, found {other:?}"))),
        }
    }

    pub(super) fn opt_text(self) -> StoreResult<Option<String>> {
        match self {
            Cell::Null => Ok(None),
            c => c.text().map(Some),
        }
    }

    pub(super) fn blob(self) -> StoreResult<Vec<u8>> {
        match self {
            Cell::Blob(b) => Ok(b),
            other => Err(StoreError::Corrupt(format!("expected bytes, found {other:?}"))),
        }
    }
}

/// What a driver provides.
pub(crate) trait Sql: Send {
    fn execute(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<u64>;
    fn query(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<Vec<Vec<Cell>>>;
    /// Several statements without parameters (schema, BEGIN/COMMIT).
    fn batch(&mut self, sql: &str) -> StoreResult<()>;
    /// Starts a write transaction: the statements given to [`Sql::write`] until [`Sql::commit`]
    /// are one transaction.
    fn begin(&mut self) -> StoreResult<()> {
        self.batch("BEGIN")
    }
    /// A statement of the write transaction, whose result is not needed: SQLite runs it now;
    /// PostgreSQL queues it and sends the whole transaction at once, at commit (one round trip).
    /// An error may therefore show only at commit.
    fn write(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<()> {
        self.execute(sql, params).map(drop)
    }
    fn commit(&mut self) -> StoreResult<()> {
        self.batch("COMMIT")
    }
    /// Abandons the write transaction (after a failed [`Sql::write`]).
    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }
    /// `BLOB` or `BYTEA`.
    fn blob_type(&self) -> &'static str;
    /// A check that writes can succeed beyond what a row update shows (SQLite: a scratch file
    /// beside the database, since a row may fit in WAL pages already allocated).
    fn probe_space(&mut self) -> StoreResult<()> {
        Ok(())
    }
    /// See [`Database::ping`].
    fn ping(&mut self) -> StoreResult<()> {
        Ok(())
    }
    /// The database's clock in Unix milliseconds, as an SQL expression (the server lease is
    /// timed by it, so that hosts whose clocks disagree agree on when a lease lapses).
    fn now_ms_sql(&self) -> &'static str;
    /// The database's own full-text search over `texts` (the notebook's search).
    fn fts(&self) -> &'static Fts;
}

/// One database's full-text search: the table of texts with its index, the query, and how a
/// user's words become a query that matches them as a phrase (never as the index's syntax).
pub(crate) struct Fts {
    /// Replaces `{search}` in the notebook migration.
    pub(crate) ddl: &'static str,
    /// `$1` the query, `$2` a tree (or -1 for every tree), `$3` at most this many rows; gives
    /// `id, tree, node, kind, score` (a score in millionths, higher better), best first.
    pub(crate) query: &'static str,
    /// The `$1` of `query` for the user's text.
    pub(crate) phrase: fn(&str) -> String,
}

/// An id or count as a statement parameter.
pub(crate) fn i(v: u64) -> P<'static> {
    P::Int(v as i64)
}
