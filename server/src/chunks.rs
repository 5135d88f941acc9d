//! `AppendList<T>`: the persistent, append-only list behind agent memories, trading logs and ABM
//! histories — and the way the store writes it so that storage stays linear in a tree.
//!
//! A list is a chain of immutable chunks shared (`Arc`) by every clone, plus a short owned tail.
//! Forking a simulator therefore copies a few pointers whatever its history, and a child shares
//! everything its parent had frozen.
//!
//! Plain serde (exports, the HTTP views) writes a list as the JSON array of its entries. The
//! store writes it differently, inside [`write_chunks`]: each chunk becomes a row of its own the
//! first time any node's state is written (keyed by that node and an ordinal), and the list is
//! written as `{"c": <key of its newest chunk>, "t": [tail]}`. A node's stored state thus holds
//! only its tails and keys; the chunks its run froze are its own rows; everything older is
//! referenced, never repeated. [`read_chunks`] is the inverse, sharing chunks that are already in
//! memory through the tree's [`ChunkCache`].

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::ser::{Error as _, Serializer};
use serde::{Deserialize, Serialize};

/// Entries kept in the owned tail; beyond it all but the last entry are frozen into a chunk. Kept
/// small because every node's stored state repeats its lists' tails.
const TAIL_MAX: usize = 4;

/// A chunk's identity in the store: the node whose state first wrote it and an ordinal there.
pub(crate) type ChunkKey = (u64, u32);

struct Chunk<T> {
    prev: Option<Arc<Chunk<T>>>,
    items: Box<[Arc<T>]>,
    key: OnceLock<ChunkKey>,
}

impl<T> Drop for Chunk<T> {
    /// Unlinks long chains iteratively (a recursive drop of 100,000 chunks would overflow).
    fn drop(&mut self) {
        let mut next = self.prev.take();
        while let Some(c) = next {
            match Arc::try_unwrap(c) {
                Ok(mut c) => next = c.prev.take(),
                Err(_) => break,
            }
        }
    }
}

/// An ordered list that only grows at the end (its last entry may be edited in place); clones
/// share everything but the tail.
pub struct AppendList<T> {
    frozen: Option<Arc<Chunk<T>>>,
    frozen_len: usize,
    tail: Vec<Arc<T>>,
}

impl<T> Default for AppendList<T> {
    fn default() -> Self {
        AppendList { frozen: None, frozen_len: 0, tail: Vec::new() }
    }
}

impl<T> Clone for AppendList<T> {
    fn clone(&self) -> Self {
        AppendList { frozen: self.frozen.clone(), frozen_len: self.frozen_len, tail: self.tail.clone() }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for AppendList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> AppendList<T> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, item: T) {
        self.tail.push(Arc::new(item));
        if self.tail.len() > TAIL_MAX {
            // The last entry stays owned: it is the one an edit (a memory merge) touches.
            let keep = self.tail.split_off(self.tail.len() - 1);
            let items = std::mem::replace(&mut self.tail, keep).into_boxed_slice();
            self.frozen_len += items.len();
            self.frozen = Some(Arc::new(Chunk { prev: self.frozen.take(), items, key: OnceLock::new() }));
        }
    }

    pub fn len(&self) -> usize {
        self.frozen_len + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn last(&self) -> Option<&T> {
        match self.tail.last() {
            Some(a) => Some(a),
            None => self.frozen.as_ref().and_then(|c| c.items.last()).map(|a| &**a),
        }
    }

    /// The entries in order, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.iter_from(0)
    }

    /// The entries from index `from` on, walking back only through the chunks that hold them
    /// (what a node added costs what it added, not the whole history).
    pub(crate) fn iter_from(&self, from: usize) -> impl Iterator<Item = &T> {
        let mut chunks = Vec::new();
        let mut start = self.frozen_len;
        let mut cur = self.frozen.as_deref();
        while let Some(c) = cur {
            if start <= from {
                break;
            }
            start -= c.items.len();
            chunks.push(&c.items[..]);
            cur = c.prev.as_deref();
        }
        chunks
            .into_iter()
            .rev()
            .flat_map(|c| c.iter())
            .chain(self.tail.iter())
            .skip(from.saturating_sub(start))
            .map(|a| &**a)
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

impl<T: Clone> AppendList<T> {
    /// The last entry, to edit in place (a clone's copy is unaffected).
    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        self.tail.last_mut().map(Arc::make_mut)
    }

    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.iter().cloned().collect()
    }
}

impl<T: PartialEq> PartialEq for AppendList<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T> FromIterator<T> for AppendList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut list = AppendList::new();
        for item in iter {
            list.push(item);
        }
        list
    }
}

// ---- the store's form ----

/// A chunk written for the first time while a node's state was stored: its key and its JSON body
/// `{"p": <previous chunk's key or null>, "i": [entries]}`.
#[derive(Debug, Clone)]
pub(crate) struct NewChunk {
    pub(crate) key: ChunkKey,
    pub(crate) data: Vec<u8>,
}

/// Chunks of one tree that are alive in memory, by key, so that nodes rebuilt from the store
/// share them (as the originals did) instead of each holding a copy.
#[derive(Default)]
pub struct ChunkCache {
    live: Mutex<HashMap<ChunkKey, Weak<dyn Any + Send + Sync>>>,
}

impl ChunkCache {
    fn get<T: Send + Sync + 'static>(&self, key: ChunkKey) -> Option<Arc<Chunk<T>>> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.get(&key)?.upgrade()?.downcast::<Chunk<T>>().ok()
    }

    /// Forgets the chunks no simulator holds any more. A dead entry is not free: its weak
    /// reference keeps the chunk's allocation (header and links) until it is dropped here, so
    /// the cache calls this after evicting simulators.
    pub(crate) fn prune(&self) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, w| w.strong_count() > 0);
        live.shrink_to_fit();
    }

    /// Entries held (live or not yet pruned).
    pub fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert<T: Send + Sync + 'static>(&self, key: ChunkKey, chunk: &Arc<Chunk<T>>) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.len() >= 1024 && live.len().is_power_of_two() {
            live.retain(|_, w| w.strong_count() > 0);
        }
        let any: Arc<dyn Any + Send + Sync> = chunk.clone();
        live.insert(key, Arc::downgrade(&any));
    }
}

/// Chunks already stored while a tree is imported, by content: a node whose chunk equals one an
/// ancestor stored references it (imported nodes do not share memory the way run nodes do).
#[derive(Default)]
pub(crate) struct Dedupe {
    /// Chunk bodies by a 128-bit content hash (bodies themselves are not kept: an import may be
    /// large). An accidental collision is out of reach; a crafted one could only swap entries
    /// within the importer's own tree.
    by_hash: HashMap<u128, Vec<ChunkKey>>,
    /// The ancestors of the node being written (a sibling's chunk may be deleted with it).
    pub(crate) ancestors: std::collections::HashSet<u64>,
}

struct Writer {
    node: u64,
    next: u32,
    out: Vec<NewChunk>,
    dedupe: Option<Dedupe>,
}

impl Writer {
    fn assign(&mut self, data: Vec<u8>) -> Result<ChunkKey, ChunkError> {
        let hash = self.dedupe.as_ref().map(|_| {
            let half = |salt: u8| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                salt.hash(&mut h);
                data.hash(&mut h);
                h.finish()
            };
            (u128::from(half(1)) << 64) | u128::from(half(2))
        });
        if let (Some(d), Some(hash)) = (&self.dedupe, hash)
            && let Some(key) = d.by_hash.get(&hash).and_then(|v| v.iter().find(|k| d.ancestors.contains(&k.0)))
        {
            return Ok(*key);
        }
        let key = (self.node, self.next);
        self.next = self.next.checked_add(1).ok_or(ChunkError::TooMany)?;
        if let (Some(d), Some(hash)) = (&mut self.dedupe, hash) {
            d.by_hash.entry(hash).or_default().push(key);
        }
        self.out.push(NewChunk { key, data });
        Ok(key)
    }
}

struct Reader {
    raw: HashMap<ChunkKey, Arc<[u8]>>,
    cache: Arc<ChunkCache>,
    missing: bool,
}

enum Ctx {
    Plain,
    Write(Writer),
    Read(Reader),
}

thread_local! {
    static CTX: RefCell<Ctx> = const { RefCell::new(Ctx::Plain) };
}

/// Restores the previous context even if `f` panics.
struct Restore(Option<Ctx>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(prev) = self.0.take() {
            CTX.with(|c| *c.borrow_mut() = prev);
        }
    }
}

fn with_ctx<R>(ctx: Ctx, f: impl FnOnce() -> R) -> (R, Ctx) {
    let prev = CTX.with(|c| std::mem::replace(&mut *c.borrow_mut(), ctx));
    let mut restore = Restore(Some(prev));
    let r = f();
    let prev = restore.0.take().expect("set above");
    let ours = CTX.with(|c| std::mem::replace(&mut *c.borrow_mut(), prev));
    (r, ours)
}

/// Runs `f` (which serializes a node's state) in the store's form: lists become chunk keys and
/// tails; returns what `f` returned and the chunks written for the first time, keyed by `node`.
/// With `dedupe`, chunks equal to an ancestor's are referenced instead (imports).
pub(crate) fn write_chunks<R>(
    node: u64,
    dedupe: Option<Dedupe>,
    f: impl FnOnce() -> R,
) -> (R, Vec<NewChunk>, Option<Dedupe>) {
    let writer = Writer { node, next: 0, out: Vec::new(), dedupe };
    match with_ctx(Ctx::Write(writer), f) {
        (r, Ctx::Write(w)) => (r, w.out, w.dedupe),
        (r, _) => (r, Vec::new(), None),
    }
}

/// Runs `f` (which deserializes a node's state in the store's form) with `raw` chunk bodies at
/// hand and `cache` for chunks already in memory. Returns `None` when a chunk was neither: the
/// caller fetches more rows and tries again.
pub(crate) fn read_chunks<R>(
    raw: HashMap<ChunkKey, Arc<[u8]>>,
    cache: &Arc<ChunkCache>,
    f: impl FnOnce() -> R,
) -> Option<R> {
    let reader = Reader { raw, cache: cache.clone(), missing: false };
    match with_ctx(Ctx::Read(reader), f) {
        (_, Ctx::Read(r)) if r.missing => None,
        (r, _) => Some(r),
    }
}

fn writing() -> bool {
    CTX.with(|c| matches!(*c.borrow(), Ctx::Write(_)))
}

fn reading() -> bool {
    CTX.with(|c| matches!(*c.borrow(), Ctx::Read(_)))
}

#[derive(Serialize)]
struct BodyOut<'a, T> {
    p: Option<ChunkKey>,
    i: Vec<&'a T>,
}

#[derive(Deserialize)]
struct BodyIn<T> {
    p: Option<ChunkKey>,
    i: Vec<T>,
}

#[derive(Serialize)]
struct StoredOut<'a, T> {
    c: Option<ChunkKey>,
    n: usize,
    t: Vec<&'a T>,
}

#[derive(Deserialize)]
struct StoredIn<T> {
    c: Option<ChunkKey>,
    n: usize,
    t: Vec<T>,
}

/// Why a chunk could not be written or read; it reaches the store as the message of the
/// serialiser's error, which names the node.
#[derive(Debug, thiserror::Error)]
enum ChunkError {
    #[error("a node wrote more than 2^32 chunks")]
    TooMany,
    #[error("chunk {0} outside the store's context")]
    NoContext(&'static str),
    #[error("chunk without a key")]
    NoKey,
    #[error("{0}")]
    Write(serde_json::Error),
    #[error("chunk {0:?} is not at hand")]
    NotAtHand(ChunkKey),
    #[error("chunk {0:?}: {1}")]
    Read(ChunkKey, serde_json::Error),
    #[error("empty chunk chain")]
    EmptyChain,
}

/// The key of `head`, writing it and every older chunk not yet written.
fn key_of<T: Serialize>(head: &Arc<Chunk<T>>) -> Result<ChunkKey, ChunkError> {
    let mut todo = Vec::new();
    let mut cur = Some(head);
    while let Some(c) = cur {
        if c.key.get().is_some() {
            break;
        }
        todo.push(c);
        cur = c.prev.as_ref();
    }
    for c in todo.into_iter().rev() {
        let body = BodyOut {
            p: c.prev.as_ref().and_then(|p| p.key.get().copied()),
            i: c.items.iter().map(|a| &**a).collect(),
        };
        // Entries are serialized before the context is borrowed: they may hold lists of their own.
        let data = serde_json::to_vec(&body).map_err(ChunkError::Write)?;
        let key = CTX.with(|ctx| match &mut *ctx.borrow_mut() {
            Ctx::Write(w) => w.assign(data),
            _ => Err(ChunkError::NoContext("written")),
        })?;
        let _ = c.key.set(key);
    }
    head.key.get().copied().ok_or(ChunkError::NoKey)
}

/// The chunk `key` with everything before it, from the cache or the raw rows.
fn resolve<T: DeserializeOwned + Send + Sync + 'static>(key: ChunkKey) -> Result<Arc<Chunk<T>>, ChunkError> {
    let mut chain: Vec<(ChunkKey, Vec<T>)> = Vec::new();
    let mut base = None;
    let mut next = Some(key);
    while let Some(k) = next {
        let found = CTX.with(|ctx| match &mut *ctx.borrow_mut() {
            Ctx::Read(r) => match r.cache.get::<T>(k) {
                Some(live) => Ok(Ok(live)),
                None => match r.raw.get(&k) {
                    Some(raw) => Ok(Err(raw.clone())),
                    None => {
                        r.missing = true;
                        Err(ChunkError::NotAtHand(k))
                    }
                },
            },
            _ => Err(ChunkError::NoContext("read")),
        })?;
        match found {
            Ok(live) => {
                base = Some(live);
                break;
            }
            Err(raw) => {
                let body: BodyIn<T> = serde_json::from_slice(&raw).map_err(|e| ChunkError::Read(k, e))?;
                next = body.p;
                chain.push((k, body.i));
            }
        }
    }
    let cache = CTX.with(|ctx| match &*ctx.borrow() {
        Ctx::Read(r) => Some(r.cache.clone()),
        _ => None,
    });
    let mut prev = base;
    for (k, items) in chain.into_iter().rev() {
        let chunk = Arc::new(Chunk { prev, items: items.into_iter().map(Arc::new).collect(), key: OnceLock::from(k) });
        if let Some(cache) = &cache {
            cache.insert(k, &chunk);
        }
        prev = Some(chunk);
    }
    prev.ok_or(ChunkError::EmptyChain)
}

impl<T: Serialize> Serialize for AppendList<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !writing() {
            return s.collect_seq(self.iter());
        }
        let c = match &self.frozen {
            Some(head) => Some(key_of(head).map_err(S::Error::custom)?),
            None => None,
        };
        StoredOut { c, n: self.frozen_len, t: self.tail.iter().map(|a| &**a).collect() }.serialize(s)
    }
}

impl<'de, T: DeserializeOwned + Send + Sync + 'static> Deserialize<'de> for AppendList<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !reading() {
            return Ok(Vec::<T>::deserialize(d)?.into_iter().collect());
        }
        let stored = StoredIn::<T>::deserialize(d)?;
        let frozen = match stored.c {
            Some(k) => Some(resolve::<T>(k).map_err(D::Error::custom)?),
            None => None,
        };
        Ok(AppendList { frozen, frozen_len: stored.n, tail: stored.t.into_iter().map(Arc::new).collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_chunks_and_clones_share_the_frozen_part() {
        let mut a: AppendList<usize> = (0..100).collect();
        assert_eq!(a.len(), 100);
        assert_eq!(a.to_vec(), (0..100).collect::<Vec<_>>());
        assert_eq!(a.last(), Some(&99));
        let b = a.clone();
        assert!(Arc::ptr_eq(a.frozen.as_ref().unwrap(), b.frozen.as_ref().unwrap()));
        assert!(b.tail.len() <= TAIL_MAX);
        a.push(100);
        *a.last_mut().unwrap() += 1;
        assert_eq!(b.len(), 100, "a clone does not see later pushes");
        assert_eq!(a.iter().copied().last(), Some(101));
    }

    #[test]
    fn serialises_as_a_plain_list_outside_the_store() {
        let list: AppendList<u32> = (1..=40).collect();
        let json = serde_json::to_string(&list).unwrap();
        assert_eq!(json, serde_json::to_string(&(1..=40).collect::<Vec<_>>()).unwrap());
        let back: AppendList<u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, list);
        let empty: AppendList<u32> = AppendList::new();
        assert_eq!(empty.last(), None);
        assert!(empty.is_empty());
    }

    fn rows(chunks: &[NewChunk]) -> HashMap<ChunkKey, Arc<[u8]>> {
        chunks.iter().map(|c| (c.key, Arc::from(&c.data[..]))).collect()
    }

    #[test]
    fn the_store_form_writes_each_chunk_once_and_reads_back_shared() {
        let parent: AppendList<String> = (0..50).map(|i| i.to_string()).collect();
        let (pjson, pchunks, _) = write_chunks(1, None, || serde_json::to_string(&parent).unwrap());
        assert!(!pchunks.is_empty() && pjson.len() < 100, "a state holds keys and a tail: {pjson}");
        let mut child = parent.clone();
        for i in 50..60 {
            child.push(i.to_string());
        }
        let (cjson, cchunks, _) = write_chunks(2, None, || serde_json::to_string(&child).unwrap());
        assert!(cchunks.iter().all(|c| c.key.0 == 2), "only the child's own chunks are new");
        assert!(cchunks.len() <= 3);
        let mut all = rows(&pchunks);
        all.extend(rows(&cchunks));
        let cache = Arc::new(ChunkCache::default());
        let back_p: AppendList<String> =
            read_chunks(all.clone(), &cache, || serde_json::from_str(&pjson).unwrap()).unwrap();
        let back_c: AppendList<String> = read_chunks(all, &cache, || serde_json::from_str(&cjson).unwrap()).unwrap();
        assert_eq!(back_p, parent);
        assert_eq!(back_c, child);
        let shared = |l: &AppendList<String>| {
            let mut c = l.frozen.clone();
            std::iter::from_fn(move || {
                let cur = c.take()?;
                c = cur.prev.clone();
                Some(cur)
            })
            .find(|c| c.key.get().map(|k| k.0) == Some(1))
            .unwrap()
        };
        assert!(Arc::ptr_eq(&shared(&back_p), &shared(&back_c)), "rebuilt nodes share chunks");
        // Pruning keeps what a list still holds and forgets the rest (their weak references
        // kept the chunks' allocations).
        let held = cache.len();
        cache.prune();
        assert_eq!(cache.len(), held, "every chunk is still held");
        drop(back_c);
        cache.prune();
        assert!(cache.len() < held && !cache.is_empty(), "the child's own chunks are gone");
        drop(back_p);
        cache.prune();
        assert!(cache.is_empty());
        // A missing row is reported, not guessed.
        let empty = Arc::new(ChunkCache::default());
        let missing =
            read_chunks(HashMap::new(), &empty, || serde_json::from_str::<AppendList<String>>(&cjson).is_err());
        assert_eq!(missing, None);
    }

    #[test]
    fn imports_reference_an_ancestors_equal_chunks() {
        let a: AppendList<u32> = (0..30).collect();
        let b: AppendList<u32> = (0..40).collect();
        let (_, first, d) = write_chunks(0, Some(Dedupe::default()), || serde_json::to_string(&a).unwrap());
        let mut d = d.unwrap();
        d.ancestors.insert(0);
        let (_, second, d) = write_chunks(1, Some(d), || serde_json::to_string(&b).unwrap());
        assert!(second.len() < first.len(), "{} new vs {}", second.len(), first.len());
        let mut d = d.unwrap();
        d.ancestors.clear();
        let fresh: AppendList<u32> = (0..40).collect();
        let (_, third, _) = write_chunks(2, Some(d), || serde_json::to_string(&fresh).unwrap());
        assert!(third.len() > second.len(), "a non-ancestor's chunks are not referenced");
    }

    #[test]
    fn long_chains_drop_without_recursion() {
        let list: AppendList<u8> = std::iter::repeat_n(1, 2_000_000).collect();
        drop(list);
    }
}
