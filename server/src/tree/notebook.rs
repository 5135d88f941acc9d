//! What users write on a tree: a node's annotation (title, note, tags, star) and the tree's
//! description. The checks live here once, for `PATCH` and for imports alike (an export is
//! untrusted: its annotations pass the same limits as typed ones).

use simtree_shared::{
    Annotation, Ask, MAX_ASKS_PER_NODE, MAX_DESCRIPTION_BYTES, MAX_NOTE_BYTES, MAX_QUESTION_CHARS, MAX_TAG_CHARS,
    MAX_TAGS, MAX_TITLE_CHARS, NodePatch,
};

/// Why a note, a tag, a description, a question or an imported ask was refused. The text is the
/// one the user reads (a 422 in `http/error.rs`); each names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// A one-line field (a title, a tag) holding a control character.
    #[error("{field} must not contain control characters (found U+{code:04X})")]
    Control { field: String, code: u32 },
    /// A text field holding a control character other than newline and tab.
    #[error("{field} must not contain control characters other than newline and tab (found U+{code:04X})")]
    ControlInText { field: String, code: u32 },
    #[error("title must be at most {MAX_TITLE_CHARS} characters", MAX_TITLE_CHARS = MAX_TITLE_CHARS)]
    TitleTooLong,
    /// A text field beyond its size in bytes.
    #[error("{field} must be at most {max} bytes ({kib} KiB) of UTF-8; it has {len}", kib = max / 1024)]
    TooLong { field: String, max: usize, len: usize },
    #[error("at most {MAX_TAGS} tags, not {0}", MAX_TAGS = MAX_TAGS)]
    TooManyTags(usize),
    /// Tag `0` (its index) is empty or too long.
    #[error("tags[{0}]: a tag is 1 to {MAX_TAG_CHARS} characters, not only spaces", MAX_TAG_CHARS = MAX_TAG_CHARS)]
    BadTag(usize),
    #[error("nothing to change: give at least one of title, note, tags, starred")]
    NothingToChange,
    /// A question empty or too long (its length in characters).
    #[error("question must be 1 to {MAX_QUESTION_CHARS} characters, not only spaces (it has {0})", MAX_QUESTION_CHARS = MAX_QUESTION_CHARS)]
    Question(usize),
    #[error("at most {MAX_ASKS_PER_NODE} per node, not {0}", MAX_ASKS_PER_NODE = MAX_ASKS_PER_NODE)]
    TooManyAsks(usize),
    /// An imported ask numbered out of order.
    #[error("seq {0} out of order")]
    AskOutOfOrder(u64),
    #[error("a field is longer than an ask can be")]
    AskTooLong,
    /// What is wrong with the imported ask at `index`.
    #[error("[{index}]: {error}")]
    Ask { index: usize, error: Box<NoteError> },
}

/// The first control character of `text` that a one-line field may not hold (every one), or
/// a text field may not hold (every one but newline and tab, and a carriage return before a
/// newline is not allowed either: the text is stored as given).
fn control(text: &str, multiline: bool) -> Option<char> {
    text.chars().find(|&c| c.is_control() && !(multiline && (c == '\n' || c == '\t')))
}

fn refuse_control(field: &str, text: &str, multiline: bool) -> Result<(), NoteError> {
    let field = field.to_string();
    match control(text, multiline) {
        Some(c) if multiline => Err(NoteError::ControlInText { field, code: c as u32 }),
        Some(c) => Err(NoteError::Control { field, code: c as u32 }),
        None => Ok(()),
    }
}

fn title(t: &str) -> Result<Option<String>, NoteError> {
    let t = t.trim();
    if t.chars().count() > MAX_TITLE_CHARS {
        return Err(NoteError::TitleTooLong);
    }
    refuse_control("title", t, false)?;
    Ok((!t.is_empty()).then(|| t.to_string()))
}

fn text(field: &str, t: &str, max: usize) -> Result<Option<String>, NoteError> {
    if t.len() > max {
        return Err(NoteError::TooLong { field: field.to_string(), max, len: t.len() });
    }
    refuse_control(field, t, true)?;
    Ok((!t.trim().is_empty()).then(|| t.to_string()))
}

fn tags(list: &[String]) -> Result<Vec<String>, NoteError> {
    if list.len() > MAX_TAGS {
        return Err(NoteError::TooManyTags(list.len()));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let t = t.trim();
        if t.is_empty() || t.chars().count() > MAX_TAG_CHARS {
            return Err(NoteError::BadTag(i));
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
pub(crate) fn patched(current: Option<&Annotation>, patch: &NodePatch) -> Result<Option<Annotation>, NoteError> {
    if patch.title.is_none() && patch.note.is_none() && patch.tags.is_none() && patch.starred.is_none() {
        return Err(NoteError::NothingToChange);
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
pub(crate) fn checked(a: &Annotation) -> Result<Option<Annotation>, NoteError> {
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
pub(crate) fn description(d: &str) -> Result<Option<String>, NoteError> {
    text("description", d, MAX_DESCRIPTION_BYTES)
}

/// A question as asked: 1 to 4000 characters, not only spaces, no control characters but
/// newline and tab.
pub(crate) fn question(q: &str) -> Result<String, NoteError> {
    let n = q.chars().count();
    if q.trim().is_empty() || n > MAX_QUESTION_CHARS {
        return Err(NoteError::Question(n));
    }
    refuse_control("question", q, true)?;
    Ok(q.to_string())
}

/// A node's asks from outside (an import): numbered in order, within the limits, each
/// question as one typed, and an answer of at most 1 MiB.
pub(crate) fn check_asks(asks: &[Ask]) -> Result<(), NoteError> {
    if asks.len() > MAX_ASKS_PER_NODE {
        return Err(NoteError::TooManyAsks(asks.len()));
    }
    for (index, a) in asks.iter().enumerate() {
        let at = |e: NoteError| NoteError::Ask { index, error: Box::new(e) };
        if a.seq != index as u64 {
            return Err(at(NoteError::AskOutOfOrder(a.seq)));
        }
        question(&a.question).map_err(at)?;
        if a.answer.len() > 1 << 20 || a.agent.len() > 1000 || a.provider.len() > 1000 || a.request.len() > 64 {
            return Err(at(NoteError::AskTooLong));
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
        let a = patched(None, &patch(r#"{"title":" First ","tags":["x","y","x"],"starred":true}"#)).unwrap().unwrap();
        assert_eq!(a.title.as_deref(), Some("First"));
        assert_eq!(a.tags, ["x", "y"]);
        let b = patched(Some(&a), &patch(r#"{"note":"line\n\tindented"}"#)).unwrap().unwrap();
        assert_eq!((b.title.as_deref(), b.note.as_deref()), (Some("First"), Some("line\n\tindented")));
        let cleared = patched(Some(&b), &patch(r#"{"title":"","note":"  ","tags":[],"starred":false}"#)).unwrap();
        assert_eq!(cleared, None, "nothing left written: no annotation");
        for (body, expect) in [
            ("{}", "nothing to change"),
            (r#"{"title":"a\u0007b"}"#, "title must not contain control characters (found U+0007)"),
            (r#"{"title":"a\nb"}"#, "title must not contain control characters (found U+000A)"),
            (r#"{"note":"a\rb"}"#, "other than newline and tab (found U+000D)"),
            (r#"{"tags":[""]}"#, "tags[0]: a tag is 1 to 64"),
            (r#"{"tags":["ok","a\u0000"]}"#, "tags[1] must not contain control characters"),
        ] {
            let e = patched(None, &patch(body)).unwrap_err().to_string();
            assert!(e.contains(expect), "{body}: {e}");
        }
        let long = |n: usize| "é".repeat(n);
        assert!(patched(None, &patch(&format!(r#"{{"title":"{}"}}"#, long(200)))).is_ok());
        assert!(patched(None, &patch(&format!(r#"{{"title":"{}"}}"#, long(201)))).is_err());
        assert!(patched(None, &patch(&format!(r#"{{"note":"{}"}}"#, "n".repeat(10 * 1024)))).is_ok());
        let e =
            patched(None, &patch(&format!(r#"{{"note":"{}"}}"#, "n".repeat(10 * 1024 + 1)))).unwrap_err().to_string();
        assert!(e.contains("at most 10240 bytes"), "{e}");
        let many: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
        let e = patched(None, &NodePatch { tags: Some(many), ..NodePatch::default() }).unwrap_err().to_string();
        assert!(e.contains("at most 32 tags"), "{e}");
        let e =
            patched(None, &NodePatch { tags: Some(vec![long(65)]), ..NodePatch::default() }).unwrap_err().to_string();
        assert!(e.contains("1 to 64 characters"), "{e}");
    }

    #[test]
    fn imported_asks_and_questions_are_refused_in_the_words_the_user_reads() {
        let ask = |seq: u64, question: &str| Ask {
            seq,
            agent: "Alice".into(),
            question: question.into(),
            answer: "Fine.".into(),
            at: 0,
            provider: "mock".into(),
            prompt_tokens: 0,
            completion_tokens: 0,
            money: None,
            latency_ms: 0,
            request: "h".into(),
            replayed: false,
        };
        assert_eq!(check_asks(&[ask(0, "How?"), ask(1, "Why?")]), Ok(()));
        let refusal = |asks: &[Ask]| check_asks(asks).unwrap_err().to_string();
        assert_eq!(refusal(&[ask(0, "How?"), ask(3, "Why?")]), "[1]: seq 3 out of order");
        assert_eq!(
            refusal(&[ask(0, " ")]),
            format!("[0]: question must be 1 to {MAX_QUESTION_CHARS} characters, not only spaces (it has 1)")
        );
        assert_eq!(
            refusal(&[ask(0, "a\u{1b}b")]),
            "[0]: question must not contain control characters other than newline and tab (found U+001B)"
        );
        let mut long = ask(0, "How?");
        long.request = "h".repeat(65);
        assert_eq!(refusal(&[long]), "[0]: a field is longer than an ask can be");
        assert_eq!(
            description(&"d".repeat(MAX_DESCRIPTION_BYTES + 1)).unwrap_err().to_string(),
            format!(
                "description must be at most {MAX_DESCRIPTION_BYTES} bytes ({} KiB) of UTF-8; it has {}",
                MAX_DESCRIPTION_BYTES / 1024,
                MAX_DESCRIPTION_BYTES + 1
            )
        );
    }
}
