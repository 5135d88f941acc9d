//! The scenario library: scenarios users save (`POST /api/scenarios`, `simtree scenarios save`)
//! next to the shipped ones, every version kept.
//!
//! A saved scenario's id is the name it was saved under (letters, digits, `_`, `.`, `-`; never a
//! shipped id). `PUT` adds a version; earlier ones stay readable as `id@version`, and a tree
//! made from one remembers which (its `origin`). `DELETE` removes every version, but a tree made
//! from it keeps its copy of the document; the highest version number given stays in the store,
//! so a scenario saved again under the same name goes on from there and no `id@version` ever
//! names two documents. Shipped scenarios are read-only (409).
//!
//! The documents are checked as inline ones are (`UserScenario::from_document`, the same size
//! limit), plus whatever the caller adds (a trading document against its market). In memory
//! the library keeps each scenario's versions and the latest one's summary; with a store the
//! documents themselves are read from it when asked for.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use simtree_shared::{SavedRef, ScenarioDocument, ScenarioOrigin, ScenarioSummary, SimKind};

use super::{Full, Missing, RequestError, WorkbenchError};
use crate::scenario::{ScenarioLibrary, UserScenario};
use crate::sim::{ABM_DEFAULT_STEPS, ScenarioEntry};
use crate::store::{Store, StoreError, Write, now_ms};

/// Saved scenarios a library holds at most.
pub(crate) const MAX_SAVED_SCENARIOS: usize = 1000;
/// Versions one saved scenario keeps at most (delete it, or save under another name).
pub(crate) const MAX_VERSIONS: usize = 1000;

/// A saved scenario's name (its id): 1 to 64 of `A-Z a-z 0-9 _ . -`, not starting with `.` or
/// `-` — so no control characters, no path (`/`, a leading `..`), no `@` (which separates a
/// version).
pub(crate) fn check_scenario_name(name: &str) -> Result<(), ScenarioNameError> {
    let bad = |why| Err(ScenarioNameError { name: name.to_string(), why });
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return bad(NameFault::Control(c));
    }
    if name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return bad(NameFault::Path);
    }
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok { Ok(()) } else { bad(NameFault::Form) }
}

/// A saved scenario's name that [`check_scenario_name`] refuses, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("scenario name {name:?}: {why}")]
pub struct ScenarioNameError {
    name: String,
    why: NameFault,
}

/// What is wrong with a scenario name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameFault {
    #[error("must not contain control characters (found U+{:04X})", *.0 as u32)]
    Control(char),
    #[error("must not contain '/' or '\\' nor start with '.' (it is an id, not a path)")]
    Path,
    #[error("use 1 to 64 letters, digits, '_', '.' or '-', not starting with '.' or '-'")]
    Form,
}

/// `id` or `id@version` → the id and the version asked for, if any.
pub(crate) fn parse_ref(text: &str) -> Result<(&str, Option<u64>), WorkbenchError> {
    match text.rsplit_once('@') {
        None => Ok((text, None)),
        Some((id, v)) => match v.parse::<u64>() {
            Ok(n) if n >= 1 && !v.starts_with('+') => Ok((id, Some(n))),
            _ => Err(RequestError::VersionSyntax(text.to_string()).into()),
        },
    }
}

struct Version {
    version: u64,
    /// The document, when there is no store to read it from (`--ephemeral`).
    body: Option<Arc<str>>,
}

struct Entry {
    versions: Vec<Version>,
    /// The latest version's summary (what `GET /api/scenarios` lists).
    summary: ScenarioSummary,
}

/// Extra checks a caller makes of a document before it is saved (the workbench builds a trading
/// episode on its market, as creating a tree would).
pub(crate) type Check<'a> = &'a dyn Fn(&UserScenario) -> Result<(), WorkbenchError>;

/// The saved scenarios (see the module doc).
pub(crate) struct Library {
    store: Option<Arc<Store>>,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// The highest version each id was given, deleted ones included.
    counters: Mutex<HashMap<String, u64>>,
    /// Largest document, in bytes of JSON: the limit inline documents have (the request body).
    max_bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the list shows of a document, read from its shape (it was checked when it was saved).
fn summary_of(id: &str, version: u64, doc: &Value) -> ScenarioSummary {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (kind, title, description, scene, default_turns) = if doc.get("scene").is_some() {
        (
            SimKind::Social,
            text(&doc["title"]),
            text(&doc["description"]),
            doc["scene"]["type"].as_str().map(str::to_string),
            doc["default_turns"].as_u64().unwrap_or(50),
        )
    } else if doc.get("episode").is_some() {
        (
            SimKind::Trading,
            text(&doc["title"]),
            text(&doc["description"]),
            None,
            doc["default_turns"].as_u64().unwrap_or(50),
        )
    } else {
        let info = |k: &str| crate::scenario::abm_text(doc, k);
        (SimKind::Abm, info("title"), info("explanation"), None, ABM_DEFAULT_STEPS)
    };
    ScenarioSummary {
        id: id.to_string(),
        title: if title.is_empty() { id.to_string() } else { title },
        description,
        kind,
        scene,
        default_turns,
        origin: ScenarioOrigin::Saved,
        version: Some(version),
    }
}

impl Library {
    /// An empty library kept in memory.
    pub(crate) fn in_memory(max_bytes: usize) -> Library {
        Library { store: None, entries: Mutex::new(BTreeMap::new()), counters: Mutex::new(HashMap::new()), max_bytes }
    }

    /// The library a store holds.
    pub(crate) fn open(store: Arc<Store>, max_bytes: usize) -> Result<Library, StoreError> {
        let rows = store.read(|db| db.scenarios())?;
        let counters = store.read(|db| db.scenario_counters())?;
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
        for row in rows {
            let doc: Value = match serde_json::from_str(&row.body) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(scenario = row.id, version = row.version, "a saved scenario is unreadable: {e}");
                    continue;
                }
            };
            let summary = summary_of(&row.id, row.version, &doc);
            let version = Version { version: row.version, body: None };
            match entries.get_mut(&row.id) {
                Some(e) => {
                    // Rows come by id and version: the last one read is the latest.
                    e.versions.push(version);
                    e.summary = summary;
                }
                None => {
                    entries.insert(row.id.clone(), Entry { versions: vec![version], summary });
                }
            }
        }
        Ok(Library {
            store: Some(store),
            entries: Mutex::new(entries),
            counters: Mutex::new(counters.into_iter().collect()),
            max_bytes,
        })
    }

    /// Saved scenarios by id, each with its latest version.
    pub(crate) fn list(&self) -> Vec<ScenarioSummary> {
        lock(&self.entries).values().map(|e| e.summary.clone()).collect()
    }

    /// Whether `id` is a saved scenario.
    pub(crate) fn contains(&self, id: &str) -> bool {
        lock(&self.entries).contains_key(id)
    }

    /// Checks a document as an inline one is checked: size, then the kind's validator, then
    /// `check`. Returns the parsed scenario.
    pub(crate) fn check_document(&self, doc: &Value, check: Check<'_>) -> Result<UserScenario, WorkbenchError> {
        let size = doc.to_string().len();
        if size > self.max_bytes {
            return Err(WorkbenchError::DocumentTooLarge { size, max: self.max_bytes });
        }
        let user = UserScenario::from_document(super::DOCUMENT_ID, doc)?;
        check(&user)?;
        Ok(user)
    }

    fn shipped_conflict(shipped: &ScenarioLibrary, id: &str) -> Result<(), WorkbenchError> {
        if ScenarioEntry::find(shipped, id).is_ok() {
            return Err(WorkbenchError::ShippedScenario(id.to_string()));
        }
        Ok(())
    }

    /// Writes one version and waits until it is durable.
    fn write(&self, id: &str, version: u64, saved: u64, body: &str) -> Result<(), WorkbenchError> {
        if let Some(store) = &self.store {
            store.write(Write::SaveScenario { id: id.to_string(), version, saved, body: body.to_string() });
            store.flush()?;
        }
        Ok(())
    }

    /// `POST /api/scenarios`: version 1 (or the next after a deleted scenario's last) of a new
    /// saved scenario. Nothing is kept on a refusal.
    pub(crate) fn save(
        &self,
        shipped: &ScenarioLibrary,
        name: &str,
        doc: &Value,
        check: Check<'_>,
    ) -> Result<SavedRef, WorkbenchError> {
        check_scenario_name(name)?;
        Self::shipped_conflict(shipped, name)?;
        self.check_document(doc, check)?;
        // One save at a time: two saves of one name must not both pass the check below.
        let mut entries = lock(&self.entries);
        if entries.contains_key(name) {
            return Err(WorkbenchError::SavedScenarioExists(name.to_string()));
        }
        if entries.len() >= MAX_SAVED_SCENARIOS {
            return Err(Full::SavedScenarios(MAX_SAVED_SCENARIOS).into());
        }
        let version = lock(&self.counters).get(name).copied().unwrap_or(0) + 1;
        let saved = now_ms();
        let body = doc.to_string();
        self.write(name, version, saved, &body)?;
        lock(&self.counters).insert(name.to_string(), version);
        entries.insert(
            name.to_string(),
            Entry {
                versions: vec![Version { version, body: self.store.is_none().then(|| Arc::from(body.as_str())) }],
                summary: summary_of(name, version, doc),
            },
        );
        Ok(SavedRef { id: name.to_string(), version })
    }

    /// `PUT /api/scenarios/{id}`: the next version of a saved scenario.
    pub(crate) fn update(
        &self,
        shipped: &ScenarioLibrary,
        id: &str,
        doc: &Value,
        check: Check<'_>,
    ) -> Result<SavedRef, WorkbenchError> {
        Self::shipped_conflict(shipped, id)?;
        if !self.contains(id) {
            return Err(Self::not_found(id));
        }
        self.check_document(doc, check)?;
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(id).ok_or_else(|| Self::not_found(id))?;
        if entry.versions.len() >= MAX_VERSIONS {
            return Err(Full::Versions { id: id.to_string(), max: MAX_VERSIONS }.into());
        }
        let last = entry.versions.last().map_or(0, |v| v.version);
        let version = lock(&self.counters).get(id).copied().unwrap_or(0).max(last) + 1;
        let saved = now_ms();
        let body = doc.to_string();
        self.write(id, version, saved, &body)?;
        lock(&self.counters).insert(id.to_string(), version);
        entry.versions.push(Version { version, body: self.store.is_none().then(|| Arc::from(body.as_str())) });
        entry.summary = summary_of(id, version, doc);
        Ok(SavedRef { id: id.to_string(), version })
    }

    /// `DELETE /api/scenarios/{id}`: every version (trees made from it keep their copy).
    pub(crate) fn delete(&self, shipped: &ScenarioLibrary, id: &str) -> Result<(), WorkbenchError> {
        Self::shipped_conflict(shipped, id)?;
        let mut entries = lock(&self.entries);
        if !entries.contains_key(id) {
            return Err(Self::not_found(id));
        }
        if let Some(store) = &self.store {
            store.write(Write::DeleteScenario { id: id.to_string() });
            store.flush()?;
        }
        entries.remove(id);
        Ok(())
    }

    fn not_found(id: &str) -> WorkbenchError {
        Missing::SavedScenario(id.to_string()).into()
    }

    /// A saved scenario's document: version `version`, or the latest. `None` when `id` is not
    /// a saved scenario.
    pub(crate) fn get(&self, id: &str, version: Option<u64>) -> Result<Option<ScenarioDocument>, WorkbenchError> {
        let (chosen, body, versions) = {
            let entries = lock(&self.entries);
            let Some(entry) = entries.get(id) else {
                return Ok(None);
            };
            let chosen = match version {
                None => entry.versions.last(),
                Some(n) => entry.versions.iter().find(|v| v.version == n),
            };
            let Some(chosen) = chosen else {
                return Err(Missing::Version {
                    id: id.to_string(),
                    version: version.unwrap_or(0),
                    kept: entry.versions.iter().map(|v| v.version).collect(),
                }
                .into());
            };
            let versions = entry.versions.iter().map(|v| v.version).collect::<Vec<_>>();
            (chosen.version, chosen.body.clone(), versions)
        };
        let body: String = match (body, &self.store) {
            (Some(b), _) => b.to_string(),
            (None, Some(store)) => {
                let key = id.to_string();
                store.read(move |db| db.scenario_body(&key, chosen))?.ok_or_else(|| Self::not_found(id))?
            }
            (None, None) => return Err(Self::not_found(id)),
        };
        let document: Value = serde_json::from_str(&body).map_err(|source| {
            WorkbenchError::SavedScenarioUnreadable { id: id.to_string(), version: chosen, source }
        })?;
        let summary = summary_of(id, chosen, &document);
        Ok(Some(ScenarioDocument {
            id: id.to_string(),
            origin: ScenarioOrigin::Saved,
            version: chosen,
            versions,
            kind: summary.kind,
            title: summary.title,
            document,
        }))
    }
}

/// A shipped scenario's document, in the form `POST /devui/simtree` takes inline (so it can be
/// saved as a copy and edited).
pub(crate) fn shipped_document(entry: ScenarioEntry<'_>) -> ScenarioDocument {
    let document = match entry {
        ScenarioEntry::Social(s) => serde_json::to_value(s).unwrap_or(Value::Null),
        ScenarioEntry::Trading(t) => serde_json::to_value(t).unwrap_or(Value::Null),
        ScenarioEntry::Abm(a) => serde_json::json!({
            "title": a.title,
            "explanation": a.description,
            "model": a.model,
        }),
    };
    let summary = entry.summary();
    ScenarioDocument {
        id: summary.id,
        origin: ScenarioOrigin::Shipped,
        version: 1,
        versions: vec![1],
        kind: summary.kind,
        title: summary.title,
        document,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_ids_not_paths_and_refs_parse() {
        for good in ["mine", "Council-2", "a_b", "9"] {
            assert!(check_scenario_name(good).is_ok(), "{good}");
        }
        let e = check_scenario_name("evil\u{1b}[31m").unwrap_err().to_string();
        assert!(e.contains("control characters (found U+001B)"), "{e}");
        for path in ["../etc/passwd", "..", ".hidden", "a/b", "a\\b"] {
            let e = check_scenario_name(path).unwrap_err().to_string();
            assert!(e.contains("not a path"), "{e}");
        }
        assert!(check_scenario_name("v1.2_final-draft").is_ok());
        for bad in ["", "-x", "a b", "a@1", "é", &"x".repeat(65)] {
            assert!(check_scenario_name(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_ref("mine").unwrap(), ("mine", None));
        assert_eq!(parse_ref("mine@2").unwrap(), ("mine", Some(2)));
        for bad in ["mine@0", "mine@", "mine@x", "mine@+1"] {
            assert!(parse_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_shipped_document_checks_out_as_a_users_document() {
        let assets = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets"));
        let shipped = ScenarioLibrary::load_assets(assets).unwrap();
        for entry in ScenarioEntry::all(&shipped) {
            let d = shipped_document(entry);
            let user = UserScenario::from_document(&d.id, &d.document).unwrap_or_else(|e| panic!("{}: {e}", d.id));
            assert_eq!(ScenarioEntry::from(&user).kind(), entry.kind(), "{}", d.id);
            let s = summary_of(&d.id, 1, &d.document);
            assert_eq!((s.kind, &s.title), (entry.kind(), &entry.summary().title), "{}", d.id);
        }
    }

    #[test]
    fn versions_go_on_after_a_deletion_and_old_ones_stay_readable() {
        let shipped = ScenarioLibrary::default();
        let lib = Library::in_memory(1 << 20);
        let ok: Check<'_> = &|_| Ok(());
        let chat: Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/scenarios/simple_chat.json"))
                .unwrap(),
        )
        .unwrap();
        let mut v2 = chat.clone();
        v2["title"] = "second".into();
        assert_eq!(lib.save(&shipped, "c", &chat, ok).unwrap().version, 1);
        assert_eq!(lib.update(&shipped, "c", &v2, ok).unwrap().version, 2);
        assert_eq!(lib.get("c", Some(1)).unwrap().unwrap().document, chat);
        let latest = lib.get("c", None).unwrap().unwrap();
        assert_eq!((latest.version, latest.versions, &latest.document["title"]), (2, vec![1, 2], &"second".into()));
        assert_eq!(lib.list()[0].version, Some(2));
        lib.delete(&shipped, "c").unwrap();
        assert!(lib.get("c", None).unwrap().is_none());
        assert_eq!(lib.save(&shipped, "c", &chat, ok).unwrap().version, 3);
        let big = Library::in_memory(10);
        assert!(matches!(big.save(&shipped, "d", &chat, ok), Err(WorkbenchError::DocumentTooLarge { .. })));
    }
}
