//! A node's own log ([`NodeLog`]): its entries back to back in one string, read by index, and
//! watched live through a broadcast channel; [`entry_json`] writes an engine event as an entry.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use super::*;
use crate::engine::event::Event;

/// A node's own log entries (serialised JSON `{type, data, node}`, stored back to back in one
/// string to keep per-entry overhead out of large trees) and, once someone watches, a broadcast
/// channel that carries new entries live.
#[derive(Debug, Default)]
pub struct NodeLog {
    inner: Mutex<NodeLogInner>,
}

#[derive(Debug)]
struct NodeLogInner {
    text: String,
    /// End offset of each entry in `text`.
    ends: Vec<usize>,
    live: Option<broadcast::Sender<Arc<str>>>,
    /// False while the entries are in the store only (a restored or evicted node).
    loaded: bool,
}

impl Default for NodeLogInner {
    fn default() -> Self {
        NodeLogInner { text: String::new(), ends: Vec::new(), live: None, loaded: true }
    }
}

impl NodeLogInner {
    fn push(&mut self, entry: &str) {
        self.text.push_str(entry);
        self.ends.push(self.text.len());
    }

    fn entries(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(a, b)| &self.text[a..b])
    }
}

impl NodeLog {
    pub(super) fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        let mut inner = NodeLogInner::default();
        for e in entries {
            inner.push(e);
        }
        inner.text.shrink_to_fit();
        inner.ends.shrink_to_fit();
        NodeLog { inner: Mutex::new(inner) }
    }

    /// A log whose entries are in the store (see [`SimTree::log`]).
    pub(super) fn unloaded() -> Self {
        let log = NodeLog::default();
        log.lock().loaded = false;
        log
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NodeLogInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_loaded(&self) -> bool {
        self.lock().loaded
    }

    /// Puts the stored entries back (no-op when they are already here).
    pub(super) fn fill(&self, entries: &[String]) {
        let mut inner = self.lock();
        if inner.loaded {
            return;
        }
        for e in entries {
            inner.push(e);
        }
        inner.text.shrink_to_fit();
        inner.ends.shrink_to_fit();
        inner.loaded = true;
    }

    /// Drops the entries from memory (they are in the store); returns the bytes freed.
    pub(super) fn unload(&self) -> usize {
        let mut inner = self.lock();
        if !inner.loaded || inner.live.as_ref().is_some_and(|tx| tx.receiver_count() > 0) {
            return 0;
        }
        let freed = inner.text.capacity() + inner.ends.capacity() * std::mem::size_of::<usize>();
        inner.text = String::new();
        inner.ends = Vec::new();
        inner.loaded = false;
        freed
    }

    /// Bytes the entries take in memory.
    pub(crate) fn bytes(&self) -> usize {
        let inner = self.lock();
        inner.text.len() + inner.ends.len() * std::mem::size_of::<usize>()
    }

    /// Appends one entry and forwards it to live watchers; returns its index.
    pub fn push(&self, entry: &str) -> usize {
        let mut inner = self.lock();
        if let Some(tx) = &inner.live {
            let _ = tx.send(Arc::from(entry));
        }
        inner.push(entry);
        inner.ends.len() - 1
    }

    /// Releases spare capacity once the node's run is over.
    pub(crate) fn seal(&self) {
        let mut inner = self.lock();
        inner.text.shrink_to_fit();
        inner.ends.shrink_to_fit();
    }

    /// Calls `f` with each entry, in order, under the log's lock.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&str)) {
        self.lock().entries().for_each(&mut f);
    }

    pub(crate) fn entries(&self) -> Vec<String> {
        self.lock().entries().map(str::to_string).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Subscribes a watcher to the entries pushed from now on, and gives the index of the first
    /// of them. The channel (created with the first watcher's `capacity`) only wakes the watcher:
    /// it reads what it has not sent yet from the log itself ([`Self::entries_from`]), so one
    /// that falls more than `capacity` entries behind loses none of them.
    /// Whether a socket watches this node now.
    pub(crate) fn watched(&self) -> bool {
        self.lock().live.as_ref().is_some_and(|tx| tx.receiver_count() > 0)
    }

    pub(crate) fn watch(&self, capacity: usize) -> (broadcast::Receiver<Arc<str>>, usize) {
        let mut inner = self.lock();
        let next = inner.ends.len();
        let rx = inner.live.get_or_insert_with(|| broadcast::channel(capacity.max(1)).0).subscribe();
        (rx, next)
    }

    /// The entries from index `from` on (nothing while the entries are in the store only).
    /// Reads by offset, so a watcher's wake-up costs what it reads, not the log's length.
    pub(crate) fn entries_from(&self, from: usize) -> Vec<String> {
        let inner = self.lock();
        let Some(rest) = inner.ends.get(from..) else {
            return Vec::new();
        };
        let mut start = from.checked_sub(1).map_or(0, |i| inner.ends[i]);
        rest.iter()
            .map(|&end| {
                let entry = inner.text[start..end].to_string();
                start = end;
                entry
            })
            .collect()
    }
}

/// Serialises an engine event as a log entry of `node`.
pub fn entry_json(event: &Event, node: NodeId) -> String {
    #[derive(Serialize)]
    struct Entry<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        data: &'a Value,
        node: NodeId,
    }
    serde_json::to_string(&Entry { kind: event.kind.as_str(), data: &event.data, node }).unwrap_or_else(|_| "{}".into())
}
