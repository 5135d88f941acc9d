//! How a stored tree's nodes come back: their state (the state row and the chunk rows of the
//! root path, sharing chunks already in memory) and their logs, each verified; and the store
//! form a node's state is written in. [`Pressure`] tells the cache sweeper what rebuilds bring
//! into memory.

use std::collections::HashMap;
use std::sync::Arc;

use super::packed::{pack, unpack};
use super::{SourceError, Store, StoreError, StoreResult};
use crate::chunks::{ChunkCache, ChunkKey, Dedupe, NewChunk, read_chunks, write_chunks};
use crate::sim::Sim;
use crate::trading::data::MarketData;

/// A node's state in the store form: deflated JSON and the chunks it writes first. The size of
/// the uncompressed state (tails and keys, not chunks) is returned for cache accounting.
pub struct EncodedState {
    pub(crate) data: Vec<u8>,
    pub(crate) chunks: Vec<(ChunkKey, Vec<u8>)>,
    pub(crate) raw_len: usize,
}

/// The first byte of a state row's unpacked bytes that name their format: this tag, then the
/// format's number (one byte), then the state. Rows written before states had a number start
/// with the state's JSON itself (`{`), which no tag is: they are format 1.
const STATE_TAG: u8 = 0x01;

/// The format of the state JSON written now (the serde shape of [`Sim`], its chunk references
/// included). A change to that shape that older rows cannot be read in takes the next number,
/// and the reader keeps reading every earlier one.
pub(crate) const STATE_FORMAT: u8 = 1;

/// Why a state row's bytes are no state this simtree reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StateFormatError {
    #[error("its state is in format {0}, newer than this simtree reads (up to {STATE_FORMAT}): upgrade simtree")]
    Newer(u8),
    #[error("its state has no format number after its tag")]
    Cut,
}

/// The state JSON of a row's unpacked bytes, with the format it is in.
pub(crate) fn state_json(bytes: &[u8]) -> Result<(u8, &[u8]), StateFormatError> {
    match bytes {
        [STATE_TAG, format, json @ ..] if (1..=STATE_FORMAT).contains(format) => Ok((*format, json)),
        [STATE_TAG, format, ..] => Err(StateFormatError::Newer(*format)),
        [STATE_TAG] => Err(StateFormatError::Cut),
        json => Ok((1, json)),
    }
}

pub(crate) fn encode_state(
    sim: &Sim,
    node: u64,
    dedupe: Option<Dedupe>,
) -> (StoreResult<EncodedState>, Option<Dedupe>) {
    let (json, chunks, dedupe) = write_chunks(node, dedupe, || serde_json::to_vec(sim));
    let encoded = json.map_err(|e| StoreError::Corrupt(format!("node {node}: state: {e}"))).map(|json| EncodedState {
        data: pack(&[&[STATE_TAG, STATE_FORMAT][..], &json].concat()),
        raw_len: json.len() + chunks.iter().map(|c| c.data.len()).sum::<usize>(),
        chunks: chunks.into_iter().map(|NewChunk { key, data }| (key, pack(&data))).collect(),
    });
    (encoded, dedupe)
}

/// Where the nodes of one stored tree come back from: their state (rebuilt from the state row and
/// the chunk rows of the root path, sharing chunks already in memory) and their logs.
pub struct TreeSource {
    pub(crate) store: Arc<Store>,
    pub(crate) tree: u64,
    pub(crate) cache: Arc<ChunkCache>,
    pub(crate) market: Option<Arc<MarketData>>,
    /// Told what each rebuild brings into memory, so the cache is trimmed before it overshoots.
    pub(crate) pressure: Arc<Pressure>,
}

/// What rebuilds (states, logs, tree structures) have brought into memory since the cache was
/// last trimmed. Past a threshold (an eighth of the budget) it wakes the cache sweeper at once
/// instead of at its next tick, so a burst of reads cannot push memory far past `--cache-mb`
/// between two ticks.
#[derive(Debug, Default)]
pub struct Pressure {
    loaded: std::sync::atomic::AtomicUsize,
    threshold: usize,
    pub(crate) wake: tokio::sync::Notify,
}

impl Pressure {
    pub(crate) fn new(budget: usize) -> Pressure {
        Pressure { threshold: (budget / 8).max(1), ..Pressure::default() }
    }

    /// Counts `bytes` brought in; wakes the sweeper when they pass the threshold.
    pub(crate) fn add(&self, bytes: usize) {
        use std::sync::atomic::Ordering;
        let before = self.loaded.fetch_add(bytes, Ordering::Relaxed);
        if before < self.threshold && before + bytes >= self.threshold {
            self.wake.notify_one();
        }
    }

    /// The sweeper ran: start counting again. Returns what was loaded since the last time.
    pub(crate) fn reset(&self) -> usize {
        self.loaded.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

impl TreeSource {
    /// The state of `node` (`path`: its root path), or `None` when it has none stored (a run
    /// that never finished).
    /// The second value is what the rebuilt state costs in memory, roughly, for the cache: its
    /// stored form plus the chunks read for it (an upper bound: some may be shared).
    pub(crate) fn state(&self, node: u64, path: &[u64]) -> Result<Option<(Sim, usize)>, SourceError> {
        let tree = self.tree;
        let Some(data) = self.store.read(move |db| db.state(tree, node))? else {
            return Ok(None);
        };
        let bytes = unpack(&data).map_err(|e| self.damaged(node, "state", e))?;
        let (_, json) = state_json(&bytes).map_err(|e| self.damaged(node, "state", e))?;
        let parse =
            |raw: HashMap<ChunkKey, Arc<[u8]>>| read_chunks(raw, &self.cache, || serde_json::from_slice::<Sim>(json));
        let mut cost = json.len();
        let sim = match parse(HashMap::new()) {
            Some(sim) => sim,
            None => {
                let path = path.to_vec();
                let rows = self.store.read(move |db| db.chunks(tree, &path))?;
                let mut raw = HashMap::with_capacity(rows.len());
                for (key, bytes) in rows {
                    let what = format!("state chunk {} of node {}", key.1, key.0);
                    let bytes = unpack(&bytes).map_err(|e| self.damaged(node, &what, e))?;
                    cost += bytes.len();
                    raw.insert(key, Arc::from(bytes));
                }
                parse(raw).ok_or_else(|| self.damaged(node, "state", "a chunk of it is missing"))?
            }
        };
        let mut sim = sim.map_err(|e| self.damaged(node, "state", e))?;
        sim.attach(self.market.as_ref());
        self.pressure.add(cost);
        Ok(Some((sim, cost)))
    }

    /// A node's stored log entries (every row verified: a damaged one is an error, never a
    /// log with a hole or an entry that is not JSON).
    pub(crate) fn log(&self, node: u64) -> Result<Vec<String>, SourceError> {
        let tree = self.tree;
        let rows = self.store.read(move |db| db.log(tree, node))?;
        self.pressure.add(rows.iter().map(|r| r.entries.len()).sum());
        let mut out = Vec::new();
        for r in &rows {
            let entries = r.verified().map_err(|e| self.damaged(node, "log", e))?;
            out.extend(entries.map(str::to_string));
        }
        Ok(out)
    }

    /// The error for damaged data of `node`, naming the tree, the node and the file.
    fn damaged(&self, node: u64, what: &str, e: impl std::fmt::Display) -> SourceError {
        SourceError::Damaged(format!(
            "tree {}, node {node}: its {what} in {} is damaged ({e}); run `simtree data check`",
            self.tree, self.store.location
        ))
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn a_state_row_names_its_format_and_rows_without_one_are_format_1() {
        assert_eq!(state_json(b"{\"a\":1}"), Ok((1, &b"{\"a\":1}"[..])), "written before formats had numbers");
        assert_eq!(state_json(b"\x01\x01{}"), Ok((1, &b"{}"[..])));
        assert_eq!(state_json(b"\x01\x09{}"), Err(StateFormatError::Newer(9)));
        assert_eq!(state_json(b"\x01"), Err(StateFormatError::Cut));
        assert!(StateFormatError::Newer(9).to_string().contains("upgrade simtree"));
    }
}
