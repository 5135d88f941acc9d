//! What users write on a tree: a node's annotation (title, note, tags, star) and the tree's
//! description. The checks live here once, for `PATCH` and for imports alike (an export is
//! untrusted: its annotations pass the same limits as typed ones).

use simtree_shared::{
    Annotation, Ask, MAX_ASKS_PER_NODE, MAX_DESCRIPTION_BYTES, MAX_NOTE_BYTES, MAX_QUESTION_CHARS, MAX_TAG_CHARS,
    MAX_TAGS, MAX_TITLE_CHARS, NodePatch,
};

/// The first control character of `text` that a one-line field may not hold (every one), or
/// a text field may not hold (every one but newline and tab, and a carriage return before a
/// newline is not allowed either: the text is stored as given).
fn control(text: &str, multiline: bool) -> Option<char> {
    text.chars()
        .find(|&c| c.is_control() && !(multiline && (c == '\n' || c == '\t')))
}

fn refuse_control(field: &str, text: &str, multiline: bool) -> Result<(), String> {
    match control(text, multiline) {
        Some(c) if multiline => Err(format!(
            "{field} must not contain control characters other than newline and tab (found U+{:04X})",
            c as u32
        )),
        Some(c) => Err(format!(
            "{field} must not contain control characters (found U+{:04X})",
            c as u32
        )),
        None => Ok(()),
    }
}

fn title(t: &str) -> Result<Option<String>, String> {
    let t = t.trim();
    if t.chars().count() > MAX_TITLE_CHARS {
        return Err(format!("title must be at most {MAX_TITLE_CHARS} characters"));
    }
    refuse_control("title", t, false)?;
    Ok((!t.is_empty()).then(|| t.to_string()))
}

fn text(field: &str, t: &str, max: usize) -> Result<Option<String>, String> {
    if t.len() > max {
        return Err(format!(
            "{field} must be at most {max} bytes ({} KiB) of UTF-8; it has {}",
            max / 1024,
            t.len()
        ));
    }
    refuse_control(field, t, true)?;
    Ok((!t.trim().is_empty()).then(|| t.to_string()))
}

fn tags(list: &[String]) -> Result<Vec<String>, String> {
    if list.len() > MAX_TAGS {
        return Err(format!("at most {MAX_TAGS} tags, not {}", list.len()));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let t = t.trim();
        if t.is_empty() || t.chars().count() > MAX_TAG_CHARS {
            return Err(format!(
                "tags[{i}]: a tag is 1 to {MAX_TAG_CHARS} characters, not only spaces"
            ));
        }
        refuse_control(&format!("tags[{i}]"), t, false)?;
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    Ok(out)
}

/// `current` with `patch` applied (each field given replaces; empty clears), checked; `None`
/// when nothing is left written.
pub fn patched(current: Option<&Annotation>, patch: &NodePatch) -> Result<Option<Annotation>, String> {
    if patch.title.is_none() && patch.note.is_none() && patch.tags.is_none() && patch.starred.is_none() {
        return Err("nothing to change: give at least one of title, note, tags, starred".into());
    }
    let mut a = current.cloned().unwrap_or_default();
    if let Some(t) = &patch.title {
        a.title = title(t)?;
    }
    if let Some(n) = &patch.note {
        a.note = text("note", n, MAX_NOTE_BYTES)?;
    }
    if let Some(t) = &patch.tags {
        a.tags = tags(t)?;
    }
    if let Some(s) = patch.starred {
        a.starred = s;
    }
    Ok((!a.is_empty()).then_some(a))
}

/// An annotation from outside (an import) as the server would have stored it, or why not.
pub fn checked(a: &Annotation) -> Result<Option<Annotation>, String> {
    let patch = NodePatch {
        title: Some(a.title.clone().unwrap_or_default()),
        note: Some(a.note.clone().unwrap_or_default()),
        tags: Some(a.tags.clone()),
        starred: Some(a.starred),
    };
    patched(None, &patch)
}

/// A tree's description as given: at most 10 KiB, no control characters but newline and tab;
/// `None` when empty (it is removed).
pub fn description(d: &str) -> Result<Option<String>, String> {
    text("description", d, MAX_DESCRIPTION_BYTES)
}

/// A question as asked: 1 to 4000 characters, not only spaces, no control characters but
/// newline and tab.
pub fn question(q: &str) -> Result<String, String> {
    let n = q.chars().count();
    if q.trim().is_empty() || n > MAX_QUESTION_CHARS {
        return Err(format!(
            "question must be 1 to {MAX_QUESTION_CHARS} characters, not only spaces (it has {n})"
        ));
    }
    refuse_control("question", q, true)?;
    Ok(q.to_string())
}

/// A node's asks from outside (an import): numbered in order, within the limits, each
/// question as one typed, and an answer of at most 1 MiB.
pub fn check_asks(asks: &[Ask]) -> Result<(), String> {
    if asks.len() > MAX_ASKS_PER_NODE {
        return Err(format!("at most {MAX_ASKS_PER_NODE} per node, not {}", asks.len()));
    }
    for (i, a) in asks.iter().enumerate() {
        let at = |e: String| format!("[{i}]: {e}");
        if a.seq != i as u64 {
            return Err(at(format!("seq {} out of order", a.seq)));
        }
        question(&a.question).map_err(at)?;
        if a.answer.len() > 1 << 20 || a.agent.len() > 1000 || a.provider.len() > 1000 || a.request.len() > 64 {
            return Err(at("a field is longer than an ask can be".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(json: &str) -> NodePatch {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn patches_replace_what_they_name_and_limits_are_named_in_the_refusal() {
        let a = patched(
            None,
            &patch(r#"{"title":" First ","tags":["x","y","x"],"starred":true}"#),
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.title.as_deref(), Some("First"));
        assert_eq!(a.tags, ["x", "y"]);
        let b = patched(Some(&a), &patch(r#"{"note":"line\n\tindented"}"#))
            .unwrap()
            .unwrap();
        assert_eq!(
            (b.title.as_deref(), b.note.as_deref()),
            (Some("First"), Some("line\n\tindented"))
        );
        let cleared = patched(
            Some(&b),
            &patch(r#"{"title":"","note":"  ","tags":[],"starred":false}"#),
        )
        .unwrap();
        assert_eq!(cleared, None, "nothing left written: no annotation");
        for (body, expect) in [
            ("{}", "nothing to change"),
            (
                r#"{"title":"a\u0007b"}"#,
                "title must not contain control characters (found U+0007)",
            ),
            (
                r#"{"title":"a\nb"}"#,
                "title must not contain control characters (found U+000A)",
            ),
            (r#"{"note":"a\rb"}"#, "other than newline and tab (found U+000D)"),
            (r#"{"tags":[""]}"#, "tags[0]: a tag is 1 to 64"),
            (
                r#"{"tags":["ok","a\u0000"]}"#,
                "tags[1] must not contain control characters",
            ),
        ] {
            let e = patched(None, &patch(body)).unwrap_err();
            assert!(e.contains(expect), "{body}: {e}");
        }
        let long = |n: usize| "é".repeat(n);
        assert!(patched(None, &patch(&format!(r#"{{"title":"{}"}}"#, long(200)))).is_ok());
        assert!(patched(None, &patch(&format!(r#"{{"title":"{}"}}"#, long(201)))).is_err());
        assert!(patched(None, &patch(&format!(r#"{{"note":"{}"}}"#, "n".repeat(10 * 1024)))).is_ok());
        let e = patched(None, &patch(&format!(r#"{{"note":"{}"}}"#, "n".repeat(10 * 1024 + 1)))).unwrap_err();
        assert!(e.contains("at most 10240 bytes"), "{e}");
        let many: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
        let e = patched(
            None,
            &NodePatch {
                tags: Some(many),
                ..NodePatch::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("at most 32 tags"), "{e}");
        let e = patched(
            None,
            &NodePatch {
                tags: Some(vec![long(65)]),
                ..NodePatch::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("1 to 64 characters"), "{e}");
    }
}
