//! Export and import, streamed: neither side holds a whole tree's JSON.
//!
//! Export writes the header, then one node at a time (each read back from the store if it is not
//! in memory, under the tree's lock for that node only), from a blocking task into the response
//! body. Import pumps the request body into a blocking task that parses it node by node
//! ([`crate::tree::read_export`]), checking and storing each as it arrives; its size limit is
//! `--max-import-bytes`, not the body limit of other routes.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use simtree_shared::ImportReply;
use tokio::sync::mpsc;

use super::error::{ApiError, ApiPath, blocking};
use super::state::AppState;
use crate::tree::{EXPORT_FAILED, TreeError};

type St = State<Arc<AppState>>;

/// `GET …/{tree}/export`: the tree as one JSON document, streamed node by node. Refused (409)
/// while a run is in flight; nodes deleted during the export are left out with their subtrees.
pub(crate) async fn export(State(app): St, ApiPath(tree): ApiPath<u64>) -> Result<Response, ApiError> {
    let export = app.wb.transfer().export(tree)?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::task::spawn_blocking(move || {
        let mut head = export.header.to_string();
        head.pop(); // the closing brace: the nodes follow
        head.push_str(",\"nodes\":[");
        if tx.blocking_send(Ok(Bytes::from(head))).is_err() {
            return;
        }
        let mut first = true;
        for &id in &export.ids {
            let node = match export.node(id) {
                Ok(n) => n,
                Err(TreeError::NodeNotFound(_)) => continue,
                Err(e) => return fail(&tx, e.to_string()),
            };
            let mut chunk = if first { Vec::new() } else { vec![b','] };
            first = false;
            if let Err(e) = serde_json::to_writer(&mut chunk, &node) {
                return fail(&tx, format!("node {id}: {e}"));
            }
            if tx.blocking_send(Ok(Bytes::from(chunk))).is_err() {
                return; // the client hung up
            }
        }
        let mut tail = b"],\"sweeps\":".to_vec();
        let written = serde_json::to_writer(&mut tail, &export.sweeps).and_then(|()| {
            tail.extend_from_slice(b",\"explores\":");
            serde_json::to_writer(&mut tail, &export.explores)
        });
        match written {
            Ok(()) => tail.push(b'}'),
            Err(e) => return fail(&tx, e.to_string()),
        }
        let _ = tx.blocking_send(Ok(Bytes::from(tail)));
    });
    Ok(([(header::CONTENT_TYPE, "application/json")], channel_body(rx)).into_response())
}

/// A response body of the chunks a blocking task sends on `rx`, ending when it drops its end.
pub(super) fn channel_body(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Body {
    // Fused: the compression layer may poll once more after the end.
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }).fuse();
    Body::from_stream(stream)
}

/// Ends an export that cannot be finished: the body ends with [`EXPORT_FAILED`] and the reason
/// (no JSON can hold that byte, and an import names it). The stream then ends without an error:
/// breaking the connection instead could reset it and lose that last line on its way.
fn fail(tx: &mpsc::Sender<Result<Bytes, std::io::Error>>, reason: String) {
    tracing::error!("an export could not be finished: {reason}");
    let line = format!("{EXPORT_FAILED}{}\n", reason.replace('\n', " "));
    let _ = tx.blocking_send(Ok(Bytes::from(line)));
}

/// A blocking reader over the request body's chunks.
struct BodyReader {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    current: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// `POST /devui/simtree/import`: a new tree from an export of any size up to
/// `--max-import-bytes`; 413 beyond it, 422 when the export is refused (nothing is kept).
/// The reply also compares the provenance the export states with what this server states for the
/// new tree (the statement is never used to build it).
pub(crate) async fn import(State(app): St, body: Body) -> Result<Json<ImportReply>, ApiError> {
    let limit = app.wb.limits().max_import_bytes;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let too_large = Arc::new(AtomicBool::new(false));
    let flag = too_large.clone();
    let pump = tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        let mut seen: u64 = 0;
        while let Some(chunk) = stream.next().await {
            let item = match chunk {
                Ok(b) => {
                    seen += b.len() as u64;
                    if seen > limit {
                        flag.store(true, Ordering::SeqCst);
                        Err(std::io::Error::other("the import is larger than --max-import-bytes"))
                    } else {
                        Ok(b)
                    }
                }
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    let wb = app.wb.clone();
    let result = blocking("the import", move || {
        Ok::<_, ApiError>(wb.transfer().import_stream(BodyReader { rx, current: Bytes::new() }))
    })
    .await?;
    pump.abort();
    if too_large.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the import is larger than {limit} bytes (see --max-import-bytes)"),
        ));
    }
    let (tree, statement) = result?;
    let provenance = app.wb.transfer().provenance_check(tree.id, statement.as_ref())?;
    Ok(Json(ImportReply { id: tree.id, root: tree.root, provenance }))
}
