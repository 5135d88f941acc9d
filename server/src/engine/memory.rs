//! An agent's short-term memory: the conversation it sends to the LLM.
//!
//! Upstream keeps a plain list and deep-copies it on every clone, so cloning a long-running
//! simulation is linear in its history. Here a memory is a persistent, append-only list
//! ([`AppendList`]): older entries live in immutable chunks shared (`Arc`) by every clone, and
//! only a short owned tail is copied. A clone costs the same after ten turns as after ten thousand, and a tree node that
//! adds a turn stores only the entries that turn created. Entry text is an `Arc<str>`.

use serde::de::Deserializer;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::chunks::AppendList;

// The message vocabulary is the LLM layer's (one for every consumer); memories hold plain text
// `user`/`assistant` messages of it, serialised as `{"role":"user","content":"..."}`.
pub use crate::llm::chat::{Message, Role};

/// The ordered memory with upstream's merge rule: appending a line with the same role as the last
/// entry extends that entry (`last + "\n" + line`) instead of adding a new one. The entries live
/// in a persistent [`AppendList`], whose last entry is always owned (the only one a merge touches).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShortTermMemory {
    list: AppendList<Message>,
}

impl ShortTermMemory {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends one line, merging it into the last entry when the roles match.
    pub(crate) fn append(&mut self, role: Role, content: &str) {
        if let Some(last) = self.list.last_mut()
            && last.role == role
        {
            let mut merged = String::with_capacity(last.content.len() + 1 + content.len());
            merged.push_str(&last.content);
            merged.push('\n');
            merged.push_str(content);
            last.content = merged.into();
            return;
        }
        self.list.push(Message::new(role, content));
    }

    /// Number of entries (not lines).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn first(&self) -> Option<&Message> {
        self.iter().next()
    }

    pub(crate) fn last(&self) -> Option<&Message> {
        self.list.last()
    }

    /// Entries from index `from` on (see [`AppendList::iter_from`]).
    pub(crate) fn iter_from(&self, from: usize) -> impl Iterator<Item = &Message> {
        self.list.iter_from(from)
    }

    /// Entries in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Message> {
        self.list.iter()
    }

    pub fn clear(&mut self) {
        self.list.clear();
    }
}

/// Serialised as the plain `[{role, content}]` list upstream uses (the store's form inside
/// [`crate::chunks::write_chunks`]). Stored entries are taken as they are (no merging), exactly
/// like upstream's restore.
impl Serialize for ShortTermMemory {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.list.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ShortTermMemory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ShortTermMemory { list: AppendList::deserialize(d)? })
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
