//! CSV cells as every table simtree hands out writes them (the server's long tables and sweep
//! tables, the web UI's downloads): RFC 4180 quoting, and text that a spreadsheet would run as a
//! formula made inert.
//!
//! Agent text is model output, and a model can be talked into writing `=HYPERLINK(…)`: a text
//! cell starting with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`, which
//! spreadsheets show and never evaluate. Numbers are written as numbers (a negative one keeps its
//! sign). The NDJSON form of the same tables carries every text exactly.

use std::borrow::Cow;

/// A text cell: made inert if it would start a formula, then quoted if it holds a comma, a
/// quote or a line break.
pub fn text(s: &str) -> Cow<'_, str> {
    let inert: Cow<'_, str> =
        if s.starts_with(['=', '+', '-', '@', '\t', '\r']) { Cow::Owned(format!("'{s}")) } else { Cow::Borrowed(s) };
    if inert.contains([',', '"', '\n', '\r']) {
        Cow::Owned(format!("\"{}\"", inert.replace('"', "\"\"")))
    } else {
        inert
    }
}

/// A JSON value as a cell: text through [`text`], `null` empty, anything else (numbers,
/// booleans, arrays, objects) as its JSON, quoted when it must be.
pub fn value(v: &serde_json::Value) -> Cow<'_, str> {
    match v {
        serde_json::Value::Null => Cow::Borrowed(""),
        serde_json::Value::String(s) => text(s),
        serde_json::Value::Number(n) => Cow::Owned(n.to_string()),
        other => {
            let json = other.to_string();
            if json.contains([',', '"', '\n', '\r']) {
                Cow::Owned(format!("\"{}\"", json.replace('"', "\"\"")))
            } else {
                Cow::Owned(json)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_that_would_run_as_a_formula_is_inert_and_numbers_keep_their_sign() {
        assert_eq!(text("=HYPERLINK(\"http://x\",\"y\")"), "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"");
        for start in ["+1", "-rm", "@SUM(A1)", "\tx", "\rx"] {
            assert!(text(start).trim_start_matches('"').starts_with('\''), "{start:?}");
        }
        assert_eq!(text("plain"), "plain");
        assert_eq!(text("a,b"), "\"a,b\"");
        assert_eq!(value(&json!(-0.5)), "-0.5");
        assert_eq!(value(&json!(null)), "");
        assert_eq!(value(&json!({"a": 1, "b": 2})), "\"{\"\"a\"\":1,\"\"b\"\":2}\"");
        assert_eq!(value(&json!("-2 coins")), "'-2 coins");
    }
}
