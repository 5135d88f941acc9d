//! The embedded default: one SQLite file in the data folder, WAL mode.

use std::path::Path;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, params_from_iter};

use super::vocab::{Cell, Fts, P, Sql};
use super::{StoreError, StoreResult};

pub(crate) struct Sqlite {
    conn: Connection,
    /// Where the scratch file of [`Sql::probe_space`] goes.
    probe: std::path::PathBuf,
    checkpointer: Option<Checkpointer>,
}

/// The background checkpointer's thread; dropping the sender tells it to end.
struct Checkpointer {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Drop for Sqlite {
    /// Ends the checkpointer before the connection closes, so that the connection is the last
    /// one and its close checkpoints the whole WAL into the database file (as without it).
    fn drop(&mut self) {
        if let Some(Checkpointer { stop, thread }) = self.checkpointer.take() {
            drop(stop);
            let _ = thread.join();
        }
    }
}

/// WAL pages after which a commit checkpoints inline. The background checkpointer copies pages
/// as they come, but while commits keep arriving the WAL is never wholly copied at the start of
/// one, so it only starts over after an inline checkpoint; that one finds little left to copy.
/// SQLite's default (1,000 pages) would put a checkpoint — copy and fsyncs — inside every
/// hundredth or so commit that a run waits for; 4,096 pages bound the WAL to 16 MB.
const INLINE_CHECKPOINT_PAGES: u32 = 4_096;

/// How often the background checkpointer copies committed pages from the WAL into the database.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// SQLite's error by its cause (its primary result code).
fn err(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    let message = format!("sqlite: {e}");
    match e.sqlite_error_code() {
        Some(C::DiskFull) => StoreError::Full(message),
        Some(
            C::SystemIoFailure
            | C::DatabaseBusy
            | C::DatabaseLocked
            | C::OutOfMemory
            | C::CannotOpen
            | C::FileLockingProtocolFailed
            | C::OperationInterrupted
            | C::ReadOnly,
        ) => StoreError::Io(message),
        Some(C::DatabaseCorrupt | C::NotADatabase) => StoreError::Corrupt(message),
        _ => StoreError::Db(message),
    }
}

impl Sqlite {
    pub(crate) fn open(file: &Path) -> StoreResult<Sqlite> {
        let conn = Connection::open(file).map_err(err)?;
        // WAL: readers never block the writer; NORMAL: a commit survives a crash of the process
        // (not of the machine's power), which is what kill -9 tests.
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000; \
             PRAGMA wal_autocheckpoint = {INLINE_CHECKPOINT_PAGES}; PRAGMA journal_size_limit = {};",
            u64::from(INLINE_CHECKPOINT_PAGES) * 4096
        ))
        .map_err(err)?;
        Ok(Sqlite { conn, probe: file.with_extension("probe"), checkpointer: start_checkpointer(file) })
    }
}

/// Checkpoints the WAL from a thread and connection of its own, so that commits — which runs
/// wait for — only append to the WAL. A passive checkpoint never blocks the writer; should this
/// thread fail to start or to open the file, the inline checkpoint above still bounds the WAL.
fn start_checkpointer(file: &Path) -> Option<Checkpointer> {
    use std::sync::mpsc::RecvTimeoutError;
    let conn = Connection::open(file).ok()?;
    conn.execute_batch("PRAGMA busy_timeout = 5000;").ok()?;
    let (stop, rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("simtree-checkpoint".into())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(CHECKPOINT_EVERY) {
                if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE);") {
                    tracing::warn!(error = %e, "sqlite checkpoint");
                }
            }
        })
        .ok()?;
    Some(Checkpointer { stop, thread })
}

fn value(p: &P<'_>) -> Value {
    match p {
        P::Int(i) => Value::Integer(*i),
        P::OptInt(o) => o.map_or(Value::Null, Value::Integer),
        P::Text(t) => Value::Text(t.to_string()),
        P::OptText(o) => o.map_or(Value::Null, |t| Value::Text(t.to_string())),
        P::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// FTS5 (compiled into the bundled SQLite) as an external-content index over `texts`, kept in
/// step by triggers, so a node's rows are found and deleted through `texts`' own index.
static FTS: Fts = Fts {
    ddl: "CREATE TABLE texts (id INTEGER PRIMARY KEY, tree BIGINT NOT NULL, node BIGINT NOT NULL,
            kind TEXT NOT NULL, ord BIGINT NOT NULL, body TEXT NOT NULL, UNIQUE (tree, node, kind, ord));
          CREATE VIRTUAL TABLE texts_fts USING fts5(body, content='texts', content_rowid='id',
            tokenize='unicode61 remove_diacritics 2');
          CREATE TRIGGER texts_ai AFTER INSERT ON texts BEGIN
            INSERT INTO texts_fts (rowid, body) VALUES (new.id, new.body); END;
          CREATE TRIGGER texts_ad AFTER DELETE ON texts BEGIN
            INSERT INTO texts_fts (texts_fts, rowid, body) VALUES ('delete', old.id, old.body); END;
          CREATE TRIGGER texts_au AFTER UPDATE ON texts BEGIN
            INSERT INTO texts_fts (texts_fts, rowid, body) VALUES ('delete', old.id, old.body);
            INSERT INTO texts_fts (rowid, body) VALUES (new.id, new.body); END;",
    query: "SELECT t.id, t.tree, t.node, t.kind, CAST(-bm25(texts_fts) * 1000000 AS INTEGER)
            FROM texts_fts JOIN texts t ON t.id = texts_fts.rowid
            WHERE texts_fts MATCH $1 AND ($2 < 0 OR t.tree = $2)
            ORDER BY bm25(texts_fts) LIMIT $3",
    // One FTS5 string: inside double quotes every character is text (a quote is doubled), so
    // AND, NEAR, *, ^, column filters and parentheses are words to match, never syntax.
    phrase: |q| format!("\"{}\"", q.replace('"', "\"\"")),
};

impl Sql for Sqlite {
    fn execute(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<u64> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(err)?;
        stmt.execute(params_from_iter(params.iter().map(value))).map(|n| n as u64).map_err(err)
    }

    fn query(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<Vec<Vec<Cell>>> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(err)?;
        let n = stmt.column_count();
        let mut rows = stmt.query(params_from_iter(params.iter().map(value))).map_err(err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(err)? {
            let mut cells = Vec::with_capacity(n);
            for c in 0..n {
                cells.push(match row.get_ref(c).map_err(err)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(i) => Cell::Int(i),
                    ValueRef::Real(f) => Cell::Int(f as i64),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
                });
            }
            out.push(cells);
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> StoreResult<()> {
        self.conn.execute_batch(sql).map_err(err)
    }

    fn blob_type(&self) -> &'static str {
        "BLOB"
    }

    fn now_ms_sql(&self) -> &'static str {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    }

    fn fts(&self) -> &'static Fts {
        &FTS
    }

    fn probe_space(&mut self) -> StoreResult<()> {
        use std::io::Write as _;
        let written = std::fs::File::create(&self.probe).and_then(|mut f| {
            f.write_all(&[0u8; 64 << 10])?;
            f.sync_data()
        });
        let _ = std::fs::remove_file(&self.probe);
        written.map_err(|e| {
            StoreError::from_io(format!("cannot write in the data folder ({}): {e}", self.probe.display()), &e)
        })
    }
}
