//! The custom scene's form, the pure part (tested natively): the starting `config` of a scene of
//! type `custom`, its list items, and the one-of shapes the format uses — an effect
//! (`{"say": …}`, `{"set": {var, value}}`), a phase's `actors` and `ends`, an action's
//! `visibility` — read and switched by kind. The form ([`crate::pages`]'s `new/custom.rs`)
//! edits places of the document by JSON pointer with these, as the rest of the New page does, so
//! the form and the JSON view stay two views of one document.

use serde_json::{Value, json};

use crate::draft::{agent_count, set_at};

/// What one kind of a one-of value holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inner {
    /// Nothing: the value is the kind's name as a string (`"all_acted"`).
    Unit,
    /// A string (an expression or a name): `{"when": "…"}`.
    Text,
    /// A list of names: `{"roles": ["juror"]}`.
    Names,
    /// A whole number: `{"rounds": 3}`.
    Number,
    /// An object with these string fields: `{"set": {"var": "…", "value": "…"}}` (the first
    /// ones are required, the rest optional).
    Fields(&'static [&'static str]),
}

/// The kinds of an effect, with what each holds.
pub const EFFECTS: &[(&str, Inner)] = &[
    ("say", Inner::Text),
    ("tell", Inner::Text),
    ("set", Inner::Fields(&["var", "value", "agent"])),
    ("add", Inner::Fields(&["var", "value", "agent"])),
    ("transfer", Inner::Fields(&["var", "to", "amount", "from"])),
    ("vote", Inner::Fields(&["tally", "choice"])),
    ("clear_votes", Inner::Text),
    ("reveal", Inner::Text),
    ("eliminate", Inner::Text),
    ("mute", Inner::Text),
    ("unmute", Inner::Text),
    ("goto", Inner::Text),
    ("end", Inner::Text),
];

/// Who acts in a phase.
pub const ACTORS: &[(&str, Inner)] = &[("all", Inner::Unit), ("roles", Inner::Names), ("expr", Inner::Text)];

/// How a phase ends.
pub const ENDS: &[(&str, Inner)] =
    &[("rounds", Inner::Number), ("all_acted", Inner::Unit), ("when", Inner::Text), ("as_soon_as", Inner::Text)];

/// Who sees an action.
pub const VISIBILITY: &[(&str, Inner)] =
    &[("public", Inner::Unit), ("private_to", Inner::Text), ("roles", Inner::Names), ("moderator", Inner::Unit)];

pub const VAR_TYPES: [&str; 5] = ["int", "number", "string", "bool", "list"];
pub const PARAM_TYPES: [&str; 5] = ["enum", "int", "number", "string", "agent"];
pub const TALLY_KINDS: [&str; 4] = ["majority", "unanimity", "plurality", "sum"];
pub const ORDERS: [&str; 3] = ["sequential", "random", "continue"];

/// How many of a fields-holding kind's fields are required (the first ones; the rest are
/// optional and left out while empty).
pub fn required(kind: &str) -> usize {
    match kind {
        "set" | "add" | "vote" => 2,
        "transfer" => 3,
        _ => 0,
    }
}

/// The kind of the one-of value at `ptr` and what it holds: `"all_acted"` is `all_acted`,
/// `{"when": "…"}` is `when`. A missing value is the table's first kind.
pub fn kind_at(doc: &Value, ptr: &str, table: &[(&'static str, Inner)]) -> &'static str {
    let name = match doc.pointer(ptr) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o.keys().next().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    table.iter().find(|(k, _)| *k == name).or(table.first()).map_or("", |(k, _)| k)
}

/// A fresh value of kind `kind`.
pub fn fresh(kind: &str, table: &[(&'static str, Inner)]) -> Value {
    let inner = table.iter().find(|(k, _)| *k == kind).map_or(Inner::Unit, |(_, i)| *i);
    match inner {
        Inner::Unit => Value::String(kind.into()),
        Inner::Text => json!({ kind: "" }),
        Inner::Names => json!({ kind: [] }),
        Inner::Number => json!({ kind: 1 }),
        Inner::Fields(fields) => {
            let o: serde_json::Map<String, Value> =
                fields[..required(kind)].iter().map(|f| (f.to_string(), Value::String(String::new()))).collect();
            json!({ kind: o })
        }
    }
}

/// Switches the one-of value at `ptr` to `kind` (what the old kind held goes).
pub fn set_kind(doc: &mut Value, ptr: &str, kind: &str, table: &[(&'static str, Inner)]) {
    if kind_at(doc, ptr, table) == kind && doc.pointer(ptr).is_some() {
        return;
    }
    set_at(doc, ptr, Some(fresh(kind, table)));
}

/// Sets the type of the parameter at `ptr`: what only the old type takes goes, and the new
/// type's own fields start filled (an enum's values, a number's range, a string's length).
pub fn set_param_type(doc: &mut Value, ptr: &str, ty: &str) {
    for key in ["values", "min", "max", "max_length"] {
        set_at(doc, &format!("{ptr}/{key}"), None);
    }
    set_at(doc, &format!("{ptr}/type"), Some(Value::String(ty.into())));
    let own: &[(&str, Value)] = match ty {
        "enum" => &[("values", json!([]))],
        "int" | "number" => &[("min", json!(0)), ("max", json!(10))],
        "string" => &[("max_length", json!(200))],
        _ => &[],
    };
    for (key, v) in own {
        set_at(doc, &format!("{ptr}/{key}"), Some(v.clone()));
    }
}

/// Items of the list at `ptr` (0 when there is none).
pub fn len_at(doc: &Value, ptr: &str) -> usize {
    doc.pointer(ptr).and_then(Value::as_array).map_or(0, Vec::len)
}

/// Appends `item` to the list at `ptr`, making the list when there is none.
pub fn push_at(doc: &mut Value, ptr: &str, item: Value) {
    if !doc.pointer(ptr).is_some_and(Value::is_array) {
        set_at(doc, ptr, Some(json!([])));
    }
    if let Some(a) = doc.pointer_mut(ptr).and_then(Value::as_array_mut) {
        a.push(item);
    }
}

/// What a value field (a variable's `initial`) puts in the document: JSON when the text is
/// JSON (`3`, `true`, `[1, 2]`, `"x"`), else the text as a string; nothing when empty.
pub fn json_or_text(text: &str) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    Some(serde_json::from_str(t).unwrap_or_else(|_| Value::String(text.to_string())))
}

/// A new item of the list called `list` (`roles`, `actions`, …), named `name`.
pub fn new_item(list: &str, name: &str) -> Value {
    match list {
        "roles" => json!({"name": name, "instructions": ""}),
        "variables" => json!({"name": name, "type": "int", "initial": 0}),
        "actions" => json!({"name": name, "description": "", "effects": []}),
        "params" => json!({"name": name, "type": "string", "max_length": 200}),
        "phases" => json!({"name": name, "ends": "all_acted", "next": [{"end": ""}]}),
        "next" => json!({"end": ""}),
        "tallies" => json!({"name": name, "kind": "majority"}),
        "endings" => json!({"when": "", "outcome": ""}),
        "metrics" => json!({"name": name, "value": ""}),
        "require" => json!({"check": "", "message": ""}),
        "effects" | "on_enter" | "on_exit" => fresh("say", EFFECTS),
        _ => json!({"name": name}),
    }
}

/// The starting `config` of a custom scene: one role, one action, one phase, one outcome — a
/// scene that runs as it is, to grow from.
pub fn template() -> Value {
    json!({
        "setting": "A small group talks a question over.",
        "rules": "",
        "roles": [{"name": "member", "instructions": "Say what you think, briefly."}],
        "actions": [{
            "name": "speak",
            "description": "say something to everyone",
            "params": [{"name": "text", "type": "string", "max_length": 500}],
            "effects": [{"say": "params.text"}]
        }],
        "phases": [{"name": "discussion", "ends": {"rounds": 2}, "next": [{"end": "done"}]}],
        "outcomes": ["done"]
    })
}

/// The roles a custom scene names, in order.
pub fn role_names(doc: &Value) -> Vec<String> {
    (0..len_at(doc, "/scene/config/roles"))
        .filter_map(|i| {
            doc.pointer(&format!("/scene/config/roles/{i}/name")).and_then(Value::as_str).map(str::to_string)
        })
        .collect()
}

/// Makes `doc` a custom scene: the starting config, and every agent given the first role
/// (an agent's role is `properties.role`).
pub fn make_custom(doc: &mut Value) {
    set_at(doc, "/scene/config", Some(template()));
    let first = role_names(doc).into_iter().next().unwrap_or_default();
    for i in 0..agent_count(doc) {
        set_at(doc, &format!("/agents/{i}/properties/role"), Some(Value::String(first.clone())));
    }
}

/// The id of the form field showing `ptr` inside the scene's config: `/scene/config/roles/0/name`
/// is `cfg-roles-0-name`.
pub fn field_id(ptr: &str) -> String {
    format!("cfg-{}", ptr.trim_start_matches("/scene/config/").replace('/', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draft::{set_scene_type, social_template};

    #[test]
    fn one_of_values_are_read_and_switched_by_kind() {
        let mut d = json!({"e": {"set": {"var": "x", "value": "1"}}, "a": "all_acted", "w": {"when": "true"}});
        assert_eq!(kind_at(&d, "/e", EFFECTS), "set");
        assert_eq!(kind_at(&d, "/a", ENDS), "all_acted");
        assert_eq!(kind_at(&d, "/w", ENDS), "when");
        assert_eq!(kind_at(&d, "/missing", ACTORS), "all");
        set_kind(&mut d, "/e", "transfer", EFFECTS);
        assert_eq!(d["e"], json!({"transfer": {"var": "", "to": "", "amount": ""}}));
        set_kind(&mut d, "/e", "say", EFFECTS);
        assert_eq!(d["e"], json!({"say": ""}));
        set_kind(&mut d, "/a", "rounds", ENDS);
        assert_eq!(d["a"], json!({"rounds": 1}));
        set_kind(&mut d, "/a", "all_acted", ENDS);
        assert_eq!(d["a"], json!("all_acted"));
        set_kind(&mut d, "/v", "roles", VISIBILITY);
        assert_eq!(d["v"], json!({"roles": []}));
        // Switching to the kind it already is keeps what it holds.
        d["w"] = json!({"when": "vars.x > 1"});
        set_kind(&mut d, "/w", "when", ENDS);
        assert_eq!(d["w"], json!({"when": "vars.x > 1"}));
    }

    #[test]
    fn lists_grow_and_values_read_as_json_or_text() {
        let mut d = json!({});
        push_at(&mut d, "/scene/config/roles", new_item("roles", "juror"));
        push_at(&mut d, "/scene/config/roles", new_item("roles", "foreperson"));
        assert_eq!(len_at(&d, "/scene/config/roles"), 2);
        assert_eq!(role_names(&d), ["juror", "foreperson"]);
        assert_eq!(json_or_text("3"), Some(json!(3)));
        assert_eq!(json_or_text("[1, 2]"), Some(json!([1, 2])));
        assert_eq!(json_or_text("guilty"), Some(json!("guilty")));
        assert_eq!(json_or_text(" "), None);
        assert_eq!(field_id("/scene/config/actions/0/params/1/name"), "cfg-actions-0-params-1-name");
        let mut p = json!({"p": new_item("params", "verdict")});
        set_param_type(&mut p, "/p", "enum");
        assert_eq!(p["p"], json!({"name": "verdict", "type": "enum", "values": []}));
        set_param_type(&mut p, "/p", "int");
        assert_eq!(p["p"], json!({"name": "verdict", "type": "int", "min": 0, "max": 10}));
    }

    #[test]
    fn switching_to_custom_starts_a_scene_that_gives_every_agent_a_role() {
        let mut d = social_template();
        set_scene_type(&mut d, "custom");
        assert_eq!(d["scene"]["config"], template());
        assert_eq!(d["agents"][1]["properties"]["role"], "member");
        // A custom scene offers only `yield` of the registry's actions.
        assert_eq!(d["agents"][0]["action_space"], json!(["yield"]));
        crate::draft::add_agent(&mut d);
        assert_eq!(d["agents"][2]["action_space"], json!(["yield"]));
        assert_eq!(d["agents"][2]["properties"], json!({"role": "member"}));
        set_scene_type(&mut d, "council");
        assert!(d["scene"].get("config").is_none());
    }
}
