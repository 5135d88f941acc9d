//! A node's log as exports carry it — a JSON array of event objects — read and written one
//! entry at a time as compact JSON text, never as a list of `serde_json::Value` trees.
//!
//! An import is untrusted: a node's `logs` may be a 120 MB array of small numbers, millions of
//! tiny objects, or one entry nested thousands deep. Parsed into `Value`s, each number of such an
//! array costs ~80 bytes of heap (a 120 MB file took ~5 GB). Here each entry is transcoded
//! straight from the parser into its text (the same bytes `Value::to_string` gives), and checked
//! as it arrives: it must be an object, at most [`MAX_ENTRY_BYTES`] long and [`MAX_DEPTH`] deep,
//! a node has at most [`MAX_ENTRIES`], and every [`CHECK_EVERY`] entries the server's resident
//! memory is compared with its budget (`--max-memory-mb`). The first violation ends the import
//! with an error naming the entry (the caller adds the node).

use std::cell::Cell;
use std::fmt::Write as _;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::ser::{Error as _, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Entries one node's log may hold (a 1,000-turn run of a large scene writes tens of thousands).
pub(crate) const MAX_ENTRIES: usize = 2_000_000;
/// The longest entry, as compact JSON text.
pub(crate) const MAX_ENTRY_BYTES: usize = 8 << 20;
/// The deepest nesting inside an entry (the engine writes five or six levels).
pub(crate) const MAX_DEPTH: usize = 64;
/// Entries between two looks at resident memory.
const CHECK_EVERY: usize = 1 << 14;

thread_local! {
    /// The memory budget (bytes, 0: none) of the import running on this thread: serde's derived
    /// visitors pass no context down to a field.
    static BUDGET: Cell<u64> = const { Cell::new(0) };
    /// Set when an entry was refused for memory (the import answers 413, not 422).
    static OVER: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (an import's parse) with `budget` as the memory budget; also says whether it
/// stopped on the budget or a size cap.
pub(crate) fn with_budget<R>(budget: u64, f: impl FnOnce() -> R) -> (R, bool) {
    BUDGET.with(|b| b.set(budget));
    OVER.with(|o| o.set(false));
    let r = f();
    BUDGET.with(|b| b.set(0));
    (r, OVER.with(|o| o.replace(false)))
}

fn too_large<E: serde::de::Error>(msg: String) -> E {
    mark_too_large();
    E::custom(msg)
}

/// Records that the running import stopped on a size cap or the budget (it answers 413).
pub(crate) fn mark_too_large() {
    OVER.with(|o| o.set(true));
}

/// A node's own log entries, each one compact JSON object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogEntries(pub Vec<String>);

impl Serialize for LogEntries {
    /// Each entry is parsed on its own while it is written (never the whole list at once); an
    /// entry that is not JSON fails the export instead of becoming `null`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (k, e) in self.0.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(e)
                .map_err(|err| S::Error::custom(format!("log entry {k} is damaged (not JSON: {err})")))?;
            seq.serialize_element(&v)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for LogEntries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(Entries)
    }
}

struct Entries;

impl<'de> Visitor<'de> for Entries {
    type Value = LogEntries;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of log entry objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LogEntries, A::Error> {
        let budget = BUDGET.with(Cell::get);
        let mut out = Vec::new();
        loop {
            let k = out.len();
            if k == MAX_ENTRIES {
                return Err(too_large(format!("logs: more than {MAX_ENTRIES} entries in one node")));
            }
            if budget > 0
                && k % CHECK_EVERY == CHECK_EVERY - 1
                && crate::memory::resident_bytes().is_some_and(|r| r > budget)
            {
                return Err(too_large(format!(
                    "logs[{k}]: the import would take the server past its memory budget ({} MiB, --max-memory-mb)",
                    budget >> 20
                )));
            }
            let mut text = String::new();
            match seq.next_element_seed(Transcode { out: &mut text, depth: 0, top: true }) {
                Ok(Some(())) => out.push(text),
                Ok(None) => return Ok(LogEntries(out)),
                Err(e) => return Err(A::Error::custom(format!("logs[{k}]: {e}"))),
            }
        }
    }
}

/// Writes the value it is given as compact JSON into `out`, checking depth and size.
struct Transcode<'o> {
    out: &'o mut String,
    depth: usize,
    top: bool,
}

impl Transcode<'_> {
    fn child(&mut self) -> Transcode<'_> {
        Transcode { out: self.out, depth: self.depth + 1, top: false }
    }

    fn scalar<E: serde::de::Error>(self, v: impl Serialize) -> Result<(), E> {
        if self.top {
            return Err(E::custom("is not a log entry object"));
        }
        // Formatted as `serde_json` formats a `Value` (numbers, escapes).
        let text = serde_json::to_string(&v).map_err(E::custom)?;
        self.out.push_str(&text);
        self.check()
    }

    fn check<E: serde::de::Error>(&self) -> Result<(), E> {
        if self.out.len() > MAX_ENTRY_BYTES {
            return Err(too_large(format!("an entry longer than {MAX_ENTRY_BYTES} bytes")));
        }
        Ok(())
    }

    fn enter<E: serde::de::Error>(&self) -> Result<(), E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format!("an entry nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Transcode<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a log entry object")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        // As a `Value` would: a float that is not finite has no JSON form.
        match serde_json::Number::from_f64(v) {
            Some(n) => self.scalar(n),
            None => self.scalar(()),
        }
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(v)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.scalar(())
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.scalar(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if self.top {
            return Err(A::Error::custom("is not a log entry object"));
        }
        self.enter()?;
        self.out.push('[');
        let mut first = true;
        loop {
            if !first {
                self.out.push(',');
            }
            match seq.next_element_seed(self.child())? {
                Some(()) => first = false,
                None => {
                    if !first {
                        self.out.pop();
                    }
                    break;
                }
            }
            self.check()?;
        }
        self.out.push(']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.enter()?;
        self.out.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !first {
                self.out.push(',');
            }
            first = false;
            let _ = write!(self.out, "{}:", serde_json::to_string(&key).map_err(A::Error::custom)?);
            map.next_value_seed(self.child())?;
            self.check()?;
        }
        self.out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<LogEntries, serde_json::Error> {
        serde_json::from_str::<LogEntries>(json)
    }

    #[test]
    fn entries_come_back_as_value_to_string_would_write_them() {
        let src = r#"[ {"type": "a", "data": {"x": [1, -2, 3.5, 1e3, "é\n\"", null, true, [], {}]}, "node": 4},
                       {"b":{"c":{"d":[[[]]]}}} ]"#;
        let want: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(src)
            .unwrap()
            .iter()
            .map(serde_json::Value::to_string)
            .collect();
        assert_eq!(read(src).unwrap().0, want);
        let back = serde_json::to_string(&read(src).unwrap()).unwrap();
        assert_eq!(read(&back).unwrap().0, want);
    }

    #[test]
    fn hostile_logs_are_refused_at_the_first_bad_entry() {
        let e = read("[0,0,0]").unwrap_err().to_string();
        assert!(e.contains("logs[0]: is not a log entry object"), "{e}");
        let e = read(r#"[{"a":1},[1]]"#).unwrap_err().to_string();
        assert!(e.contains("logs[1]: is not a log entry object"), "{e}");
        let deep = format!("[{{\"a\":{}1{}}}]", "[".repeat(100), "]".repeat(100));
        let e = read(&deep).unwrap_err().to_string();
        assert!(e.contains(&format!("nested deeper than {MAX_DEPTH}")), "{e}");
        let (r, over) = with_budget(0, || read(&format!("[{{\"a\":\"{}\"}}]", "x".repeat(MAX_ENTRY_BYTES))));
        assert!(r.unwrap_err().to_string().contains("longer than"));
        assert!(over, "a size cap answers 413");
        assert!(!with_budget(0, || read("[1]")).1, "a shape error answers 422");
        let (r, over) = with_budget(1, || read(&format!("[{}{{}}]", "{},".repeat(CHECK_EVERY))));
        assert!(r.unwrap_err().to_string().contains("memory budget"));
        assert!(over);
    }

    #[test]
    fn a_damaged_entry_fails_the_export_instead_of_becoming_null() {
        let e = serde_json::to_string(&LogEntries(vec!["{\"a\":1}".into(), "{\"a\":".into()])).unwrap_err();
        assert!(e.to_string().contains("log entry 1 is damaged"), "{e}");
    }
}
