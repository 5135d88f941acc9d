//! Wire types shared by the simtree server, its web UI and its black-box tests.
//!
//! Everything here is plain data with serde derives: no I/O, so the crate builds for the native
//! target and for `wasm32-unknown-unknown` alike. The JSON shapes follow the SocialSim4 DevUI
//! protocol (routes under `/devui/simtree…`) so upstream clients keep working.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One entry of a node's event log: `{type, data, node}`.
///
/// `node` is the id of the tree node whose simulator produced the entry, so a client can tell
/// inherited entries (produced by an ancestor) from the node's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
    pub node: u64,
}
