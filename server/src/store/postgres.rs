//! PostgreSQL, for teams: tokio-postgres on a small single-threaded runtime of the store's own
//! thread (it must not be nested in the server's), driven with `block_on` one request at a time.
//!
//! A write transaction is pipelined: its statements are queued ([`Sql::write`]) and sent at
//! [`Sql::commit`] all at once — BEGIN, every statement, COMMIT — then their answers are read.
//! One round trip per commit instead of two per statement (the synchronous client prepared
//! each statement, then ran it): a run's end is about eight statements, and on a network each
//! round trip costs what the statement does. The write statements are prepared once per
//! connection (their texts are fixed), so a commit carries only their names and values and the
//! database neither parses nor plans them again. Reads and the other statements go one at a
//! time, unprepared (`query_typed`: one round trip each).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use super::vocab::{Cell, Fts, P, Sql};
use super::{StoreError, StoreResult};

/// A driver's runtime, shut down in the background when dropped: a connection dropped inside an
/// async context (a worker's queue as the worker stops) must not block it.
struct Rt(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Rt {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

fn runtime() -> StoreResult<Rt> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| Rt(Some(rt)))
        .map_err(|e| StoreError::Io(format!("postgresql: cannot start its runtime: {e}")))
}

pub(crate) struct Postgres {
    rt: Rt,
    client: Client,
    url: String,
    /// Reconnection after the connection was lost: when the next attempt may be made, and the
    /// wait after it fails (doubling from 100 ms to 5 s).
    retry_at: std::time::Instant,
    backoff: std::time::Duration,
    /// Why the last attempt failed (repeated while waiting for the next).
    last_error: Option<String>,
    /// Inside BEGIN … COMMIT sent one by one ([`Sql::batch`]): a lost connection is not replaced
    /// until the transaction ends (statements on a new connection would commit one by one).
    in_tx: bool,
    /// The statements of the pipelined write transaction, sent at [`Sql::commit`].
    queued: Vec<(String, Vec<Owned>)>,
    /// The write statements prepared on this connection, by text and parameter types: a
    /// commit sends only their names and values (no parsing or planning per statement).
    prepared: HashMap<(String, Vec<Type>), Statement>,
}

/// PostgreSQL's error by its cause: the SQLSTATE class when the server answered, else (a lost
/// or refused connection, a closed client) an I/O fault.
fn err(e: tokio_postgres::Error) -> StoreError {
    // "db error" alone says nothing: the server's message is the source.
    let message = match std::error::Error::source(&e) {
        Some(cause) => format!("postgresql: {e}: {cause}"),
        None => format!("postgresql: {e}"),
    };
    let Some(state) = e.code() else {
        return StoreError::Io(message);
    };
    match state.code() {
        // disk_full
        "53100" => StoreError::Full(message),
        // data_corrupted, index_corrupted
        "XX001" | "XX002" => StoreError::Corrupt(message),
        // Connection exceptions, insufficient resources, operator intervention (shutdown,
        // cannot connect now), system errors (I/O), transaction rollbacks (serialization,
        // deadlock), lock not available.
        c if ["08", "53", "57", "58", "40"].iter().any(|class| c.starts_with(class)) || c == "55P03" => {
            StoreError::Io(message)
        }
        _ => StoreError::Db(message),
    }
}

/// Most write statements kept prepared (their texts are fixed, so a few dozen are in use; the
/// bound only guards against texts that would not be).
const MAX_PREPARED: usize = 256;

const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects on `rt`; the connection's task runs on it whenever the store waits for an answer.
fn connect(rt: &tokio::runtime::Runtime, url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = rt.block_on(tokio_postgres::connect(url, NoTls))?;
    rt.spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgresql connection ended");
        }
    });
    rt.block_on(client.batch_execute(IDLE_IN_TRANSACTION))?;
    Ok(client)
}

/// Every connection's transactions are ended by PostgreSQL once idle that long. Ours are sent
/// whole and never wait on the client, so only a process that froze (SIGSTOP, a stalled VM)
/// mid-transaction is cut off — and with it the row and advisory locks it held, which would
/// otherwise stop every other process (a follower taking over) until its connection died.
pub(crate) const IDLE_IN_TRANSACTION: &str = "SET idle_in_transaction_session_timeout = '5s'";

impl Postgres {
    pub(crate) fn connect(url: &str) -> StoreResult<Postgres> {
        let rt = runtime()?;
        let client = connect(&rt, url).map_err(err)?;
        Ok(Postgres {
            rt,
            client,
            url: url.to_string(),
            retry_at: std::time::Instant::now(),
            backoff: FIRST_BACKOFF,
            last_error: None,
            in_tx: false,
            queued: Vec::new(),
            prepared: HashMap::new(),
        })
    }

    /// Connects again if the connection was lost (a database restart, a network cut): at most
    /// one attempt per backoff period; meanwhile the last error is returned, so the store's
    /// writes are kept and retried and `/ready` says why.
    fn connected(&mut self) -> StoreResult<()> {
        if !self.client.is_closed() {
            return Ok(());
        }
        if self.in_tx {
            return Err(StoreError::Io("postgresql: the connection was lost in a transaction".into()));
        }
        let now = std::time::Instant::now();
        if now < self.retry_at {
            let why = self.last_error.as_deref().unwrap_or("the connection was lost");
            return Err(StoreError::Io(format!("postgresql: disconnected, reconnecting: {why}")));
        }
        match connect(&self.rt, &self.url) {
            Ok(client) => {
                tracing::warn!("postgresql: connected again");
                self.client = client;
                // Prepared statements belong to the connection.
                self.prepared.clear();
                self.backoff = FIRST_BACKOFF;
                self.last_error = None;
                Ok(())
            }
            Err(e) => {
                self.retry_at = now + self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                let e = err(e).message().to_string();
                let message = format!("postgresql: disconnected, reconnecting: {e}");
                self.last_error = Some(e);
                Err(StoreError::Io(message))
            }
        }
    }
}

/// Owned parameter values, with the type they are sent as (statements are not prepared, so
/// the server is told the types).
enum Owned {
    Int(i64),
    OptInt(Option<i64>),
    Text(String),
    OptText(Option<String>),
    Blob(Vec<u8>),
}

impl Owned {
    fn of(p: &P<'_>) -> Owned {
        match p {
            P::Int(i) => Owned::Int(*i),
            P::OptInt(o) => Owned::OptInt(*o),
            P::Text(t) => Owned::Text(t.to_string()),
            P::OptText(o) => Owned::OptText(o.map(str::to_string)),
            P::Blob(b) => Owned::Blob(b.to_vec()),
        }
    }

    fn typed(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            Owned::Int(i) => (i, Type::INT8),
            Owned::OptInt(o) => (o, Type::INT8),
            Owned::Text(t) => (t, Type::TEXT),
            Owned::OptText(o) => (o, Type::TEXT),
            Owned::Blob(b) => (b, Type::BYTEA),
        }
    }
}

fn owned(params: &[P<'_>]) -> Vec<Owned> {
    params.iter().map(Owned::of).collect()
}

fn typed(owned: &[Owned]) -> Vec<(&(dyn ToSql + Sync), Type)> {
    owned.iter().map(Owned::typed).collect()
}

type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + 'a>>;
type Answer<'a> = Pending<'a, u64>;

/// Sends every request at once and waits for every answer, in order. tokio-postgres sends a
/// request when its future is first polled, so the first pass polls all of them in order; the
/// answers come back in that order, so later passes start at the first unanswered one.
async fn pipelined<T>(mut answers: Vec<Pending<'_, T>>) -> Vec<Result<T, tokio_postgres::Error>> {
    let mut out: Vec<Option<Result<T, tokio_postgres::Error>>> = answers.iter().map(|_| None).collect();
    let mut first = true;
    let mut next = 0;
    std::future::poll_fn(|cx| {
        let mut k = next;
        while k < answers.len() {
            if out[k].is_none() {
                match answers[k].as_mut().poll(cx) {
                    Poll::Ready(r) => out[k] = Some(r),
                    Poll::Pending if first => {}
                    Poll::Pending => break,
                }
            }
            k += 1;
        }
        first = false;
        while next < out.len() && out[next].is_some() {
            next += 1;
        }
        if next == out.len() { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// A generated tsvector column under a GIN index; the user's words go in as a phrase through
/// `phraseto_tsquery`, which reads no operators.
static FTS: Fts = Fts {
    ddl: "CREATE TABLE texts (id BIGSERIAL PRIMARY KEY, tree BIGINT NOT NULL, node BIGINT NOT NULL,
            kind TEXT NOT NULL, ord BIGINT NOT NULL, body TEXT NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED,
            UNIQUE (tree, node, kind, ord));
          CREATE INDEX texts_tsv ON texts USING GIN (tsv);",
    query: "SELECT t.id, t.tree, t.node, t.kind, CAST(ts_rank(t.tsv, q) * 1000000 AS BIGINT)
            FROM texts t, phraseto_tsquery('simple', $1) q
            WHERE t.tsv @@ q AND ($2::BIGINT < 0 OR t.tree = $2::BIGINT)
            ORDER BY 5 DESC, t.id LIMIT $3",
    phrase: str::to_string,
};

impl Sql for Postgres {
    fn execute(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<u64> {
        self.connected()?;
        let owned = owned(params);
        let client = &self.client;
        self.rt.block_on(client.execute_typed(sql, &typed(&owned))).map_err(err)
    }

    fn query(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<Vec<Vec<Cell>>> {
        self.connected()?;
        let owned = owned(params);
        let client = &self.client;
        let rows = self.rt.block_on(client.query_typed(sql, &typed(&owned))).map_err(err)?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|c| {
                        let ty = row.columns()[c].type_().clone();
                        Ok(if ty == Type::INT8 {
                            row.try_get::<_, Option<i64>>(c).map_err(err)?.map_or(Cell::Null, Cell::Int)
                        } else if ty == Type::INT4 {
                            row.try_get::<_, Option<i32>>(c).map_err(err)?.map_or(Cell::Null, |v| Cell::Int(v.into()))
                        } else if ty == Type::BYTEA {
                            row.try_get::<_, Option<Vec<u8>>>(c).map_err(err)?.map_or(Cell::Null, Cell::Blob)
                        } else {
                            row.try_get::<_, Option<String>>(c).map_err(err)?.map_or(Cell::Null, Cell::Text)
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn batch(&mut self, sql: &str) -> StoreResult<()> {
        if matches!(sql, "COMMIT" | "ROLLBACK") && std::mem::take(&mut self.in_tx) {
            // Never on a new connection: a COMMIT there would succeed and commit nothing.
            if self.client.is_closed() {
                return match sql {
                    "COMMIT" => Err(StoreError::Io("postgresql: the connection was lost in a transaction".into())),
                    _ => Ok(()),
                };
            }
            return self.rt.block_on(self.client.batch_execute(sql)).map_err(err);
        }
        self.connected()?;
        self.rt.block_on(self.client.batch_execute(sql)).map_err(err)?;
        if sql == "BEGIN" {
            self.in_tx = true;
        }
        Ok(())
    }

    fn begin(&mut self) -> StoreResult<()> {
        self.queued.clear();
        Ok(())
    }

    fn write(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<()> {
        self.queued.push((sql.to_string(), owned(params)));
        Ok(())
    }

    fn commit(&mut self) -> StoreResult<()> {
        self.commit_prepared()
    }

    fn rollback(&mut self) {
        // Nothing was sent: the transaction is one pipeline, sent at commit.
        self.queued.clear();
    }

    fn ping(&mut self) -> StoreResult<()> {
        self.connected()?;
        self.rt.block_on(self.client.batch_execute("SELECT 1")).map_err(err)
    }

    fn blob_type(&self) -> &'static str {
        "BYTEA"
    }

    fn now_ms_sql(&self) -> &'static str {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    }

    fn fts(&self) -> &'static Fts {
        &FTS
    }
}

impl Postgres {
    /// Sends the queued write transaction as one pipeline — BEGIN, the statements (prepared
    /// once per connection: the statements not prepared yet are prepared first, together, in
    /// one round trip), COMMIT — and reads the answers.
    fn commit_prepared(&mut self) -> StoreResult<()> {
        let queued = std::mem::take(&mut self.queued);
        self.connected()?;
        let (rt, client) = (&self.rt, &self.client);
        // Statements not prepared on this connection yet: prepared together (one round trip).
        let missing_of = |prepared: &HashMap<(String, Vec<Type>), Statement>| {
            let mut missing: Vec<(&str, Vec<Type>)> = Vec::new();
            for (sql, p) in &queued {
                let types: Vec<Type> = p.iter().map(|o| o.typed().1).collect();
                let known = prepared.contains_key(&(sql.clone(), types.clone()))
                    || missing.iter().any(|(s, t)| s == sql && *t == types);
                if !known {
                    missing.push((sql, types));
                }
            }
            missing
        };
        let mut missing = missing_of(&self.prepared);
        if !missing.is_empty() {
            if self.prepared.len() + missing.len() > MAX_PREPARED {
                // Every statement of this transaction is prepared again, those known a moment
                // ago too (a lookup of one below panicked once the cache was cleared).
                self.prepared.clear();
                missing = missing_of(&self.prepared);
            }
            let futures: Vec<Pending<'_, Statement>> = missing
                .iter()
                .map(|(sql, types)| Box::pin(client.prepare_typed(sql, types)) as Pending<'_, Statement>)
                .collect();
            let prepared = rt.block_on(pipelined(futures));
            for ((sql, types), stmt) in missing.into_iter().zip(prepared) {
                self.prepared.insert((sql.to_string(), types), stmt.map_err(err)?);
            }
        }
        let statements: Vec<&Statement> = queued
            .iter()
            .map(|(sql, p)| &self.prepared[&(sql.clone(), p.iter().map(|o| o.typed().1).collect::<Vec<_>>())])
            .collect();
        let params: Vec<Vec<&(dyn ToSql + Sync)>> =
            queued.iter().map(|(_, p)| p.iter().map(|o| o.typed().0).collect()).collect();
        let mut answers: Vec<Answer<'_>> = Vec::with_capacity(queued.len() + 2);
        answers.push(Box::pin(client.execute_typed("BEGIN", &[])));
        for (stmt, p) in statements.into_iter().zip(&params) {
            answers.push(Box::pin(client.execute(stmt, p)));
        }
        answers.push(Box::pin(client.execute_typed("COMMIT", &[])));
        // All of them are answered: after a failed statement the others fail ("current
        // transaction is aborted") and COMMIT rolls back; the first error is the cause.
        let results = rt.block_on(pipelined(answers));
        let failed = results.into_iter().find_map(Result::err);
        if let Some(e) = failed {
            // A statement prepared before a schema change may be what failed: prepare afresh.
            self.prepared.clear();
            return Err(err(e));
        }
        Ok(())
    }
}

/// A connection that only listens (`LISTEN` on each of its channels), for the run queue's wake-ups (see
/// `store/jobs.rs`): notifications arrive as the connection is driven, during [`Self::wait`].
pub(crate) struct Listening {
    rt: Rt,
    url: String,
    channels: &'static [&'static str],
    client: Option<Client>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// When to try connecting again after the connection was lost.
    retry_at: std::time::Instant,
}

impl Listening {
    pub(crate) fn connect(url: &str, channels: &'static [&'static str]) -> StoreResult<Listening> {
        let rt = runtime()?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut l =
            Listening { rt, url: url.to_string(), channels, client: None, tx, rx, retry_at: std::time::Instant::now() };
        l.open().map_err(err)?;
        Ok(l)
    }

    fn open(&mut self) -> Result<(), tokio_postgres::Error> {
        let (client, mut connection) = self.rt.block_on(tokio_postgres::connect(&self.url, NoTls))?;
        let tx = self.tx.clone();
        self.rt.spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        // The log channel's payloads are told apart by a prefix.
                        let payload = match n.channel() {
                            "simtree_log" => format!("log:{}", n.payload()),
                            _ => n.payload().to_string(),
                        };
                        let _ = tx.send(payload);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "postgresql listening connection ended");
                        break;
                    }
                }
            }
        });
        let listen: String = self.channels.iter().map(|c| format!("LISTEN {c};")).collect();
        self.rt.block_on(client.batch_execute(&listen))?;
        self.client = Some(client);
        Ok(())
    }

    /// Waits up to `timeout` for notifications and returns their payloads (none: the timeout
    /// passed). A lost connection is opened again (at most once a second); meanwhile this
    /// just waits, and the caller's polling covers what was missed.
    pub(crate) fn wait(&mut self, timeout: std::time::Duration) -> Vec<String> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            let now = std::time::Instant::now();
            if now >= self.retry_at {
                self.retry_at = now + std::time::Duration::from_secs(1);
                if let Err(e) = self.open() {
                    tracing::debug!(error = %err(e), "postgresql: cannot listen yet");
                }
            }
            if self.client.is_none() {
                std::thread::sleep(timeout.min(self.retry_at.saturating_duration_since(now)));
                return Vec::new();
            }
        }
        let rx = &mut self.rx;
        let first = self.rt.block_on(async { tokio::time::timeout(timeout, rx.recv()).await });
        let mut out: Vec<String> = first.ok().flatten().into_iter().collect();
        while let Ok(more) = self.rx.try_recv() {
            out.push(more);
        }
        out
    }
}
