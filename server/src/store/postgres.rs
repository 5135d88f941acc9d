//! PostgreSQL, for teams: the synchronous client, used only from the store's own thread (it runs
//! a small runtime of its own, which must not be nested in the server's).

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls};

use super::sql::{Cell, Fts, P, Sql};
use super::{StoreError, StoreResult};

pub struct Postgres {
    client: Client,
    url: String,
    /// Reconnection after the connection was lost: when the next attempt may be made, and the
    /// wait after it fails (doubling from 100 ms to 5 s).
    retry_at: std::time::Instant,
    backoff: std::time::Duration,
    /// Why the last attempt failed (repeated while waiting for the next).
    last_error: Option<String>,
    /// Inside BEGIN … COMMIT: a lost connection is not replaced until the transaction ends
    /// (statements on a new connection would commit one by one).
    in_tx: bool,
}

fn err(e: postgres::Error) -> StoreError {
    // "db error" alone says nothing: the server's message is the source.
    match std::error::Error::source(&e) {
        Some(cause) => StoreError(format!("postgresql: {e}: {cause}")),
        None => StoreError(format!("postgresql: {e}")),
    }
}

const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

impl Postgres {
    pub fn connect(url: &str) -> StoreResult<Postgres> {
        let client = Client::connect(url, NoTls).map_err(err)?;
        Ok(Postgres {
            client,
            url: url.to_string(),
            retry_at: std::time::Instant::now(),
            backoff: FIRST_BACKOFF,
            last_error: None,
            in_tx: false,
        })
    }

    /// The client, connected again if the connection was lost (a database restart, a network
    /// cut): at most one attempt per backoff period; meanwhile the last error is returned, so
    /// the store's writes are kept and retried and `/ready` says why.
    fn client(&mut self) -> StoreResult<&mut Client> {
        if !self.client.is_closed() {
            return Ok(&mut self.client);
        }
        if self.in_tx {
            return Err(StoreError(
                "postgresql: the connection was lost in a transaction".into(),
            ));
        }
        let now = std::time::Instant::now();
        if now < self.retry_at {
            let why = self.last_error.as_deref().unwrap_or("the connection was lost");
            return Err(StoreError(format!("postgresql: disconnected, reconnecting: {why}")));
        }
        match Client::connect(&self.url, NoTls) {
            Ok(client) => {
                tracing::warn!("postgresql: connected again");
                self.client = client;
                self.backoff = FIRST_BACKOFF;
                self.last_error = None;
                Ok(&mut self.client)
            }
            Err(e) => {
                self.retry_at = now + self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                let e = err(e).0;
                let message = format!("postgresql: disconnected, reconnecting: {e}");
                self.last_error = Some(e);
                Err(StoreError(message))
            }
        }
    }
}

/// Owned parameter values (the client wants `&(dyn ToSql + Sync)`).
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

    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Owned::Int(i) => i,
            Owned::OptInt(o) => o,
            Owned::Text(t) => t,
            Owned::OptText(o) => o,
            Owned::Blob(b) => b,
        }
    }
}

fn with_params<R>(params: &[P<'_>], f: impl FnOnce(&[&(dyn ToSql + Sync)]) -> R) -> R {
    let owned: Vec<Owned> = params.iter().map(Owned::of).collect();
    let refs: Vec<&(dyn ToSql + Sync)> = owned.iter().map(Owned::as_sql).collect();
    f(&refs)
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
        let client = self.client()?;
        with_params(params, |ps| client.execute(sql, ps)).map_err(err)
    }

    fn query(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<Vec<Vec<Cell>>> {
        let client = self.client()?;
        let rows = with_params(params, |ps| client.query(sql, ps)).map_err(err)?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|c| {
                        let ty = row.columns()[c].type_().clone();
                        Ok(if ty == Type::INT8 {
                            row.try_get::<_, Option<i64>>(c)
                                .map_err(err)?
                                .map_or(Cell::Null, Cell::Int)
                        } else if ty == Type::INT4 {
                            row.try_get::<_, Option<i32>>(c)
                                .map_err(err)?
                                .map_or(Cell::Null, |v| Cell::Int(v.into()))
                        } else if ty == Type::BYTEA {
                            row.try_get::<_, Option<Vec<u8>>>(c)
                                .map_err(err)?
                                .map_or(Cell::Null, Cell::Blob)
                        } else {
                            row.try_get::<_, Option<String>>(c)
                                .map_err(err)?
                                .map_or(Cell::Null, Cell::Text)
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
                    "COMMIT" => Err(StoreError(
                        "postgresql: the connection was lost in a transaction".into(),
                    )),
                    _ => Ok(()),
                };
            }
            return self.client.batch_execute(sql).map_err(err);
        }
        self.client()?.batch_execute(sql).map_err(err)?;
        if sql == "BEGIN" {
            self.in_tx = true;
        }
        Ok(())
    }

    fn ping(&mut self) -> StoreResult<()> {
        self.client()?.batch_execute("SELECT 1").map_err(err)
    }

    fn blob_type(&self) -> &'static str {
        "BYTEA"
    }

    fn fts(&self) -> &'static Fts {
        &FTS
    }
}
