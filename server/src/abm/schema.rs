//! The LLM response schema for model generation (seed 001), generated from the Rust types of
//! [`model`](super::model) — never kept by hand — and wrapped the way each provider wants it.
//!
//! `schemars` derives a draft-07 schema from [`LlmAbmResponse`] (field order, `required` from the
//! serde attributes, field doc comments as descriptions). [`response_schema`] normalises it into
//! the form sd-ai's converter produces: everything inline, optional fields `nullable: true` and
//! not required, enums as `{"type": "string", "enum": […]}`, numbers as plain `"number"`, and a
//! root `propertyOrdering`. From that base form, the LLM layer's adapter for each dialect
//! ([`crate::llm::schema::for_dialect`], the one the real requests use too) makes:
//!
//! * OpenAI (`response_format: json_schema`, `strict: true`) needs every property required and
//!   `additionalProperties: false` on every object, so optional fields become
//!   `anyOf: [<schema>, {"type": "null"}]` and `nullable`/`propertyOrdering` are dropped;
//! * Gemini (`responseSchema`) takes the OpenAPI-style base form, with `propertyOrdering` on
//!   every object so that it writes fields in the format's order;
//! * Claude gets the base form as the `input_schema` of one tool it is forced to call.

use std::fmt;
use std::str::FromStr;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::model::LlmAbmResponse;
use crate::llm::Dialect;
use crate::llm::schema as llm_schema;

/// The schema name OpenAI's `json_schema` response format carries.
pub(crate) const SCHEMA_NAME: &str = "sdai_schema";
/// The tool Claude is forced to call.
pub(crate) const TOOL_NAME: &str = "structured_output";

/// An LLM provider with its own way of asking for structured output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Gemini,
    Claude,
}

impl Provider {
    /// All providers, in the order the CLI lists them.
    pub const ALL: [Provider; 3] = [Provider::OpenAi, Provider::Gemini, Provider::Claude];

    /// The name used on the command line and in routes.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Gemini => "gemini",
            Provider::Claude => "claude",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "openai" => Ok(Provider::OpenAi),
            "gemini" | "google" => Ok(Provider::Gemini),
            "claude" | "anthropic" => Ok(Provider::Claude),
            _ => Err(format!("unknown provider '{s}': expected openai, gemini or claude")),
        }
    }
}

/// The response schema in sd-ai's converted form (what Claude receives, and Gemini apart from
/// the nested `propertyOrdering`).
pub(crate) fn response_schema() -> Value {
    let mut settings = SchemaSettings::draft07();
    settings.inline_subschemas = true;
    let root = settings.into_generator().into_root_schema_for::<LlmAbmResponse>();
    let mut v = serde_json::to_value(root).unwrap_or(Value::Null);
    normalise(&mut v);
    if let Value::Object(root) = &mut v {
        // The root is the envelope the LLM fills, not a documented type of its own.
        root.remove("description");
        add_property_ordering(root);
    }
    v
}

impl Provider {
    /// The LLM dialect that speaks for this provider.
    pub(crate) fn dialect(self) -> Dialect {
        match self {
            Provider::OpenAi => Dialect::OpenAi,
            Provider::Gemini => Dialect::Gemini,
            Provider::Claude => Dialect::Anthropic,
        }
    }
}

/// The schema object alone, in the dialect of `provider`: the same adapter
/// ([`crate::llm::schema::for_dialect`]) that shapes the real generation request, so what this
/// shows is what is sent.
pub fn provider_schema(provider: Provider) -> Value {
    llm_schema::for_dialect(provider.dialect(), &response_schema())
}

/// The request fragment that asks `provider` for this structure: OpenAI's `response_format`,
/// Gemini's `config`, or Claude's `tools` + `tool_choice`.
pub fn wrapped(provider: Provider) -> Value {
    let schema = provider_schema(provider);
    match provider {
        Provider::OpenAi => json!({
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "strict": true, "schema": schema}
            }
        }),
        Provider::Gemini => json!({
            "config": {"responseMimeType": "application/json", "responseSchema": schema}
        }),
        Provider::Claude => json!({
            "tools": [{
                "name": TOOL_NAME,
                "description": "Answer by calling this tool with the model, its explanation and its title.",
                "input_schema": schema
            }],
            "tool_choice": {"type": "tool", "name": TOOL_NAME}
        }),
    }
}

/// Turns schemars' draft-07 output into the seed's converted form (see the module docs).
fn normalise(v: &mut Value) {
    match v {
        Value::Object(map) => {
            // Keywords only: a property may itself be called `title` (the response's title), so
            // only string/bool-valued keys are keywords here.
            for key in ["$schema", "title", "format", "additionalProperties"] {
                if map.get(key).is_some_and(|v| v.is_string() || v.is_boolean()) {
                    map.remove(key);
                }
            }
            if let Some(Value::String(d)) = map.get_mut("description") {
                // Doc comments arrive with their line breaks; the LLM needs none of them.
                *d = d.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            for child in map.values_mut() {
                normalise(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// `propertyOrdering` = the order of `properties`.
fn add_property_ordering(map: &mut Map<String, Value>) {
    if let Some(Value::Object(props)) = map.get("properties") {
        let order: Vec<Value> = props.keys().map(|k| Value::String(k.clone())).collect();
        map.insert("propertyOrdering".into(), Value::Array(order));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../../tests/fixtures/abm/seed001_schema_structure.json");

    /// The structural skeleton of a schema: types, properties, required (as a sorted set),
    /// nullability, enums, items and anyOf branches. Descriptions, `propertyOrdering` and
    /// `additionalProperties` are left out (checked separately).
    fn skeleton(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, x) in map {
                    match k.as_str() {
                        "description" if x.is_string() => {}
                        "propertyOrdering" | "additionalProperties" => {}
                        "required" => {
                            let mut r: Vec<String> =
                                x.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect();
                            r.sort();
                            out.insert(k.clone(), json!(r));
                        }
                        _ => {
                            out.insert(k.clone(), skeleton(x));
                        }
                    }
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(skeleton).collect()),
            other => other.clone(),
        }
    }

    /// Reverses the OpenAI strict transformation: `anyOf [X, null]` → X + nullable, and such
    /// properties leave `required`.
    fn from_openai_strict(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut out: Map<String, Value> = map.iter().map(|(k, x)| (k.clone(), from_openai_strict(x))).collect();
                let mut optional = Vec::new();
                if let Some(Value::Object(props)) = out.get_mut("properties") {
                    for (name, prop) in props.iter_mut() {
                        let branches = prop.get("anyOf").and_then(Value::as_array).cloned();
                        if let Some(b) = branches
                            && b.len() == 2
                            && b[1] == json!({"type": "null"})
                        {
                            let mut inner = b[0].as_object().unwrap().clone();
                            if let Some(d) = prop.get("description") {
                                inner.insert("description".into(), d.clone());
                            }
                            inner.insert("nullable".into(), Value::Bool(true));
                            *prop = Value::Object(inner);
                            optional.push(name.clone());
                        }
                    }
                }
                if let Some(Value::Array(req)) = out.get_mut("required") {
                    req.retain(|r| !optional.iter().any(|o| r == o));
                    if req.is_empty() {
                        out.remove("required");
                    }
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(from_openai_strict).collect()),
            other => other.clone(),
        }
    }

    /// Walks two skeletons and lists every path where they differ (a readable failure).
    fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    match (x.get(k), y.get(k)) {
                        (Some(p), Some(q)) => diff(p, q, &format!("{path}/{k}"), out),
                        (Some(_), None) => out.push(format!("{path}/{k}: only in generated")),
                        (None, Some(_)) => out.push(format!("{path}/{k}: only in seed")),
                        (None, None) => {}
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    diff(p, q, &format!("{path}/{i}"), out);
                }
            }
            _ if a == b => {}
            _ => out.push(format!("{path}: generated {a} vs seed {b}")),
        }
    }

    fn assert_matches_seed(generated: &Value, label: &str) {
        let seed: Value = serde_json::from_str(SEED).unwrap();
        let mut out = Vec::new();
        diff(&skeleton(generated), &skeleton(&seed), "", &mut out);
        assert!(out.is_empty(), "{label} differs from seed 001:\n{}", out.join("\n"));
    }

    /// Property names of every object, in order, keyed by JSON pointer.
    fn property_orders(v: &Value, path: &str, out: &mut Vec<(String, Vec<String>)>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::Object(props)) = map.get("properties") {
                    out.push((path.to_owned(), props.keys().cloned().collect()));
                }
                for (k, x) in map {
                    property_orders(x, &format!("{path}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    property_orders(x, &format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn base_schema_matches_seed_field_by_field() {
        assert_matches_seed(&response_schema(), "base schema");
    }

    #[test]
    fn property_order_matches_seed_except_the_documented_pair() {
        let seed: Value = serde_json::from_str(SEED).unwrap();
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        property_orders(&response_schema(), "", &mut ours);
        property_orders(&seed, "", &mut theirs);
        assert_eq!(ours.len(), theirs.len());
        let differing: Vec<&str> =
            ours.iter().zip(&theirs).filter(|(a, b)| a != b).map(|(a, _)| a.0.as_str()).collect();
        // Seed 000 (the format document, and its example) puts maxSteps first; seed 001's zod
        // schema puts terminationRules first. The types follow seed 000.
        assert_eq!(differing, vec!["/properties/model/properties/terminationCriteria"]);
        let root = response_schema();
        assert_eq!(root["propertyOrdering"], json!(["model", "explanation", "title"]));
        assert_eq!(
            root["properties"]["model"]["properties"].as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "codingLanguage",
                "abmLibrary",
                "globalFunctions",
                "globalVariables",
                "environment",
                "agents",
                "terminationCriteria",
                "scheduler",
                "dataAnalytics"
            ]
        );
    }

    #[test]
    fn claude_wrapping_is_a_forced_tool_with_the_seed_schema() {
        let w = wrapped(Provider::Claude);
        assert_eq!(w["tool_choice"], json!({"type": "tool", "name": TOOL_NAME}));
        assert_eq!(w["tools"][0]["name"], TOOL_NAME);
        assert_matches_seed(&w["tools"][0]["input_schema"], "claude input_schema");
    }

    #[test]
    fn gemini_wrapping_orders_every_object() {
        let w = wrapped(Provider::Gemini);
        assert_eq!(w["config"]["responseMimeType"], "application/json");
        let schema = &w["config"]["responseSchema"];
        assert_matches_seed(schema, "gemini responseSchema");
        let mut orders = Vec::new();
        property_orders(schema, "", &mut orders);
        assert!(orders.len() > 20);
        for (path, props) in orders {
            let pointer = format!("{path}/propertyOrdering");
            let ordering = schema.pointer(&pointer).unwrap_or_else(|| panic!("{pointer}"));
            assert_eq!(ordering, &json!(props), "{pointer}");
        }
    }

    #[test]
    fn openai_wrapping_is_strict_and_otherwise_the_seed_structure() {
        let w = wrapped(Provider::OpenAi);
        let rf = &w["response_format"];
        assert_eq!(rf["type"], "json_schema");
        assert_eq!(rf["json_schema"]["name"], SCHEMA_NAME);
        assert_eq!(rf["json_schema"]["strict"], true);
        let schema = &rf["json_schema"]["schema"];
        // Strict mode: every object lists all its properties as required and closes itself.
        let text = schema.to_string();
        assert!(!text.contains("\"nullable\""));
        assert!(!text.contains("propertyOrdering"));
        let mut orders = Vec::new();
        property_orders(schema, "", &mut orders);
        for (path, props) in orders {
            let obj = schema.pointer(&path).unwrap();
            assert_eq!(obj["required"], json!(props), "{path}");
            assert_eq!(obj["additionalProperties"], false, "{path}");
        }
        assert_matches_seed(&from_openai_strict(schema), "openai schema (un-stricted)");
    }

    #[test]
    fn a_changed_type_would_show_up_as_a_difference() {
        // The comparison is not vacuous: knock one enum value out of the generated schema.
        let mut s = response_schema();
        let p = "/properties/model/properties/environment/properties/topology/properties/type/enum";
        s.pointer_mut(p).unwrap().as_array_mut().unwrap().pop();
        let seed: Value = serde_json::from_str(SEED).unwrap();
        let mut out = Vec::new();
        diff(&skeleton(&s), &skeleton(&seed), "", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("topology"));
    }

    #[test]
    fn providers_parse() {
        for p in Provider::ALL {
            assert_eq!(p.as_str().parse::<Provider>().unwrap(), p);
        }
        assert!("mistral".parse::<Provider>().unwrap_err().contains("openai"));
    }
}
