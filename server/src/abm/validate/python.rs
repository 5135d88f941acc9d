//! A lexical look at the Python code of a model's functions and behaviors: strings and comments
//! blanked, dotted names, calls, assignments and compared literals found by scanning, not parsing.

use std::collections::HashSet;

/// The code with the contents of string literals and comments replaced by spaces (newlines
/// kept), so that offsets and line numbers stay valid and no match comes from a string.
pub(crate) fn blank_strings_and_comments(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            q @ (b'\'' | b'"') => {
                let triple = i + 2 < b.len() && b[i + 1] == q && b[i + 2] == q;
                let delim = if triple { 3 } else { 1 };
                i += delim;
                while i < b.len() {
                    if b[i] == b'\\' {
                        out[i] = b' ';
                        if i + 1 < b.len() && b[i + 1] != b'\n' {
                            out[i + 1] = b' ';
                        }
                        i += 2;
                        continue;
                    }
                    if b[i] == q && (!triple || (i + 2 < b.len() && b[i + 1] == q && b[i + 2] == q)) {
                        i += delim;
                        break;
                    }
                    if b[i] == b'\n' && !triple {
                        break;
                    }
                    if b[i] != b'\n' {
                        out[i] = b' ';
                    }
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces... except inside strings, where multi-byte
    // characters were blanked byte by byte, which still leaves valid UTF-8 (all spaces).
    String::from_utf8(out).unwrap_or_default()
}

pub(super) fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Occurrences of `prefix` followed by an identifier, where `prefix` does not continue an
/// identifier on its left (a `.` before it is allowed: `self.model.x` contains `model.x`).
pub(super) fn dotted(clean: &str, prefix: &str) -> Vec<(usize, String)> {
    let b = clean.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(rel) = clean[from..].find(prefix) {
        let at = from + rel;
        from = at + prefix.len();
        if at > 0 && is_ident_byte(b[at - 1]) {
            continue;
        }
        let end = b[from..].iter().position(|&c| !is_ident_byte(c)).map_or(b.len(), |p| from + p);
        if end > from {
            out.push((at, clean[from..end].to_owned()));
        }
    }
    out
}

/// First occurrence of `pattern` not continuing an identifier on either side.
pub(super) fn find_word(clean: &str, pattern: &str) -> Option<usize> {
    let b = clean.as_bytes();
    let mut from = 0;
    while let Some(rel) = clean[from..].find(pattern) {
        let at = from + rel;
        let end = at + pattern.len();
        let left_ok = at == 0 || !is_ident_byte(b[at - 1]) || !is_ident_byte(pattern.as_bytes()[0]);
        let right_ok =
            end >= b.len() || !is_ident_byte(b[end]) || !is_ident_byte(*pattern.as_bytes().last().unwrap_or(&b' '));
        if left_ok && right_ok {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Whether the code calls `name(` somewhere other than in its own `def`.
pub(super) fn calls(clean: &str, name: &str) -> bool {
    let pattern = format!("{name}(");
    let b = clean.as_bytes();
    clean.match_indices(&pattern).any(|(at, _)| {
        let left_ok = at == 0 || !is_ident_byte(b[at - 1]);
        left_ok && !clean[..at].trim_end().ends_with("def")
    })
}

/// Whether the text after `end` is a plain assignment (`=`, not `==`). Augmented ones (`+=`)
/// read the attribute first, so they do not declare it.
pub(super) fn is_assignment(clean: &str, end: usize) -> bool {
    let rest = clean[end.min(clean.len())..].trim_start_matches([' ', '\t']);
    matches!(rest.as_bytes(), [b'=', next, ..] if *next != b'=')
}

/// Attribute names assigned as `self.<x> = …` anywhere in the code.
pub(super) fn assigned_self(clean: &str) -> HashSet<String> {
    dotted(clean, "self.")
        .into_iter()
        .filter(|(off, ident)| is_assignment(clean, off + "self.".len() + ident.len()))
        .map(|(_, i)| i)
        .collect()
}

pub(super) fn defines_function(clean: &str, name: &str) -> bool {
    clean
        .lines()
        .any(|l| l.trim_start().strip_prefix("def ").is_some_and(|r| r.trim_start().starts_with(&format!("{name}("))))
}

/// The argument text of a call whose `(` ends at `open`, up to the matching `)`.
pub(super) fn call_args(clean: &str, open: usize) -> &str {
    let b = clean.as_bytes();
    let mut depth = 1;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return &clean[open..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &clean[open..]
}

/// String literals compared with `.<attr>` (`x.status == 'I'`, `'I' != n.status`) in raw code.
pub(super) fn compared_literals(code: &str, attr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let needle = format!(".{attr}");
    for (at, _) in code.match_indices(&needle) {
        let end = at + needle.len();
        if code.as_bytes().get(end).is_some_and(|&c| is_ident_byte(c)) {
            continue;
        }
        let rest = code[end..].trim_start();
        for op in ["==", "!="] {
            if let Some(r) = rest.strip_prefix(op)
                && let Some(lit) = leading_string_literal(r.trim_start())
            {
                out.push(lit);
            }
        }
        let before = code[..at].trim_end();
        let before = before.trim_end_matches(|c: char| is_ident_byte(c as u8) || c == '.');
        let before = before.trim_end();
        for op in ["==", "!="] {
            if let Some(b) = before.strip_suffix(op)
                && let Some(lit) = trailing_string_literal(b.trim_end())
            {
                out.push(lit);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

pub(super) fn leading_string_literal(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &s[1..];
    rest.find(q).map(|end| rest[..end].to_owned())
}

pub(super) fn trailing_string_literal(s: &str) -> Option<String> {
    let q = s.chars().last().filter(|c| *c == '\'' || *c == '"')?;
    let body = &s[..s.len() - 1];
    body.rfind(q).map(|start| body[start + 1..].to_owned())
}

pub(super) fn line_of(code: &str, offset: usize) -> usize {
    code[..offset.min(code.len())].matches('\n').count() + 1
}
