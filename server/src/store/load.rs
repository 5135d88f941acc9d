//! The LLM endpoint load board on PostgreSQL ([`crate::llm::endpoints`] says what it is for).
//!
//! One table, `llm_load`: a row per process (holder) and endpoint with what the process has in
//! flight there, the slots it holds and what it wants, and when the row expires (Unix
//! milliseconds of the database's clock, so hosts whose clocks disagree still agree). Every
//! exchange is one transaction under one advisory lock: read the others' unexpired rows, decide,
//! replace this holder's rows (and drop expired ones), commit. The table is `UNLOGGED`: its rows
//! live a few seconds and are rewritten ten times a second, so they are not worth a WAL write or
//! an fsync, and a database crash that empties it loses nothing (the processes write it again).
//! It is created here, not by a migration: it holds no data to keep, only SQLite-less setups
//! use it, and a database that never saw a second process never has it.
//!
//! The board talks to the database over a connection of its own on the server's runtime, so the
//! store's thread (and its write pipeline) never waits for it.

use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

use crate::llm::BoxFuture;
use crate::llm::endpoints::{BoardError, Decide, LoadBoard, LoadRow, ROW_TTL};

/// The advisory lock every exchange takes (any fixed number; "SIMTLOAD").
const LOCK: i64 = 0x5349_4d54_4c4f_4144;

const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// A process's place on the board.
pub struct PgBoard {
    url: String,
    holder: String,
    client: tokio::sync::Mutex<Option<Client>>,
}

fn err(e: tokio_postgres::Error) -> BoardError {
    match std::error::Error::source(&e) {
        Some(cause) => BoardError(format!("postgresql: {e}: {cause}")),
        None => BoardError(format!("postgresql: {e}")),
    }
}

async fn connect(url: &str) -> Result<Client, BoardError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(err)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "load board: postgresql connection ended");
        }
    });
    // (A frozen process mid-exchange would hold the board's advisory lock for good.)
    client.batch_execute(super::postgres::IDLE_IN_TRANSACTION).await.map_err(err)?;
    Ok(client)
}

impl PgBoard {
    /// Connects (inside a tokio runtime) and creates the table if needed. `holder` names this
    /// process uniquely (see [`super::lease::Lease::this_process`]).
    pub async fn connect(url: &str, holder: String) -> Result<PgBoard, BoardError> {
        let mut client = connect(url).await?;
        let tx = client.transaction().await.map_err(err)?;
        tx.execute_typed("SELECT pg_advisory_xact_lock($1)", &[(&LOCK, Type::INT8)]).await.map_err(err)?;
        tx.batch_execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS llm_load (
                holder TEXT NOT NULL, endpoint TEXT NOT NULL, in_flight BIGINT NOT NULL,
                reserved BIGINT NOT NULL, wanted BIGINT NOT NULL, expires BIGINT NOT NULL,
                PRIMARY KEY (holder, endpoint))",
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(PgBoard { url: url.to_string(), holder, client: tokio::sync::Mutex::new(Some(client)) })
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The connection, made again if it was lost.
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Client>>, BoardError> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = None;
            *guard = Some(connect(&self.url).await?);
        }
        Ok(guard)
    }

    async fn exchange_now(&self, decide: Decide<'_>) -> Result<(), BoardError> {
        let mut guard = self.client().await?;
        let client = guard.as_mut().ok_or_else(|| BoardError("postgresql: no connection".into()))?;
        let tx = client.transaction().await.map_err(err)?;
        tx.execute_typed("SELECT pg_advisory_xact_lock($1)", &[(&LOCK, Type::INT8)]).await.map_err(err)?;
        let rows = tx
            .query_typed(
                &format!(
                    "SELECT endpoint, in_flight, reserved, wanted FROM llm_load
                     WHERE holder <> $1 AND expires > {NOW_MS}"
                ),
                &[(&self.holder, Type::TEXT)],
            )
            .await
            .map_err(err)?;
        let others = rows
            .iter()
            .map(|r| {
                let n = |c: usize| r.try_get::<_, i64>(c).map(|v| v.max(0) as u64);
                Ok(LoadRow { endpoint: r.try_get(0)?, in_flight: n(1)?, reserved: n(2)?, wanted: n(3)? })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(err)?;
        let mine = decide(&others);
        tx.execute_typed(
            &format!("DELETE FROM llm_load WHERE holder = $1 OR expires <= {NOW_MS}"),
            &[(&self.holder, Type::TEXT)],
        )
        .await
        .map_err(err)?;
        if !mine.is_empty() {
            let endpoints: Vec<&str> = mine.iter().map(|r| r.endpoint.as_str()).collect();
            let col = |f: fn(&LoadRow) -> u64| mine.iter().map(|r| f(r) as i64).collect::<Vec<i64>>();
            let (in_flight, reserved, wanted) = (col(|r| r.in_flight), col(|r| r.reserved), col(|r| r.wanted));
            let ttl = ROW_TTL.as_millis() as i64;
            tx.execute_typed(
                &format!(
                    "INSERT INTO llm_load (holder, endpoint, in_flight, reserved, wanted, expires)
                     SELECT $1, e, i, r, w, {NOW_MS} + $6
                     FROM unnest($2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[]) AS t(e, i, r, w)"
                ),
                &[
                    (&self.holder, Type::TEXT),
                    (&endpoints, Type::TEXT_ARRAY),
                    (&in_flight, Type::INT8_ARRAY),
                    (&reserved, Type::INT8_ARRAY),
                    (&wanted, Type::INT8_ARRAY),
                    (&ttl, Type::INT8),
                ],
            )
            .await
            .map_err(err)?;
        }
        tx.commit().await.map_err(err)
    }
}

impl LoadBoard for PgBoard {
    fn exchange<'a>(&'a self, decide: Decide<'a>) -> BoxFuture<'a, Result<(), BoardError>> {
        Box::pin(async move {
            let r = self.exchange_now(decide).await;
            if r.is_err() {
                // A failed statement may leave the connection unusable; start afresh next time.
                *self.client.lock().await = None;
            }
            r
        })
    }

    fn leave(&self) -> BoxFuture<'_, Result<(), BoardError>> {
        Box::pin(async move {
            let guard = self.client().await?;
            let client = guard.as_ref().ok_or_else(|| BoardError("postgresql: no connection".into()))?;
            client
                .execute_typed("DELETE FROM llm_load WHERE holder = $1", &[(&self.holder, Type::TEXT)])
                .await
                .map(|_| ())
                .map_err(err)
        })
    }
}
