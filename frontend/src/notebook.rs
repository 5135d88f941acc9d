//! The lab notebook's pure logic (tested natively): the marks the graph draws (a node's title as
//! its label, its star, its tags for the tag filter), a search hit's snippet cut into plain and
//! highlighted pieces, the walk between hits, and the tags field's text.
//!
//! Everything here reads text written by users or models (titles, tags, snippets): it only
//! ever becomes text pieces that the components put into text nodes, never markup.

use std::collections::{BTreeSet, HashMap};

use simtree_shared::{Annotation, GraphMark, NotedSummary, SearchHit};

/// The annotated nodes of a tree as the graph draws them, by node id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marks(pub HashMap<u64, GraphMark>);

impl Marks {
    /// The marks of every annotated node of `GET …/summaries`.
    pub fn from_summaries(summaries: &[NotedSummary]) -> Marks {
        Marks(
            summaries
                .iter()
                .filter_map(|s| Some((s.summary.id, mark_of(s.summary.id, s.annotation.as_ref()?))))
                .collect(),
        )
    }

    /// Takes a node's annotation as the server now has it (`None`: nothing written).
    pub fn set(&mut self, node: u64, annotation: Option<&Annotation>) {
        match annotation.filter(|a| !a.is_empty()) {
            Some(a) => {
                self.0.insert(node, mark_of(node, a));
            }
            None => {
                self.0.remove(&node);
            }
        }
    }

    /// The title a user gave the node, if any.
    pub fn title(&self, node: u64) -> Option<&str> {
        self.0.get(&node)?.title.as_deref()
    }

    pub fn starred(&self, node: u64) -> bool {
        self.0.get(&node).is_some_and(|m| m.starred)
    }

    /// Whether `node` carries `tag`.
    pub fn has_tag(&self, node: u64, tag: &str) -> bool {
        self.0.get(&node).is_some_and(|m| m.tags.iter().any(|t| t == tag))
    }

    /// Every tag of the nodes `present` says are in the tree, sorted and once each.
    pub fn tags(&self, present: impl Fn(u64) -> bool) -> Vec<String> {
        let set: BTreeSet<&String> = self.0.iter().filter(|(n, _)| present(**n)).flat_map(|(_, m)| &m.tags).collect();
        set.into_iter().cloned().collect()
    }
}

/// What the graph needs of an annotation.
fn mark_of(node: u64, a: &Annotation) -> GraphMark {
    GraphMark { node, title: a.title.clone(), tags: a.tags.clone(), starred: a.starred, noted: a.note.is_some() }
}

/// How a node looks under the notebook's lenses: starred, lit by a search, dimmed by the tag
/// filter (it lacks the chosen tag). The extra CSS classes of its drawing.
pub fn lens_classes(marks: &Marks, node: u64, lit: bool, tag: Option<&str>) -> String {
    let mut c = String::new();
    if marks.starred(node) {
        c.push_str(" starred");
    }
    if lit {
        c.push_str(" lit");
    }
    if tag.is_some_and(|t| !marks.has_tag(node, t)) {
        c.push_str(" dim");
    }
    c
}

/// The words of `text` (runs of letters and digits), as the server's search cuts them.
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect()
}

/// A snippet cut into pieces, `true` for the highlighted one. The server brackets the match
/// (`… the [red fox] runs …`), but brackets may be part of the text itself, so only a bracketed
/// span whose words are the query's (ignoring case) is highlighted; any other bracket stays as
/// it is, as text.
pub fn snippet_pieces(snippet: &str, query: &str) -> Vec<(String, bool)> {
    let wanted: Vec<String> = words(query).iter().map(|w| w.to_lowercase()).collect();
    if !wanted.is_empty() {
        // Each `]` with the nearest `[` before it: the innermost pairs, so a match the server
        // bracketed inside the text's own brackets (`[[red fox]]`) is found as itself.
        for (close, _) in snippet.match_indices(']') {
            let Some(open) = snippet[..close].rfind('[') else {
                continue;
            };
            let inner = &snippet[open + 1..close];
            let got: Vec<String> = words(inner).iter().map(|w| w.to_lowercase()).collect();
            if got == wanted {
                let mut out = Vec::new();
                if open > 0 {
                    out.push((snippet[..open].to_string(), false));
                }
                out.push((inner.to_string(), true));
                let after = &snippet[close + 1..];
                if !after.is_empty() {
                    out.push((after.to_string(), false));
                }
                return out;
            }
        }
    }
    vec![(snippet.to_string(), false)]
}

/// A snippet without the tags of the model's reply format (`<Action>`, `</message>`, `<Goals>`:
/// a name alone between `<` and `>`), each replaced by a space, so a hit in a reply reads as
/// its words. Anything else in angle brackets (with attributes, spaces, other characters) stays
/// as written; the snippet is shown as text either way.
pub fn without_tags(snippet: &str) -> String {
    let mut out = String::with_capacity(snippet.len());
    let mut rest = snippet;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let name = after.strip_prefix('/').unwrap_or(after);
        let len = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(name.len());
        let is_tag =
            len > 0 && name[..len].starts_with(|c: char| c.is_ascii_alphabetic()) && name[len..].starts_with('>');
        if is_tag {
            out.push_str(&rest[..open]);
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
            rest = &name[len + 1..];
            rest = rest.trim_start();
        } else {
            out.push_str(&rest[..=open]);
            rest = after;
        }
    }
    out.push_str(rest);
    out.trim_end().to_string()
}

/// The nodes of a list of hits, each once, in the hits' order (best first).
pub fn hit_nodes(hits: &[SearchHit]) -> Vec<u64> {
    let mut seen = BTreeSet::new();
    hits.iter().map(|h| h.node).filter(|n| seen.insert(*n)).collect()
}

/// The hit node after (`forward`) or before `current` in `nodes`, wrapping around; the first
/// (or last) when `current` is not one of them.
pub fn step(nodes: &[u64], current: Option<u64>, forward: bool) -> Option<u64> {
    let n = nodes.len();
    if n == 0 {
        return None;
    }
    let at = current.and_then(|c| nodes.iter().position(|x| *x == c));
    let i = match (at, forward) {
        (Some(i), true) => (i + 1) % n,
        (Some(i), false) => (i + n - 1) % n,
        (None, true) => 0,
        (None, false) => n - 1,
    };
    Some(nodes[i])
}

/// The tags field's text as tags: comma-separated, trimmed, empty ones left out. (The server
/// judges them: lengths, counts and characters.)
pub fn parse_tags(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect()
}

/// Tags as the field shows them.
pub fn tags_text(tags: &[String]) -> String {
    tags.join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn reply_tags_leave_snippets_and_other_brackets_stay() {
        assert_eq!(
            without_tags("…<Action><speak><message>the [zanzibar quokka] again</message></speak></Action>"),
            "… the [zanzibar quokka] again"
        );
        assert_eq!(without_tags("a < b and c > d"), "a < b and c > d");
        assert_eq!(
            without_tags("<img src=x onerror=\"p()\"> [zanzibar quokka] </mark><b>bold</b>"),
            "<img src=x onerror=\"p()\"> [zanzibar quokka] bold"
        );
        assert_eq!(without_tags("plain"), "plain");
    }

    use super::*;
    use simtree_shared::{HitKind, Summary};

    fn hit(node: u64) -> SearchHit {
        SearchHit { tree: None, node, kind: HitKind::Event, snippet: String::new(), score: 1.0, from: None }
    }

    #[test]
    fn marks_come_from_summaries_and_follow_edits() {
        let noted = |id: u64, annotation: Option<Annotation>| NotedSummary {
            summary: Summary { id, turns: 0, parent: None, edges: vec![] },
            annotation,
        };
        let a = Annotation {
            title: Some("The turn".into()),
            note: Some("why".into()),
            tags: vec!["key".into(), "ann".into()],
            starred: true,
        };
        let mut m = Marks::from_summaries(&[noted(0, None), noted(3, Some(a.clone()))]);
        assert_eq!(m.title(3), Some("The turn"));
        assert!(m.starred(3) && !m.starred(0));
        assert!(m.0[&3].noted);
        assert!(m.has_tag(3, "ann") && !m.has_tag(3, "an"));
        m.set(5, Some(&Annotation { tags: vec!["key".into(), "zed".into()], ..Default::default() }));
        assert_eq!(m.tags(|_| true), ["ann", "key", "zed"]);
        assert_eq!(m.tags(|n| n != 5), ["ann", "key"], "deleted nodes' tags are not offered");
        m.set(3, None);
        m.set(5, Some(&Annotation::default()));
        assert_eq!(m, Marks::default());
        assert_eq!(lens_classes(&m, 3, false, None), "");
    }

    #[test]
    fn lenses_star_light_and_dim() {
        let mut m = Marks::default();
        m.set(1, Some(&Annotation { tags: vec!["key".into()], starred: true, ..Default::default() }));
        assert_eq!(lens_classes(&m, 1, true, Some("key")), " starred lit");
        assert_eq!(lens_classes(&m, 2, false, Some("key")), " dim");
        assert_eq!(lens_classes(&m, 2, false, None), "");
    }

    #[test]
    fn only_the_bracketed_query_is_highlighted() {
        let p = |s: &str, q: &str| snippet_pieces(s, q);
        assert_eq!(
            p("News: a [zanzibar quokka] was seen", "Zanzibar  QUOKKA"),
            [("News: a ".to_string(), false), ("zanzibar quokka".to_string(), true), (" was seen".to_string(), false)]
        );
        // Brackets of the text itself are text, the match after them is still found.
        assert_eq!(
            p("[x] said [<b>quokka</b>]", "b quokka b"),
            [("[x] said ".to_string(), false), ("<b>quokka</b>".to_string(), true)]
        );
        assert_eq!(
            p("[fake] <script>alert(1)</script>", "quokka"),
            [("[fake] <script>alert(1)</script>".to_string(), false)]
        );
        assert_eq!(p("[quokka", "quokka"), [("[quokka".to_string(), false)]);
        assert_eq!(p("quokka]", "quokka"), [("quokka]".to_string(), false)]);
        assert_eq!(
            p("a [[Zanzibar quokka]] b", "zanzibar quokka"),
            [("a [".to_string(), false), ("Zanzibar quokka".to_string(), true), ("] b".to_string(), false)]
        );
        assert_eq!(p("a [] b", "!!!"), [("a [] b".to_string(), false)]);
        assert_eq!(p("", "x"), [(String::new(), false)]);
        // Multi-byte text around the mark.
        assert_eq!(p("日本 [語] 🦘", "語")[1], ("語".to_string(), true));
    }

    #[test]
    fn hits_are_walked_node_by_node_wrapping_around() {
        let nodes = hit_nodes(&[hit(4), hit(7), hit(4), hit(2)]);
        assert_eq!(nodes, [4, 7, 2]);
        assert_eq!(step(&nodes, None, true), Some(4));
        assert_eq!(step(&nodes, None, false), Some(2));
        assert_eq!(step(&nodes, Some(4), true), Some(7));
        assert_eq!(step(&nodes, Some(2), true), Some(4));
        assert_eq!(step(&nodes, Some(4), false), Some(2));
        assert_eq!(step(&nodes, Some(99), true), Some(4));
        assert_eq!(step(&[], Some(1), true), None);
    }

    #[test]
    fn tags_are_read_from_commas() {
        assert_eq!(parse_tags(" key, ann ,,  "), ["key", "ann"]);
        assert!(parse_tags("  ").is_empty());
        assert_eq!(tags_text(&["a".into(), "b c".into()]), "a, b c");
    }
}
