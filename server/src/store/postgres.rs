//! PostgreSQL, for teams: the synchronous client, used only from the store's own thread (it runs
//! a small runtime of its own, which must not be nested in the server's).

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls};

use super::sql::{Cell, P, Sql};
use super::{StoreError, StoreResult};

pub struct Postgres {
    client: Client,
}

fn err(e: postgres::Error) -> StoreError {
    StoreError(format!("postgresql: {e}"))
}

impl Postgres {
    pub fn connect(url: &str) -> StoreResult<Postgres> {
        let client = Client::connect(url, NoTls).map_err(err)?;
        Ok(Postgres { client })
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

impl Sql for Postgres {
    fn execute(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<u64> {
        let client = &mut self.client;
        with_params(params, |ps| client.execute(sql, ps)).map_err(err)
    }

    fn query(&mut self, sql: &str, params: &[P<'_>]) -> StoreResult<Vec<Vec<Cell>>> {
        let client = &mut self.client;
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
        self.client.batch_execute(sql).map_err(err)
    }

    fn blob_type(&self) -> &'static str {
        "BYTEA"
    }
}
