//! The JSON Schema subset that structured output uses across dialects, and the tools on it:
//! [`validate`] (the engine checks what a model returned, whatever the provider promised),
//! [`example`] (the mock's deterministic valid answer), and one adapter per dialect,
//! [`for_dialect`] ([`to_openai_strict`], [`to_gemini`]), used both by the requests the dialects
//! send and by `GET /api/abm/schema`, which shows what is sent.
//!
//! The portable subset: `type` (a name, or `[name, "null"]` for optional values), `properties`,
//! `required`, `additionalProperties: false`, `items`, `enum`, `const`, `minItems`/`maxItems`,
//! `minimum`/`maximum`, `minLength`, `anyOf`, `description` and local `$ref`s into `$defs`.
//! OpenAI's strict mode additionally wants every object to list all its properties in
//! `required` and set `additionalProperties: false`; write schemas that way (optional fields as
//! `["string", "null"]`) and they work in every dialect. Other keywords pass through to the
//! provider but are not checked here.

use serde_json::{Map, Value, json};

use super::config::Dialect;

/// A response schema in the form `dialect` sends it: OpenAI's strict form, Gemini's
/// OpenAPI-style `responseSchema`, and the schema as written for Anthropic (a tool's
/// `input_schema`) and the offline players.
pub(crate) fn for_dialect(dialect: Dialect, schema: &Value) -> Value {
    match dialect {
        Dialect::OpenAi => to_openai_strict(schema),
        Dialect::Gemini => to_gemini(schema),
        Dialect::Anthropic | Dialect::Mock | Dialect::Scripted => schema.clone(),
    }
}

/// OpenAI's strict mode (`json_schema` with `strict: true`): every object lists all its
/// properties in `required` and sets `additionalProperties: false`; an optional property
/// (`nullable: true`, the OpenAPI spelling) becomes `anyOf: [<schema>, {"type": "null"}]`;
/// `nullable` and `propertyOrdering` are dropped. A schema already in the portable subset comes
/// back unchanged in meaning.
pub(crate) fn to_openai_strict(schema: &Value) -> Value {
    let mut v = schema.clone();
    strict_node(&mut v);
    v
}

fn strict_node(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("propertyOrdering");
            for child in map.values_mut() {
                strict_node(child);
            }
            if let Some(Value::Object(props)) = map.get_mut("properties") {
                for prop in props.values_mut() {
                    let nullable =
                        prop.as_object_mut().and_then(|p| p.remove("nullable")).is_some_and(|n| n == Value::Bool(true));
                    if nullable {
                        // Keep the description on the outer schema, where a reader looks.
                        let description = prop.as_object_mut().and_then(|p| p.remove("description"));
                        let inner = std::mem::take(prop);
                        let mut outer = Map::new();
                        if let Some(d) = description {
                            outer.insert("description".into(), d);
                        }
                        outer.insert("anyOf".into(), json!([inner, {"type": "null"}]));
                        *prop = Value::Object(outer);
                    }
                }
                let all: Vec<Value> = props.keys().map(|k| Value::String(k.clone())).collect();
                map.insert("required".into(), Value::Array(all));
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strict_node),
        _ => {}
    }
}

/// A value that does not match its schema (or a schema [`validate`] cannot follow): where, as a
/// JSON path from `$` (`$.orders[1].qty`), and what is wrong there.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{path}: {problem}")]
pub(crate) struct SchemaError {
    path: String,
    problem: Problem,
}

/// What is wrong at a [`SchemaError`]'s path.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub(crate) enum Problem {
    /// The schema's `$ref` leaves the document.
    #[error("only local $refs are supported, not {0:?}")]
    NonLocalRef(String),
    #[error("$ref {0:?} points nowhere")]
    DanglingRef(String),
    /// More than 32 `$ref`s in a row (a cycle, most likely).
    #[error("$ref chain too deep")]
    RefTooDeep,
    /// Every `anyOf`/`oneOf` alternative failed; why each did, in order.
    #[error("matches none of the alternatives ({})", alternatives(.0))]
    NoAlternative(Vec<SchemaError>),
    /// The value's JSON type is not among the schema's `type` names.
    #[error("expected {}, got {got}", .expected.join(" or "))]
    Type { expected: Vec<String>, got: &'static str },
    #[error("must be {0}")]
    NotConst(Value),
    #[error("{value} is not one of {}", one_of(.options))]
    NotInEnum { value: Value, options: Vec<Value> },
    #[error("missing required field {0:?}")]
    MissingField(String),
    /// A field the schema does not list, where `additionalProperties` is false.
    #[error("unexpected field {0:?}")]
    UnexpectedField(String),
    #[error("needs at least {min} items, has {len}")]
    TooFewItems { min: u64, len: u64 },
    #[error("allows at most {max} items, has {len}")]
    TooManyItems { max: u64, len: u64 },
    #[error("{value} is below the minimum {min}")]
    BelowMinimum { value: serde_json::Number, min: f64 },
    #[error("{value} is above the maximum {max}")]
    AboveMaximum { value: serde_json::Number, max: f64 },
    #[error("shorter than {0} characters")]
    TooShort(u64),
}

/// Why each alternative failed, separated by `"; "`.
fn alternatives(errors: &[SchemaError]) -> String {
    errors.iter().map(SchemaError::to_string).collect::<Vec<_>>().join("; ")
}

/// An enum's options as JSON, separated by `", "`.
fn one_of(values: &[Value]) -> String {
    values.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")
}

/// Resolves a local `$ref` (`#/$defs/X` or `#/definitions/X`) against `root`.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> Result<&'a Value, Problem> {
    let mut node = node;
    for _ in 0..32 {
        let Some(r) = node.get("$ref").and_then(Value::as_str) else {
            return Ok(node);
        };
        let path = r.strip_prefix("#/").ok_or_else(|| Problem::NonLocalRef(r.to_string()))?;
        let mut target = root;
        for part in path.split('/') {
            target = target
                .get(part.replace("~1", "/").replace("~0", "~"))
                .ok_or_else(|| Problem::DanglingRef(r.to_string()))?;
        }
        node = target;
    }
    Err(Problem::RefTooDeep)
}

/// The schema's `type` names (`["string"]`, `["integer", "null"]`, or empty when unconstrained).
fn types(node: &Value) -> Vec<&str> {
    match node.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks `value` against `schema`; the error names the JSON path (`$.orders[1].qty`).
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), SchemaError> {
    check(schema, schema, value, "$")
}

fn check(root: &Value, node: &Value, v: &Value, path: &str) -> Result<(), SchemaError> {
    let fail = |problem: Problem| Err(SchemaError { path: path.to_string(), problem });
    let node = match resolve(root, node) {
        Ok(node) => node,
        Err(problem) => return fail(problem),
    };
    // OpenAPI's `nullable: true` (Gemini's form, and sd-ai's): null is allowed besides the type.
    if v.is_null() && node.get("nullable") == Some(&Value::Bool(true)) {
        return Ok(());
    }
    if let Some(alts) = node.get("anyOf").or(node.get("oneOf")).and_then(Value::as_array) {
        let errors: Vec<SchemaError> = alts.iter().filter_map(|a| check(root, a, v, path).err()).collect();
        if errors.len() == alts.len() && !alts.is_empty() {
            return fail(Problem::NoAlternative(errors));
        }
    }
    let ts = types(node);
    if !ts.is_empty() && !ts.iter().any(|t| type_matches(t, v)) {
        return fail(Problem::Type { expected: ts.iter().map(|t| t.to_string()).collect(), got: type_name(v) });
    }
    if let Some(c) = node.get("const")
        && c != v
    {
        return fail(Problem::NotConst(c.clone()));
    }
    if let Some(e) = node.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        return fail(Problem::NotInEnum { value: v.clone(), options: e.clone() });
    }
    match v {
        Value::Object(obj) => {
            let props = node.get("properties").and_then(Value::as_object);
            for req in node.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if !obj.contains_key(req) {
                    return fail(Problem::MissingField(req.to_string()));
                }
            }
            for (k, fv) in obj {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => check(root, ps, fv, &format!("{path}.{k}"))?,
                    None if node.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return fail(Problem::UnexpectedField(k.clone()));
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(min) = node.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                return fail(Problem::TooFewItems { min, len });
            }
            if let Some(max) = node.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                return fail(Problem::TooManyItems { max, len });
            }
            if let Some(is) = node.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(root, is, item, &format!("{path}[{i}]"))?;
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = node.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                return fail(Problem::BelowMinimum { value: n.clone(), min });
            }
            if let Some(max) = node.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                return fail(Problem::AboveMaximum { value: n.clone(), max });
            }
        }
        Value::String(s) => {
            if let Some(min) = node.get("minLength").and_then(Value::as_u64)
                && (s.chars().count() as u64) < min
            {
                return fail(Problem::TooShort(min));
            }
        }
        _ => {}
    }
    Ok(())
}

/// A deterministic value that [`validate`]s against `schema`: the first `const`/`enum` option,
/// else the smallest value of the first non-null type (every property filled, arrays at their
/// `minItems`, numbers at their `minimum` or 0, strings `"mock"` padded to `minLength`).
pub(crate) fn example(schema: &Value) -> Value {
    gen_example(schema, schema, 0)
}

fn gen_example(root: &Value, node: &Value, depth: usize) -> Value {
    if depth > 16 {
        return Value::Null;
    }
    let Ok(node) = resolve(root, node) else {
        return Value::Null;
    };
    if let Some(c) = node.get("const") {
        return c.clone();
    }
    if let Some(first) = node.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = node.get("anyOf").or(node.get("oneOf")).and_then(Value::as_array).and_then(|a| a.first()) {
        return gen_example(root, first, depth + 1);
    }
    let ts = types(node);
    let t = ts.iter().find(|t| **t != "null").or(ts.first()).copied().unwrap_or(if node.get("properties").is_some() {
        "object"
    } else {
        "string"
    });
    match t {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = node.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    out.insert(k.clone(), gen_example(root, ps, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let n = node.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = node.get("items").cloned().unwrap_or(json!({}));
            Value::Array((0..n.min(64)).map(|_| gen_example(root, &item, depth + 1)).collect())
        }
        "integer" => {
            let min = node.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            json!(min.ceil() as i64)
        }
        "number" => {
            let min = node.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            json!(min)
        }
        "boolean" => json!(false),
        "null" => Value::Null,
        _ => {
            let min = node.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            let mut s = String::from("mock");
            while s.chars().count() < min {
                s.push('x');
            }
            json!(s)
        }
    }
}

/// The schema as Gemini's `responseSchema`/function `parameters` accept it: `$ref`s inlined,
/// `["t", "null"]` turned into `type: t, nullable: true`, keywords it rejects dropped
/// (`additionalProperties`, `$defs`, `$schema`, `const` → one-value `enum`), and
/// `propertyOrdering` set to the properties' declared order so the JSON comes back in that order.
pub(crate) fn to_gemini(schema: &Value) -> Value {
    gemini_node(schema, schema, 0)
}

fn gemini_node(root: &Value, node: &Value, depth: usize) -> Value {
    let node = match resolve(root, node) {
        Ok(n) if depth <= 16 => n,
        _ => return json!({}),
    };
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    let mut out = Map::new();
    for (k, v) in obj {
        match k.as_str() {
            "$defs" | "definitions" | "$schema" | "additionalProperties" | "$ref" | "title" => {}
            "type" => {
                let ts = types(node);
                let non_null: Vec<&str> = ts.iter().copied().filter(|t| *t != "null").collect();
                if let Some(t) = non_null.first() {
                    out.insert("type".into(), json!(t));
                }
                if ts.contains(&"null") {
                    out.insert("nullable".into(), json!(true));
                }
            }
            "const" => {
                out.insert("enum".into(), json!([v]));
            }
            "properties" => {
                let props = v.as_object().cloned().unwrap_or_default();
                let order: Vec<&String> = props.keys().collect();
                out.insert("propertyOrdering".into(), json!(order));
                let conv: Map<String, Value> =
                    props.iter().map(|(pk, pv)| (pk.clone(), gemini_node(root, pv, depth + 1))).collect();
                out.insert("properties".into(), Value::Object(conv));
            }
            "items" => {
                out.insert("items".into(), gemini_node(root, v, depth + 1));
            }
            "anyOf" | "oneOf" => {
                let alts: Vec<Value> =
                    v.as_array().into_iter().flatten().map(|a| gemini_node(root, a, depth + 1)).collect();
                out.insert("anyOf".into(), Value::Array(alts));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "side": {"type": "string", "enum": ["buy", "sell"]},
                "qty": {"type": "integer", "minimum": 1},
                "limit": {"type": ["number", "null"]},
                "legs": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/leg"}},
                "note": {"type": "string", "minLength": 6}
            },
            "required": ["side", "qty", "limit", "legs", "note"],
            "additionalProperties": false,
            "$defs": {"leg": {"type": "object", "properties": {"symbol": {"type": "string"}},
                              "required": ["symbol"], "additionalProperties": false}}
        })
    }

    #[test]
    fn the_example_is_valid_and_deterministic() {
        let s = order_schema();
        let e = example(&s);
        assert_eq!(e, json!({"side": "buy", "qty": 1, "limit": 0.0, "legs": [{"symbol": "mock"}], "note": "mockxx"}));
        assert_eq!(validate(&s, &e), Ok(()));
        assert_eq!(example(&s), e);
    }

    #[test]
    fn validation_names_the_path() {
        let s = order_schema();
        let bad = |v: Value| validate(&s, &v).unwrap_err().to_string();
        let ok = json!({"side": "buy", "qty": 1, "limit": null, "legs": [{"symbol": "X"}], "note": "longer"});
        assert_eq!(validate(&s, &ok), Ok(()));
        let mut v = ok.clone();
        v["qty"] = json!("3");
        assert_eq!(bad(v), "$.qty: expected integer, got string");
        let mut v = ok.clone();
        v["qty"] = json!(0);
        assert_eq!(bad(v), "$.qty: 0 is below the minimum 1");
        let mut v = ok.clone();
        v["side"] = json!("hold");
        assert_eq!(bad(v), "$.side: \"hold\" is not one of \"buy\", \"sell\"");
        let mut v = ok.clone();
        v["legs"] = json!([{"symbol": 1}]);
        assert_eq!(bad(v), "$.legs[0].symbol: expected string, got integer");
        let mut v = ok.clone();
        v["extra"] = json!(1);
        assert_eq!(bad(v), "$: unexpected field \"extra\"");
        let mut v = ok.clone();
        v.as_object_mut().unwrap().remove("note");
        assert_eq!(bad(v), "$: missing required field \"note\"");
        assert_eq!(bad(json!([])), "$: expected object, got array");
        let mut v = ok.clone();
        v["legs"] = json!([]);
        let err = validate(&s, &v).unwrap_err();
        assert_eq!(err.path, "$.legs");
        assert_eq!(err.problem, Problem::TooFewItems { min: 1, len: 0 });
        // Every alternative that failed is quoted with its own path.
        let either = json!({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 5}]});
        assert_eq!(
            validate(&either, &json!(2)).unwrap_err().to_string(),
            "$: matches none of the alternatives ($: expected string, got integer; $: 2 is below the minimum 5)"
        );
    }

    #[test]
    fn gemini_schemas_inline_refs_mark_nullables_and_keep_order() {
        let g = to_gemini(&order_schema());
        assert_eq!(
            g,
            json!({
                "type": "object",
                "properties": {
                    "side": {"type": "string", "enum": ["buy", "sell"]},
                    "qty": {"type": "integer", "minimum": 1},
                    "limit": {"type": "number", "nullable": true},
                    "legs": {"type": "array", "minItems": 1, "items": {
                        "type": "object",
                        "properties": {"symbol": {"type": "string"}},
                        "propertyOrdering": ["symbol"],
                        "required": ["symbol"]}},
                    "note": {"type": "string", "minLength": 6}
                },
                "propertyOrdering": ["side", "qty", "limit", "legs", "note"],
                "required": ["side", "qty", "limit", "legs", "note"]
            })
        );
    }

    #[test]
    fn the_strict_form_requires_everything_and_spells_optional_as_any_of_null() {
        let base = json!({
            "type": "object",
            "propertyOrdering": ["name", "note"],
            "properties": {
                "name": {"type": "string"},
                "note": {"type": "string", "nullable": true, "description": "optional"}
            },
            "required": ["name"]
        });
        let strict = to_openai_strict(&base);
        assert_eq!(
            strict,
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "note": {"description": "optional", "anyOf": [{"type": "string"}, {"type": "null"}]}
                },
                "required": ["name", "note"],
                "additionalProperties": false
            })
        );
        // Both forms accept what the other's model may write.
        let answer = json!({"name": "a", "note": null});
        validate(&base, &answer).unwrap();
        validate(&strict, &answer).unwrap();
        assert_eq!(
            for_dialect(Dialect::OpenAi, &order_schema()),
            order_schema(),
            "portable schemas are already strict"
        );
        assert_eq!(for_dialect(Dialect::Anthropic, &base), base);
    }
}
