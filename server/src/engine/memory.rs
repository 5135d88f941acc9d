//! An agent's short-term memory: the conversation it sends to the LLM.
//!
//! Upstream keeps a plain list and deep-copies it on every clone, so cloning a long-running
//! simulation is linear in its history. Here the list is a persistent vector (`imbl::Vector`) of
//! entries whose text is an `Arc<str>`: a clone shares every chunk with the original and costs the
//! same after ten turns as after ten thousand. Writes copy at most one chunk.

use std::sync::Arc;

use imbl::Vector;
use serde::{Deserialize, Serialize};

/// Who said a memory line, as the chat APIs name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    /// Parses a role name; only `user` and `assistant` may be stored in a memory.
    pub fn parse_memory_role(s: &str) -> Option<Role> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

/// One `{role, content}` message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Arc<str>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<Arc<str>>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// The ordered memory with upstream's merge rule: appending a line with the same role as the last
/// entry extends that entry (`last + "\n" + line`) instead of adding a new one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShortTermMemory {
    entries: Vector<Message>,
}

impl ShortTermMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one line, merging it into the last entry when the roles match.
    pub fn append(&mut self, role: Role, content: &str) {
        if let Some(last) = self.entries.back_mut()
            && last.role == role
        {
            let mut merged = String::with_capacity(last.content.len() + 1 + content.len());
            merged.push_str(&last.content);
            merged.push('\n');
            merged.push_str(content);
            last.content = merged.into();
            return;
        }
        self.entries.push_back(Message::new(role, content));
    }

    /// Number of entries (not lines).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last(&self) -> Option<&Message> {
        self.entries.back()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Message> + ExactSizeIterator {
        self.entries.iter()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
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
            a.append(
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                &i.to_string(),
            );
        }
        let mut b = a.clone();
        b.append(Role::Assistant, "only in b");
        b.append(Role::User, "new entry in b");
        assert_eq!(a.len(), 500);
        assert_eq!(a.last().unwrap().content.as_ref(), "499");
        assert_eq!(b.len(), 501);
        assert_eq!(
            b.iter().nth(499).unwrap().content.as_ref(),
            "499\nonly in b"
        );
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
