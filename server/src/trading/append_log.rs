//! A persistent append-only list, so cloning an episode costs the same at any length.
//!
//! A tree node clones its episode for every child. Trades, decision logs and the holdings timeline
//! grow with every decision point, so they are kept as shared immutable chunks (`Arc`) plus a
//! short tail of `Arc`ed entries: a clone copies at most `TAIL_MAX` pointers, never an entry, and
//! siblings share everything before their own pushes.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Entries kept owned before they are frozen into a shared chunk.
const TAIL_MAX: usize = 32;

#[derive(Debug)]
struct Chunk<T> {
    prev: Option<Arc<Chunk<T>>>,
    items: Box<[Arc<T>]>,
}

/// An ordered list that only grows at the end; clones share all but the last few entries.
#[derive(Debug)]
pub struct AppendLog<T> {
    frozen: Option<Arc<Chunk<T>>>,
    frozen_len: usize,
    tail: Vec<Arc<T>>,
}

impl<T> Default for AppendLog<T> {
    fn default() -> Self {
        AppendLog {
            frozen: None,
            frozen_len: 0,
            tail: Vec::new(),
        }
    }
}

impl<T> Clone for AppendLog<T> {
    fn clone(&self) -> Self {
        AppendLog {
            frozen: self.frozen.clone(),
            frozen_len: self.frozen_len,
            tail: self.tail.clone(),
        }
    }
}

impl<T> AppendLog<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, item: T) {
        self.tail.push(Arc::new(item));
        if self.tail.len() >= TAIL_MAX {
            let items = std::mem::take(&mut self.tail).into_boxed_slice();
            self.frozen_len += items.len();
            self.frozen = Some(Arc::new(Chunk {
                prev: self.frozen.take(),
                items,
            }));
        }
    }

    pub fn len(&self) -> usize {
        self.frozen_len + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn last(&self) -> Option<&T> {
        self.tail
            .last()
            .or_else(|| self.frozen.as_ref().and_then(|c| c.items.last()))
            .map(|a| &**a)
    }

    /// The entries in order, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let mut chunks = Vec::new();
        let mut cur = self.frozen.as_deref();
        while let Some(c) = cur {
            chunks.push(&c.items[..]);
            cur = c.prev.as_deref();
        }
        chunks
            .into_iter()
            .rev()
            .flat_map(|c| c.iter())
            .chain(self.tail.iter())
            .map(|a| &**a)
    }

    pub fn to_vec(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.iter().cloned().collect()
    }
}

impl<T: PartialEq> PartialEq for AppendLog<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T> FromIterator<T> for AppendLog<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut log = AppendLog::new();
        for item in iter {
            log.push(item);
        }
        log
    }
}

impl<T: Serialize> Serialize for AppendLog<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for AppendLog<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Vec::<T>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_chunks_and_clones_share_the_frozen_part() {
        let mut a: AppendLog<usize> = (0..100).collect();
        assert_eq!(a.len(), 100);
        assert_eq!(a.to_vec(), (0..100).collect::<Vec<_>>());
        assert_eq!(a.last(), Some(&99));
        let b = a.clone();
        assert!(Arc::ptr_eq(a.frozen.as_ref().unwrap(), b.frozen.as_ref().unwrap()));
        assert!(b.tail.len() < TAIL_MAX);
        a.push(100);
        assert_eq!(b.len(), 100, "a clone does not see later pushes");
        assert_eq!(a.iter().copied().last(), Some(100));
    }

    #[test]
    fn serialises_as_a_plain_list() {
        let log: AppendLog<u32> = (1..=40).collect();
        let json = serde_json::to_string(&log).unwrap();
        assert_eq!(json, serde_json::to_string(&(1..=40).collect::<Vec<_>>()).unwrap());
        let back: AppendLog<u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, log);
        let empty: AppendLog<u32> = AppendLog::new();
        assert_eq!(empty.last(), None);
        assert!(empty.is_empty());
    }
}
