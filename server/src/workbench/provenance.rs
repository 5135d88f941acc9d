//! Where a tree's numbers come from ([`Provenance`]): one source for the tree page's header line,
//! node info, exports and the clients, so no two of them can disagree.

use serde_json::Value;
use sha2::{Digest, Sha256};
use simtree_shared::{Provenance, ProvenanceCheck, ProvenanceDifference};

use super::table::Transfer;
use super::{Core, WorkbenchError, dataset_of};
use crate::sim::ScenarioEntry;
use crate::tree::NodeId;

/// The simtree that serves: its version and the commit it was built from.
pub(crate) fn simtree_build() -> String {
    format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("SIMTREE_COMMIT"))
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a JSON value's canonical text: compact, object keys sorted at every level (this
/// build's maps keep insertion order, so two equal documents could otherwise hash apart).
pub fn sha256_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sha256_hex(sorted(v).to_string().as_bytes())
}

/// The first 12 hex digits, as the one line shows a hash.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

impl Core {
    /// The provenance of `tree`, seen from `node` (its seed and player; the root's for the tree).
    pub(crate) fn provenance(&self, tree: u64, node: NodeId) -> Result<Provenance, WorkbenchError> {
        let handle = self.tree(tree)?;
        let (scenario, version, document, sim) = {
            let mut t = handle.lock();
            let sim = t.sim(node)?;
            (t.scenario.clone(), t.scenario_version, t.document.clone(), sim)
        };
        // The document the tree was made from: its own, the saved version's, or the shipped one.
        let document_sha256 = match (&document, version) {
            (Some(doc), _) => Some(sha256_json(doc)),
            (None, Some(v)) => self.library.get(&scenario, Some(v)).ok().flatten().map(|d| sha256_json(&d.document)),
            (None, None) => ScenarioEntry::find(&self.scenarios, &scenario)
                .ok()
                .map(|e| sha256_json(&super::library::shipped_document(e).document)),
        };
        let dataset = match (&*sim, document.as_deref().and_then(dataset_of)) {
            (_, Some(name)) => Some(name.to_string()),
            (crate::sim::Sim::Trading(_), None) => Some(super::SHIPPED_DATASET.to_string()),
            _ => None,
        };
        let dataset_sha256 = dataset.as_deref().and_then(|d| self.dataset_sha256(d));
        let seed = sim.seed();
        let player = self.backend.label(&scenario, &sim, None);
        let prices_sha256 = sha256_hex(format!("{:?}", self.prices).as_bytes());
        let simtree = simtree_build();
        let mut line = match version {
            Some(v) => format!("{scenario}@{v}"),
            None => scenario.clone(),
        };
        if let Some(h) = &document_sha256 {
            line.push_str(&format!(" sha256:{}", short(h)));
        }
        if let Some(d) = &dataset {
            line.push_str(&format!(" · dataset {d}"));
            if let Some(h) = &dataset_sha256 {
                line.push_str(&format!(" sha256:{}", short(h)));
            }
        }
        line.push_str(&format!(" · {player}"));
        if let Some(s) = seed {
            line.push_str(&format!(" · seed {s}"));
        }
        line.push_str(&format!(" · prices sha256:{} · simtree {simtree}", short(&prices_sha256)));
        Ok(Provenance {
            scenario,
            version,
            document_sha256,
            dataset,
            dataset_sha256,
            seed,
            player,
            prices_sha256,
            simtree,
            line,
        })
    }
}

/// How an export's `statement` of provenance compares with `here`, this server's for the tree
/// the export became: field by field, `line` left out (it only restates the others).
pub(crate) fn compare(statement: Option<&Value>, here: Provenance) -> ProvenanceCheck {
    let export = statement.map(|v| serde_json::from_value::<Provenance>(v.clone()));
    let (export, note) = match export {
        None => (None, Some("the export states no provenance (it was written before exports did)".to_string())),
        Some(Err(e)) => (None, Some(format!("the export's provenance is not readable: {e}"))),
        Some(Ok(p)) => (Some(p), None),
    };
    let mut differences = Vec::new();
    if let Some(export) = &export {
        let fields = |p: &Provenance| match serde_json::to_value(p) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let (theirs, ours) = (fields(export), fields(&here));
        let mut names: Vec<&String> = theirs.keys().collect();
        names.extend(ours.keys().filter(|k| !theirs.contains_key(*k)));
        for name in names.into_iter().filter(|n| *n != "line") {
            let (a, b) = (theirs.get(name), ours.get(name));
            if a != b {
                differences.push(ProvenanceDifference {
                    field: name.clone(),
                    export: a.cloned().unwrap_or(Value::Null),
                    here: b.cloned().unwrap_or(Value::Null),
                });
            }
        }
    }
    ProvenanceCheck { same: export.is_some() && differences.is_empty(), here, export, differences, note }
}

impl Transfer<'_> {
    /// `statement` (an export's, as written) beside what this server states for `tree`.
    pub(crate) fn provenance_check(
        &self,
        tree: u64,
        statement: Option<&Value>,
    ) -> Result<ProvenanceCheck, WorkbenchError> {
        Ok(compare(statement, self.provenance(tree, 0)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha256_in_hex_and_json_is_hashed_with_sorted_keys() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [2, 3]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[2,3],"b":1}"#).unwrap();
        assert_eq!(sha256_json(&a), sha256_json(&b));
        assert!(simtree_build().starts_with(env!("CARGO_PKG_VERSION")));
    }

    fn stated(seed: u64, player: &str, dataset_sha256: Option<&str>) -> Provenance {
        Provenance {
            scenario: "mine".into(),
            version: Some(2),
            document_sha256: Some("d0c".into()),
            dataset: Some("prices".into()),
            dataset_sha256: dataset_sha256.map(String::from),
            seed: Some(seed),
            player: player.into(),
            prices_sha256: "9f1".into(),
            simtree: "0.1.0 (abc)".into(),
            line: format!("a line of seed {seed}"),
        }
    }

    #[test]
    fn a_comparison_names_each_field_that_differs_and_ignores_the_line() {
        let here = stated(1, "mock", None);
        let same = compare(Some(&serde_json::to_value(stated(1, "mock", None)).unwrap()), here.clone());
        assert!(same.same && same.differences.is_empty() && same.note.is_none());

        let theirs = serde_json::to_value(stated(7, "openai:gpt-4o", Some("a1b"))).unwrap();
        let check = compare(Some(&theirs), here.clone());
        let got: Vec<(String, Value, Value)> =
            check.differences.into_iter().map(|d| (d.field, d.export, d.here)).collect();
        assert_eq!(
            got,
            vec![
                ("dataset_sha256".into(), Value::from("a1b"), Value::Null),
                ("seed".into(), Value::from(7), Value::from(1)),
                ("player".into(), Value::from("openai:gpt-4o"), Value::from("mock")),
            ]
        );
        assert!(!check.same);

        let none = compare(None, here.clone());
        assert!(!none.same && none.export.is_none());
        assert!(none.note.unwrap().contains("states no provenance"));
        let forged = compare(Some(&serde_json::json!({"seed": "many"})), here);
        assert!(!forged.same && forged.note.unwrap().starts_with("the export's provenance is not readable"));
    }
}
