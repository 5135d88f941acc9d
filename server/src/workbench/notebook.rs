//! The lab notebook: annotations of nodes, a tree's name and description, and search.
//!
//! Annotations are a row per annotated node (never a rewrite of the tree), durable before the
//! reply like a rename. Search reads the store's full-text index (`texts`: a row per piece of
//! text where it entered the tree — a log batch's events, what agents' memories took in at a
//! node, a node's title, note and tags), written through the same write batch as the rows it
//! indexes. A hit is the node where the text entered; agents' memories only grow, so every
//! descendant of a node whose memory took the text in still carries it, and is a `carried` hit
//! ranked after the nodes where text entered (closer descendants first). Ancestors never are.

use std::collections::HashMap;

use simtree_shared::{Annotation, HitKind, NodePatch, SearchHit, SearchReply, TreeEdit, TreeInfo, TreeMsg};

use super::{RequestError, WorkbenchError, lock};
use crate::store::{TextMatch, Write, index_text};
use crate::tree::{NodeId, notebook};

service!(
    /// The lab notebook: annotations, a tree's name and description, search, a node's model calls
    /// and interviews of its agents.
    Notebook
);

/// Longest search query, in characters.
pub(crate) const MAX_QUERY_CHARS: usize = 256;
/// Hits a page holds by default and at most.
pub(crate) const DEFAULT_LIMIT: u64 = 20;
pub(crate) const MAX_LIMIT: u64 = 200;
/// Texts read from the index per search at most (best first); hits beyond are not ranked.
const MAX_MATCHES: u64 = 5000;

impl Notebook<'_> {
    /// `PATCH …/node/{n}`: applies `patch` to the node's annotation and stores it (a row for
    /// this node only) before answering; the annotation as it now is.
    pub fn annotate(&self, tree: u64, node: NodeId, patch: &NodePatch) -> Result<Option<Annotation>, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut t = handle.lock();
        t.node(node)?;
        let after = notebook::patched(t.notes.get(&node), patch)?;
        self.writable()?;
        // Stored, then kept: one the store refuses changes nothing.
        handle.store_first(vec![annotate(tree, node, after.as_ref())])?;
        set_note(&mut t.notes, node, after.clone());
        // Other windows on the tree redraw the node's marks (sent under the tree's lock, so
        // two edits reach watchers in the order they were stored).
        let a = after.clone().unwrap_or_default();
        handle.send(TreeMsg::Marks { node, title: a.title, note: a.note, tags: a.tags, starred: a.starred });
        Ok(after)
    }

    /// `PATCH /devui/simtree/{tree}`: a new name, description, or both, stored before the reply.
    pub(crate) fn edit_tree(&self, tree: u64, edit: &TreeEdit) -> Result<TreeInfo, WorkbenchError> {
        if edit.name.is_none() && edit.description.is_none() {
            return Err(RequestError::NothingToChange.into());
        }
        let name = edit.name.as_deref().map(super::check_name).transpose()?;
        let description = edit.description.as_deref().map(notebook::description).transpose()?;
        let handle = self.tree(tree)?;
        self.writable()?;
        {
            let mut meta = lock(&handle.meta);
            let mut writes = Vec::new();
            if let Some(name) = &name {
                writes.push(Write::Rename { tree, name: name.clone() });
            }
            if let Some(d) = &description {
                writes.push(Write::Describe { tree, description: d.clone() });
            }
            // Stored, then kept: one the store refuses leaves the name and description as
            // they were.
            handle.store_first(writes)?;
            if let Some(name) = name {
                meta.name = name;
            }
            if let Some(d) = description {
                meta.description = d;
            }
            // Other windows show the new name and description (in stored order, as above).
            handle.send(TreeMsg::TreeEdited { name: meta.name.clone(), description: meta.description.clone() });
        }
        Ok(handle.info())
    }

    /// `GET …/search` (`tree`) and `GET /api/search` (every tree): the hits for the user's
    /// words `q` taken as a phrase, a page of them from `offset`.
    pub fn search(
        &self,
        tree: Option<u64>,
        q: Option<&str>,
        offset: Option<u64>,
        limit: Option<u64>,
    ) -> Result<SearchReply, WorkbenchError> {
        let q = check_query(q)?;
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l @ 1..=MAX_LIMIT) => l,
            Some(l) => {
                return Err(RequestError::SearchLimit { limit: l, max: MAX_LIMIT }.into());
            }
        };
        let offset = offset.unwrap_or(0);
        if let Some(t) = tree {
            self.tree(t)?;
        }
        let empty = SearchReply { hits: Vec::new(), total: 0, next: None };
        // Words are what every index matches; a query of punctuation alone matches nothing.
        if !q.chars().any(char::is_alphanumeric) {
            return Ok(empty);
        }
        let (matches, mut bodies) = match &self.store {
            Some(store) => {
                let phrase = q.clone();
                let found = store.read(move |db| db.search(&phrase, tree, MAX_MATCHES))?;
                (found, None)
            }
            None => {
                let (found, bodies) = self.scan(tree, &q);
                (found, Some(bodies))
            }
        };
        let need = usize::try_from(offset.saturating_add(limit)).unwrap_or(usize::MAX);
        let mut hits = self.rank(matches, tree.is_none(), need);
        let total = hits.len() as u64;
        let page: Vec<(SearchHit, u64)> =
            hits.drain(..).skip(usize::try_from(offset).unwrap_or(usize::MAX)).take(limit as usize).collect();
        let ids: Vec<u64> = page.iter().map(|(_, text)| *text).collect();
        let texts: HashMap<u64, String> = match bodies.take() {
            Some(all) => ids.iter().filter_map(|i| Some((*i, all.get(*i as usize)?.clone()))).collect(),
            None => match &self.store {
                Some(store) => store.read(move |db| db.texts(&ids))?.into_iter().collect(),
                None => HashMap::new(),
            },
        };
        let hits = page
            .into_iter()
            .map(|(mut hit, text)| {
                hit.snippet = texts.get(&text).map(|b| snippet(b, &q)).unwrap_or_default();
                hit
            })
            .collect();
        let next = (offset.saturating_add(limit) < total).then(|| offset + limit);
        Ok(SearchReply { hits, total, next })
    }

    /// The hits for `matches` (best first), each with the text its excerpt comes from: one per
    /// node where text entered, best first, then the nodes that carry it (see the module doc).
    /// Nodes deleted since they were indexed are left out. Only the first `need` are put in
    /// order (a page never reads past them; a common word may have a hit per node).
    fn rank(&self, matches: Vec<TextMatch>, with_tree: bool, need: usize) -> Vec<(SearchHit, u64)> {
        struct Entered {
            kind: HitKind,
            score: f64,
            text: u64,
            memory: Option<(f64, u64)>,
        }
        let mut entered: HashMap<(u64, NodeId), Entered> = HashMap::new();
        for m in matches {
            let Some(kind) = hit_kind(&m.kind) else { continue };
            let score = m.score as f64 / 1e6;
            let e = entered.entry((m.tree, m.node)).or_insert(Entered { kind, score, text: m.id, memory: None });
            if score > e.score {
                (e.kind, e.score, e.text) = (kind, score, m.id);
            }
            if kind == HitKind::Memory && e.memory.is_none_or(|(s, _)| score > s) {
                e.memory = Some((score, m.id));
            }
        }
        let mut by_tree: HashMap<u64, Vec<NodeId>> = HashMap::new();
        for &(t, n) in entered.keys() {
            by_tree.entry(t).or_default().push(n);
        }
        let (mut first, mut rest) = (Vec::new(), Vec::new());
        for (t, nodes) in by_tree {
            let Ok(handle) = self.tree(t) else { continue };
            let tree = handle.lock();
            let mut sources = Vec::new();
            for n in nodes {
                let e = &entered[&(t, n)];
                if let Ok(node) = tree.node(n) {
                    first.push((hit(with_tree, t, n, e.kind, e.score, None), e.text));
                    if let Some((score, text)) = e.memory {
                        sources.push((node.depth, n, score, text));
                    }
                }
            }
            // Down from each node whose agents' memory took the text in, shallowest first, each
            // node once: it carries the text from the nearest such ancestor. What is walked is
            // the union of those subtrees, not the tree.
            sources.sort_by_key(|s| (s.0, s.1));
            let mut from: HashMap<NodeId, (NodeId, u32, f64, u64)> = HashMap::new();
            for (depth, n, score, text) in sources {
                if from.contains_key(&n) {
                    continue; // reached from a shallower one, and taken as its own source there
                }
                from.insert(n, (n, depth, score, text));
                let mut queue = std::collections::VecDeque::from([n]);
                while let Some(at) = queue.pop_front() {
                    let carry = from[&at];
                    let Ok(node) = tree.node(at) else { continue };
                    for &c in &node.children {
                        let Ok(child) = tree.node(c) else { continue };
                        match entered.get(&(t, c)) {
                            Some(e) => {
                                let own = e.memory.map(|(score, text)| (c, child.depth, score, text));
                                from.insert(c, own.unwrap_or(carry));
                            }
                            None => {
                                from.insert(c, carry);
                                let (source, depth, score, text) = carry;
                                let s = score / f64::from(1 + child.depth.saturating_sub(depth));
                                rest.push((hit(with_tree, t, c, HitKind::Carried, s, Some(source)), text));
                            }
                        }
                        queue.push_back(c);
                    }
                }
            }
        }
        let order = |a: &(SearchHit, u64), b: &(SearchHit, u64)| {
            b.0.score.total_cmp(&a.0.score).then((a.0.tree, a.0.node).cmp(&(b.0.tree, b.0.node)))
        };
        first.sort_by(order);
        let need = need.saturating_sub(first.len());
        if need < rest.len() {
            rest.select_nth_unstable_by(need, order);
            rest[..need].sort_by(order);
        } else {
            rest.sort_by(order);
        }
        first.extend(rest);
        first
    }

    /// Search without a store (`--ephemeral`): every node's own log, annotation and asks, read
    /// from memory, matched as a case-insensitive phrase (no memory index: nothing is carried).
    /// Returns the matches and the texts they index into.
    fn scan(&self, tree: Option<u64>, q: &str) -> (Vec<TextMatch>, Vec<String>) {
        let needle = q.to_lowercase();
        let ids = match tree {
            Some(t) => vec![t],
            None => self.trees.ids(),
        };
        let (mut found, mut bodies) = (Vec::new(), Vec::new());
        for t in ids {
            let Ok(handle) = self.tree(t) else { continue };
            let mut tree = handle.lock();
            for n in tree.ids() {
                let mut texts = Vec::new();
                if let Ok(log) = tree.log(n) {
                    let entries = log.entries();
                    texts.push(("event", index_text(entries.iter().map(String::as_str))));
                }
                if let Some(a) = tree.notes.get(&n) {
                    texts.push(("title", a.title.clone().unwrap_or_default()));
                    texts.push(("note", a.note.clone().unwrap_or_default()));
                    texts.push(("tag", a.tags.join(" ")));
                }
                for a in tree.asks.get(&n).into_iter().flatten() {
                    texts.push(("ask", format!("{}\n{}", a.question, a.answer)));
                }
                for (kind, body) in texts {
                    if body.to_lowercase().contains(&needle) {
                        found.push(TextMatch {
                            id: bodies.len() as u64,
                            tree: t,
                            node: n,
                            kind: kind.into(),
                            score: 1_000_000,
                        });
                        bodies.push(body);
                    }
                }
            }
        }
        (found, bodies)
    }
}

fn set_note(notes: &mut std::collections::BTreeMap<NodeId, Annotation>, node: NodeId, a: Option<Annotation>) {
    match a {
        Some(a) => notes.insert(node, a),
        None => notes.remove(&node),
    };
}

fn annotate(tree: u64, node: NodeId, a: Option<&Annotation>) -> Write {
    Write::Annotate { tree, node, body: a.map(|a| serde_json::to_string(a).unwrap_or_default()) }
}

fn hit(with_tree: bool, tree: u64, node: NodeId, kind: HitKind, score: f64, from: Option<NodeId>) -> SearchHit {
    SearchHit { tree: with_tree.then_some(tree), node, kind, snippet: String::new(), score, from }
}

fn hit_kind(kind: &str) -> Option<HitKind> {
    Some(match kind {
        "event" => HitKind::Event,
        "memory" => HitKind::Memory,
        "title" => HitKind::Title,
        "note" => HitKind::Note,
        "tag" => HitKind::Tag,
        "ask" => HitKind::Ask,
        _ => return None,
    })
}

/// The user's words as given, or why they cannot be searched for.
fn check_query(q: Option<&str>) -> Result<String, WorkbenchError> {
    let q = q.unwrap_or("").trim();
    if q.is_empty() {
        return Err(RequestError::EmptyQuery.into());
    }
    let chars = q.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(RequestError::QueryLength { chars, max: MAX_QUERY_CHARS }.into());
    }
    if let Some(c) = q.chars().find(|c| c.is_control()) {
        return Err(RequestError::QueryControl(c).into());
    }
    Ok(q.to_string())
}

/// Up to ~160 characters of `body` around the first place its words follow the query's, that
/// span in `[` `]` (the start of the text when the words are not found as such: the index
/// folds diacritics, this does not).
fn snippet(body: &str, q: &str) -> String {
    let wanted: Vec<String> = words(q).map(|(_, w)| w.to_lowercase()).collect();
    let found: Vec<(usize, &str)> = words(body).collect();
    let span = (0..found.len()).find_map(|i| {
        let run = found.get(i..i + wanted.len())?;
        run.iter()
            .zip(&wanted)
            .all(|((_, w), q)| w.to_lowercase() == *q)
            .then(|| (run[0].0, run[run.len() - 1].0 + run[run.len() - 1].1.len()))
    });
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some((start, end)) = span else {
        let text = flat(body);
        return match text.char_indices().nth(160) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        };
    };
    let before: String = {
        let head = &body[..start];
        let cut = head.char_indices().rev().nth(59).map_or(0, |(at, _)| at);
        format!("{}{}", if cut > 0 { "…" } else { "" }, flat(&head[cut..]).trim_start())
    };
    let after: String = {
        let tail = &body[end..];
        let cut = tail.char_indices().nth(80).map_or(tail.len(), |(at, _)| at);
        format!("{}{}", flat(&tail[..cut]), if cut < tail.len() { "…" } else { "" })
    };
    let sep = |s: &str, at_end: bool| {
        let ws = if at_end {
            body[..start].ends_with(char::is_whitespace)
        } else {
            body[end..].starts_with(char::is_whitespace)
        };
        if ws && !s.is_empty() { " " } else { "" }
    };
    format!("{before}{}[{}]{}{after}", sep(&before, true), flat(&body[start..end]), sep(&after, false))
}

/// The words of `text` (runs of letters and digits) with their byte offsets.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &text[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &text[s..]));
    }
    out.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_bracket_the_phrase_and_cut_long_texts() {
        assert_eq!(snippet("Ann said: the Red  fox runs", "red fox"), "Ann said: the [Red fox] runs");
        let long = format!("{} needle {}", "a ".repeat(100), "b ".repeat(100));
        let s = snippet(&long, "NEEDLE");
        assert!(s.starts_with('…') && s.ends_with('…') && s.contains("[needle]"), "{s}");
        assert!(s.chars().count() < 170, "{s}");
        assert_eq!(snippet("nothing here", "absent"), "nothing here");
        assert!(check_query(Some(" ")).is_err());
        assert!(check_query(Some("a\u{1}b")).unwrap_err().to_string().contains("U+0001"));
        assert!(check_query(Some(&"x".repeat(257))).is_err());
        assert_eq!(check_query(Some(" NEAR(a b) ")).unwrap(), "NEAR(a b)");
    }
}
