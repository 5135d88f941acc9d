//! An agent's short-term memory: the conversation it sends to the LLM.
//!
//! Upstream keeps a plain list and deep-copies it on every clone, so cloning a long-running
//! simulation is linear in its history. Here a memory is a persistent, append-only list: older
//! entries live in immutable chunks shared (`Arc`) by every clone, and only a short owned tail is
//! copied. A clone costs the same after ten turns as after ten thousand, and a tree node that
//! adds a turn stores only the entries that turn created. Entry text is an `Arc<str>`.

use std::sync::Arc;

use serde::de::Deserializer;
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

// The message vocabulary is the LLM layer's (one for every consumer); memories hold plain text
// `user`/`assistant` messages of it, serialised as `{"role":"user","content":"..."}`.
pub use crate::llm::chat::{Message, Role};

/// Entries kept in the owned tail before older ones are frozen into a shared chunk.
const TAIL_MAX: usize = 16;

/// An immutable run of entries, linked to the run before it.
#[derive(Debug)]
struct Frozen {
    prev: Option<Arc<Frozen>>,
    items: Box<[Message]>,
}

/// The ordered memory with upstream's merge rule: appending a line with the same role as the last
/// entry extends that entry (`last + "\n" + line`) instead of adding a new one.
///
/// Invariant: the tail is empty only when the whole memory is, so the last entry (the only one a
/// merge touches) is always owned.
#[derive(Clone, Debug, Default)]
pub struct ShortTermMemory {
    frozen: Option<Arc<Frozen>>,
    frozen_len: usize,
    tail: Vec<Message>,
}

impl ShortTermMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one line, merging it into the last entry when the roles match.
    pub fn append(&mut self, role: Role, content: &str) {
        if let Some(last) = self.tail.last_mut()
            && last.role == role
        {
            let mut merged = String::with_capacity(last.content.len() + 1 + content.len());
            merged.push_str(&last.content);
            merged.push('\n');
            merged.push_str(content);
            last.content = merged.into();
            return;
        }
        self.push(Message::new(role, content));
    }

    fn push(&mut self, message: Message) {
        self.tail.push(message);
        if self.tail.len() > TAIL_MAX {
            let keep = self.tail.split_off(self.tail.len() - 1);
            let items = std::mem::replace(&mut self.tail, keep).into_boxed_slice();
            self.frozen_len += items.len();
            self.frozen = Some(Arc::new(Frozen {
                prev: self.frozen.take(),
                items,
            }));
        }
    }

    /// Number of entries (not lines).
    pub fn len(&self) -> usize {
        self.frozen_len + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn last(&self) -> Option<&Message> {
        self.tail.last()
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = &Message> {
        let mut chunks = Vec::new();
        let mut cur = self.frozen.as_deref();
        while let Some(c) = cur {
            chunks.push(c);
            cur = c.prev.as_deref();
        }
        chunks
            .into_iter()
            .rev()
            .flat_map(|c| c.items.iter())
            .chain(self.tail.iter())
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

impl PartialEq for ShortTermMemory {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// Serialised as the plain `[{role, content}]` list upstream uses.
impl Serialize for ShortTermMemory {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for m in self.iter() {
            seq.serialize_element(m)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for ShortTermMemory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Vec::<Message>::deserialize(d)?;
        let mut m = ShortTermMemory::new();
        for item in items {
            // Stored entries are taken as they are (no merging), exactly like upstream's restore.
            m.push(item);
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(m: &ShortTermMemory) -> Vec<(Role, String)> {
        m.iter().map(|e| (e.role, e.content.to_string())).collect()
    }

    #[test]
    fn same_role_lines_merge_into_the_last_entry() {
        let mut m = ShortTermMemory::new();
        m.append(Role::User, "a");
        m.append(Role::User, "b");
        assert_eq!(m.len(), 1);
        m.append(Role::Assistant, "c");
        m.append(Role::User, "d");
        m.append(Role::User, "e");
        assert_eq!(
            dump(&m),
            vec![
                (Role::User, "a\nb".to_string()),
                (Role::Assistant, "c".to_string()),
                (Role::User, "d\ne".to_string()),
            ]
        );
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn clones_are_independent() {
        let mut a = ShortTermMemory::new();
        for i in 0..500 {
            a.append(if i % 2 == 0 { Role::User } else { Role::Assistant }, &i.to_string());
        }
        let mut b = a.clone();
        b.append(Role::Assistant, "only in b");
        b.append(Role::User, "new entry in b");
        assert_eq!(a.len(), 500);
        assert_eq!(a.last().unwrap().content.as_ref(), "499");
        assert_eq!(b.len(), 501);
        assert_eq!(b.iter().nth(499).unwrap().content.as_ref(), "499\nonly in b");
    }

    #[test]
    fn serialises_as_a_plain_list() {
        let mut m = ShortTermMemory::new();
        m.append(Role::User, "x");
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"[{"role":"user","content":"x"}]"#);
        let back: ShortTermMemory = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
    }
}
