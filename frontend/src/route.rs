//! The page routes (spec §4.1, and the New page's `/new/<kind>?from=ID` or `?tree=N`), parsed from and
//! printed to a location path + query. A tree's page may name its selected node
//! (`/simtree/3?node=12`, `/studio/3?node=12`): the query is not part of the route (selecting
//! another node is the same page), [`node_param`] reads it and [`Route::at_node`] writes it.

use simtree_shared::SimKind;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Home,
    /// `/new[/social|/trading|/abm]`: write a scenario of a kind (none: pick one), optionally
    /// starting from a library scenario (`?from=ID`) or a tree's own document (`?tree=N`).
    New {
        kind: Option<SimKind>,
        from: Option<Start>,
    },
    SimTree(Option<u64>),
    Studio(Option<u64>),
    /// `/sim/:treeId?node=N` (also `?sim=N`; default node 0).
    Sim {
        tree: Option<u64>,
        node: u64,
    },
}

/// What the New page starts from, named in its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// `?from=ID` (`ID@K`: version K of a saved scenario).
    Library(String),
    /// `?tree=N`: the document tree N was made from.
    Tree(u64),
}

impl Route {
    pub fn parse(path: &str, query: &str) -> Route {
        let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
        let id = |i: usize| parts.get(i).and_then(|p| p.parse().ok());
        match parts.first().copied() {
            Some("new") => Route::New {
                kind: parts.get(1).and_then(|k| kind_named(k)),
                from: query_param(query, "from")
                    .filter(|f| !f.is_empty())
                    .map(Start::Library)
                    .or_else(|| query_param(query, "tree")?.parse().ok().map(Start::Tree)),
            },
            Some("simtree") => Route::SimTree(id(1)),
            Some("studio") => Route::Studio(id(1)),
            Some("sim") => {
                let q = query.trim_start_matches('?');
                let node = q
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .find(|(k, _)| *k == "sim")
                    .and_then(|(_, v)| v.parse().ok())
                    .or_else(|| node_param(query))
                    .unwrap_or(0);
                Route::Sim { tree: id(1), node }
            }
            _ => Route::Home,
        }
    }

    pub fn href(&self) -> String {
        match self {
            Route::Home => "/".into(),
            Route::New { kind, from } => {
                let mut href = "/new".to_string();
                if let Some(k) = kind {
                    href = format!("{href}/{}", kind_name(*k));
                }
                match from {
                    Some(Start::Library(f)) => href = format!("{href}?from={}", encode(f)),
                    Some(Start::Tree(t)) => href = format!("{href}?tree={t}"),
                    None => {}
                }
                href
            }
            Route::SimTree(None) => "/simtree".into(),
            Route::SimTree(Some(t)) => format!("/simtree/{t}"),
            Route::Studio(None) => "/studio".into(),
            Route::Studio(Some(t)) => format!("/studio/{t}"),
            Route::Sim { tree: None, .. } => "/sim".into(),
            Route::Sim { tree: Some(t), node } => format!("/sim/{t}?node={node}"),
        }
    }

    /// The route's address with `node` selected (a tree's page; other routes ignore it).
    pub fn at_node(&self, node: u64) -> String {
        match self {
            Route::SimTree(Some(_)) | Route::Studio(Some(_)) => format!("{}?node={node}", self.href()),
            _ => self.href(),
        }
    }
}

/// The kind's word in a `/new/…` path.
pub fn kind_name(kind: SimKind) -> &'static str {
    match kind {
        SimKind::Social => "social",
        SimKind::Trading => "trading",
        SimKind::Abm => "abm",
    }
}

fn kind_named(word: &str) -> Option<SimKind> {
    [SimKind::Social, SimKind::Trading, SimKind::Abm].into_iter().find(|k| kind_name(*k) == word)
}

/// A query parameter's value, `%XX` escapes decoded.
fn query_param(query: &str, name: &str) -> Option<String> {
    let raw = query.trim_start_matches('?').split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name)?.1;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], raw.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `text` safe in a query value: what is not a letter, a digit or `-_.~` as `%XX`.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// The `node` of a location's query (`?node=12`, `?a=1&node=12`), if it names one.
pub fn node_param(query: &str) -> Option<u64> {
    query
        .trim_start_matches('?')
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "node")
        .and_then(|(_, v)| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_round_trip() {
        assert_eq!(Route::parse("/", ""), Route::Home);
        assert_eq!(Route::parse("/simtree/3", ""), Route::SimTree(Some(3)));
        assert_eq!(Route::parse("/studio", ""), Route::Studio(None));
        assert_eq!(Route::parse("/sim/2", "?node=14"), Route::Sim { tree: Some(2), node: 14 });
        assert_eq!(Route::parse("/sim/2", "?sim=5"), Route::Sim { tree: Some(2), node: 5 });
        assert_eq!(Route::parse("/sim/2", ""), Route::Sim { tree: Some(2), node: 0 });
        assert_eq!(Route::parse("/simtree/3", "?node=12"), Route::SimTree(Some(3)), "the node is no other page");
        assert_eq!(node_param("?node=12"), Some(12));
        assert_eq!(node_param("?a=1&node=7"), Some(7));
        assert_eq!(node_param("?node=x"), None);
        assert_eq!(node_param(""), None);
        assert_eq!(Route::SimTree(Some(3)).at_node(12), "/simtree/3?node=12");
        assert_eq!(Route::Studio(Some(3)).at_node(0), "/studio/3?node=0");
        assert_eq!(Route::Home.at_node(4), "/");
        assert_eq!(Route::parse("/new/abm", ""), Route::New { kind: Some(SimKind::Abm), from: None });
        assert_eq!(Route::parse("/new/nope", "?from="), Route::New { kind: None, from: None });
        assert_eq!(
            Route::parse("/new", "?from=my%20scene%401"),
            Route::New { kind: None, from: Some(Start::Library("my scene@1".into())) }
        );
        assert_eq!(Route::parse("/new", "?tree=7"), Route::New { kind: None, from: Some(Start::Tree(7)) });
        assert_eq!(Route::parse("/new", "?tree=x"), Route::New { kind: None, from: None });
        for r in [
            Route::Home,
            Route::New { kind: None, from: None },
            Route::New { kind: Some(SimKind::Trading), from: Some(Start::Library("a b/c".into())) },
            Route::New { kind: Some(SimKind::Abm), from: Some(Start::Tree(12)) },
            Route::SimTree(Some(1)),
            Route::Studio(Some(4)),
            Route::Sim { tree: Some(1), node: 9 },
        ] {
            let href = r.href();
            let (p, q) = href.split_once('?').unwrap_or((&href, ""));
            assert_eq!(Route::parse(p, q), r);
        }
    }
}
