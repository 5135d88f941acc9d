//! The long-format table routes: `GET …/sweep/{id}/table` (a sweep's runs, one row per run ×
//! step × variable) and `GET …/node/{n}/table` (the log around a node, one row per entry), as
//! CSV or NDJSON, a page at a time. The tables are the workbench's (`workbench::table`); this file
//! reads the query and streams the page.
//!
//! A page's rows are made in a blocking task and sent as they come, in chunks of about 64 KiB.
//! `X-Total-Count` says how many rows the whole table has, and `X-Next-Offset` (only when more
//! follow) where the next page starts.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::error::{ApiError, ApiPath, ApiQuery, blocking};
use super::state::AppState;
use super::transfer::channel_body;
use crate::tree::NodeId;
use crate::workbench::table::{Page, Scope, Table, TableFormat, write_header, write_row};

type St = State<Arc<AppState>>;

/// Bytes gathered before a chunk of a page is sent.
const CHUNK: usize = 64 * 1024;

/// The query of `GET …/sweep/{id}/table` (documented by hand in `openapi.rs`).
#[derive(Deserialize)]
pub(crate) struct SweepTableParams {
    format: Option<String>,
    offset: Option<u64>,
    limit: Option<u64>,
    /// Whether each run's own steps follow its metric rows (default true).
    series: Option<bool>,
}

/// The query of `GET …/node/{n}/table` (documented by hand in `openapi.rs`).
#[derive(Deserialize)]
pub(crate) struct LogTableParams {
    format: Option<String>,
    offset: Option<u64>,
    limit: Option<u64>,
    /// `subtree` (default) or `path`.
    scope: Option<String>,
}

/// `GET …/sweep/{id}/table?format=csv|ndjson&series=true&offset=&limit=`.
pub(crate) async fn sweep_table(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
    ApiQuery(p): ApiQuery<SweepTableParams>,
) -> Result<Response, ApiError> {
    let format = TableFormat::parse(p.format.as_deref())?;
    let page = Page::new(p.offset, p.limit)?;
    let series = p.series.unwrap_or(true);
    let wb = app.wb.clone();
    let table = blocking("the sweep's table", move || wb.transfer().sweep_runs_table(tree, id, series)).await?;
    let table = table.ok_or_else(|| ApiError::not_found(format!("sweep {id} not found in simtree {tree}")))?;
    Ok(stream(table, format, page))
}

/// `GET …/node/{n}/table?format=csv|ndjson&scope=subtree|path&offset=&limit=`.
pub(crate) async fn log_table(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
    ApiQuery(p): ApiQuery<LogTableParams>,
) -> Result<Response, ApiError> {
    let format = TableFormat::parse(p.format.as_deref())?;
    let page = Page::new(p.offset, p.limit)?;
    let scope = Scope::parse(p.scope.as_deref())?;
    let wb = app.wb.clone();
    let table = blocking("the log table", move || wb.transfer().log_table(tree, node, scope)).await?;
    Ok(stream(table, format, page))
}

/// The page's answer: its headers at once, its rows as they are made.
fn stream(table: Table, format: TableFormat, page: Page) -> Response {
    let total = table.total;
    let next = page.next(total);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        write_header(format, &table.columns, &mut buf);
        let mut gone = false;
        let read = table.read(page, |cells| {
            write_row(format, &table.columns, cells, &mut buf);
            if buf.len() >= CHUNK {
                gone = tx.blocking_send(Ok(Bytes::from(std::mem::take(&mut buf)))).is_err();
            }
            !gone
        });
        match read {
            Ok(()) if !gone => {
                let _ = tx.blocking_send(Ok(Bytes::from(buf)));
            }
            Ok(()) => {}
            // The headers are gone: the transfer breaks, so a client sees the page is not whole.
            Err(e) => {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let mut res = ([(header::CONTENT_TYPE, format.media_type())], channel_body(rx)).into_response();
    let headers = res.headers_mut();
    headers.insert(HeaderName::from_static("x-total-count"), HeaderValue::from(total));
    if let Some(next) = next {
        headers.insert(HeaderName::from_static("x-next-offset"), HeaderValue::from(next));
    }
    res
}
