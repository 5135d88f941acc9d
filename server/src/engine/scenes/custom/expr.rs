//! The expression language of custom scenes: CEL (the `cel` crate), compiled once when the
//! document is read and evaluated against a typed view of the scene's state.
//!
//! CEL has no loops, assignments or I/O; what it can iterate are the lists it is given (the
//! macros `all`, `exists`, `exists_one`, `map`, `filter`). Its cost is bounded here before it
//! is parsed: the text's length, its nesting (the parser recurses once per level, so a deep
//! text could overflow the stack: the depth is counted on the characters, never parsed), and
//! the number of list macros, which with the lists' own bound ([`MAX_LIST_LEN`]) and the
//! agents' ([`crate::scenario::MAX_DOCUMENT_AGENTS`]) bounds the steps of one evaluation.
//!
//! The names an expression may use are [`NAMES`]; one naming anything else is refused when it
//! is compiled, so a misspelt name is a 422 at its path rather than a failure mid-run.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedEntryExpr, IdedExpr};
use cel::extractors::Arguments;
use cel::objects::{Key, Map};
use cel::{Context, Env, ExecutionError, Program};
use serde_json::Value;

/// The most characters of one expression.
pub(crate) const MAX_EXPR_CHARS: usize = 500;
/// The deepest nesting of one expression's text: brackets, `?:` conditionals and prefix
/// operators (counted before parsing).
pub(crate) const MAX_EXPR_DEPTH: usize = 16;
/// The deepest nesting of a parsed expression (`1 + 1 + 1` is three deep). Evaluation recurses
/// once per level; 20 levels run within 1 MiB of stack in a debug build.
pub(crate) const MAX_TREE_DEPTH: usize = 20;
/// The stack of the thread a document's expressions are parsed on: the parser takes far more
/// stack per level than evaluation (about 150 KiB in a debug build), more than a runtime
/// worker thread has.
pub(crate) const PARSE_STACK: usize = 64 << 20;
/// The most list macros (`all`, `exists`, `exists_one`, `map`, `filter`) in one expression.
pub(crate) const MAX_MACROS: usize = 2;
/// The most items of a list value (a variable, or what an expression computes to store).
pub(crate) const MAX_LIST_LEN: usize = 200;
/// The most characters of a string value.
pub(crate) const MAX_STRING_CHARS: usize = 10_000;

/// The names an expression may use: the state's parts, and `params` in an action's
/// `require`, effects and `say` texts.
pub(crate) const NAMES: [&str; 9] = ["vars", "me", "agents", "agent", "phase", "round", "turn", "tallies", "params"];

const MACROS: [&str; 5] = [".all(", ".exists(", ".exists_one(", ".map(", ".filter("];

/// Why an expression was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExprError {
    #[error("{0} characters; an expression may have at most {MAX_EXPR_CHARS}")]
    TooLong(usize),
    #[error("nested {0} deep; at most {MAX_EXPR_DEPTH} levels of brackets, conditionals and prefix operators")]
    TooDeep(usize),
    #[error("{0} list macros (all, exists, exists_one, map, filter); at most {MAX_MACROS}")]
    TooManyMacros(usize),
    #[error("nested {0} deep once parsed; at most {MAX_TREE_DEPTH} (split long chains of operators)")]
    TreeTooDeep(usize),
    #[error("does not parse: {0}")]
    Parse(String),
    #[error("uses '{0}', which is not a name of the state (names: {names})", names = NAMES.join(", "))]
    UnknownName(String),
    #[error("'{text}' failed: {message}")]
    Eval { text: String, message: String },
    #[error("'{text}' gives {got}, expected {want}")]
    Type { text: String, got: String, want: &'static str },
}

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// The deepest nesting of `text`, counted on its characters outside string literals.
fn depth(text: &str) -> usize {
    let (mut open, mut max, mut conditionals, mut prefix_run, mut max_prefix) = (0usize, 0, 0, 0, 0);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut after_operand = false;
    for c in text.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
                after_operand = true;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                open += 1;
                max = max.max(open);
            }
            ')' | ']' | '}' => open = open.saturating_sub(1),
            '?' => conditionals += 1,
            _ => {}
        }
        if c.is_whitespace() {
            continue;
        }
        if (c == '!' || c == '-') && !after_operand {
            prefix_run += 1;
            max_prefix = max_prefix.max(prefix_run);
        } else {
            prefix_run = 0;
        }
        after_operand = c.is_alphanumeric() || matches!(c, '_' | ')' | ']' | '}' | '.');
    }
    max + conditionals + max_prefix
}

/// How deep a parsed expression nests.
fn tree_depth(e: &IdedExpr) -> usize {
    let deepest = |es: &mut dyn Iterator<Item = &IdedExpr>| es.map(tree_depth).max().unwrap_or(0);
    1 + match &e.expr {
        Expr::Call(c) => deepest(&mut c.target.iter().map(|t| &**t).chain(c.args.iter())),
        Expr::Comprehension(c) => {
            deepest(&mut [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result].into_iter())
        }
        Expr::List(l) => deepest(&mut l.elements.iter()),
        Expr::Map(m) => deepest(&mut m.entries.iter().flat_map(entry)),
        Expr::Struct(s) => deepest(&mut s.entries.iter().flat_map(entry)),
        Expr::Select(s) => tree_depth(&s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

/// The first name `e` uses that is neither one of [`NAMES`] nor bound by an enclosing macro
/// (`a` in `agents.map(a, a.name)`).
fn free_name(e: &IdedExpr, bound: &mut Vec<String>) -> Option<String> {
    let first = |es: &mut dyn Iterator<Item = &IdedExpr>, bound: &mut Vec<String>| {
        for e in es {
            if let Some(n) = free_name(e, bound) {
                return Some(n);
            }
        }
        None
    };
    match &e.expr {
        Expr::Ident(name) => (!NAMES.contains(&name.as_str()) && !bound.contains(name)).then(|| name.clone()),
        Expr::Call(c) => first(&mut c.target.iter().map(|t| &**t).chain(c.args.iter()), bound),
        Expr::Comprehension(c) => {
            if let Some(n) = first(&mut [&c.iter_range, &c.accu_init].into_iter(), bound) {
                return Some(n);
            }
            let before = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            let found = first(&mut [&c.loop_cond, &c.loop_step, &c.result].into_iter(), bound);
            bound.truncate(before);
            found
        }
        Expr::List(l) => first(&mut l.elements.iter(), bound),
        Expr::Map(m) => first(&mut m.entries.iter().flat_map(entry), bound),
        Expr::Struct(s) => first(&mut s.entries.iter().flat_map(entry), bound),
        Expr::Select(s) => free_name(&s.operand, bound),
        Expr::Literal(_) | Expr::Unspecified => None,
    }
}

fn entry(e: &IdedEntryExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        EntryExpr::StructField(f) => vec![&f.value],
    }
}

/// Checks `text` against the bounds, then parses it and checks its depth and the names it
/// uses. Call it on a thread with [`PARSE_STACK`].
pub(crate) fn compile(text: &str) -> Result<Program, ExprError> {
    let chars = text.chars().count();
    if chars > MAX_EXPR_CHARS {
        return Err(ExprError::TooLong(chars));
    }
    let d = depth(text);
    if d > MAX_EXPR_DEPTH {
        return Err(ExprError::TooDeep(d));
    }
    let macros: usize = MACROS.iter().map(|m| text.matches(m).count()).sum();
    if macros > MAX_MACROS {
        return Err(ExprError::TooManyMacros(macros));
    }
    let program = ENV.compile(text).map_err(|e| ExprError::Parse(one_line(&e.to_string())))?;
    let d = tree_depth(program.expression());
    if d > MAX_TREE_DEPTH {
        return Err(ExprError::TreeTooDeep(d));
    }
    let mut bound = Vec::new();
    if let Some(unknown) = free_name(program.expression(), &mut bound) {
        return Err(ExprError::UnknownName(unknown));
    }
    Ok(program)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every expression of a document, compiled, by its text.
#[derive(Default)]
pub(crate) struct Programs(HashMap<String, Program>);

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Programs({})", self.0.len())
    }
}

impl Programs {
    /// Compiles `text` unless it already is.
    pub(crate) fn add(&mut self, text: &str) -> Result<(), ExprError> {
        if !self.0.contains_key(text) {
            self.0.insert(text.to_string(), compile(text)?);
        }
        Ok(())
    }
}

/// A view of the state to evaluate expressions in (the names of [`NAMES`]).
pub(crate) struct Scope<'a> {
    ctx: Context<'static, 'static>,
    programs: &'a Programs,
}

impl<'a> Scope<'a> {
    /// A scope binding each `(name, value)`.
    pub(crate) fn new(programs: &'a Programs, bindings: Vec<(&'static str, Value)>) -> Scope<'a> {
        let mut ctx = Context::with_env(ENV.clone());
        for (name, value) in bindings {
            ctx.add_variable_from_value(name, to_cel(&value));
        }
        ctx.add_function("sum", sum).expect("sum is not a standard function");
        Scope { ctx, programs }
    }

    /// Binds `name` (the action's `params`) in this scope.
    pub(crate) fn bind(&mut self, name: &'static str, value: &Value) {
        self.ctx.add_variable_from_value(name, to_cel(value));
    }

    /// Evaluates `text` (compiled when the document was read) to JSON.
    pub(crate) fn eval(&self, text: &str) -> Result<Value, ExprError> {
        let eval_err = |message: String| ExprError::Eval { text: text.to_string(), message };
        let program = self.programs.0.get(text).ok_or_else(|| eval_err("not compiled with the document".into()))?;
        let value = program.execute(&self.ctx).map_err(|e| eval_err(e.to_string()))?;
        from_cel(&value).map_err(|e| eval_err(e.0))
    }

    pub(crate) fn bool(&self, text: &str) -> Result<bool, ExprError> {
        match self.eval(text)? {
            Value::Bool(b) => Ok(b),
            other => Err(type_error(text, &other, "a boolean")),
        }
    }

    pub(crate) fn string(&self, text: &str) -> Result<String, ExprError> {
        match self.eval(text)? {
            Value::String(s) => Ok(s),
            other => Err(type_error(text, &other, "a string")),
        }
    }
}

pub(crate) fn type_error(text: &str, got: &Value, want: &'static str) -> ExprError {
    let mut got = got.to_string();
    if got.len() > 80 {
        got.truncate(got.floor_char_boundary(77));
        got.push_str("...");
    }
    ExprError::Type { text: text.to_string(), got, want }
}

/// `sum(list)`: the sum of a list of numbers (ints stay ints; any double makes a double).
fn sum(Arguments(args): Arguments) -> Result<cel::Value, ExecutionError> {
    let [cel::Value::List(items)] = args.as_slice() else {
        return Err(ExecutionError::function_error("sum", "takes one list"));
    };
    let (mut int, mut float, mut any_float) = (0i64, 0f64, false);
    for v in items.iter() {
        match v {
            cel::Value::Int(i) => {
                int = int.checked_add(*i).ok_or_else(|| ExecutionError::function_error("sum", "overflow"))?;
            }
            cel::Value::UInt(u) => {
                int = i64::try_from(*u)
                    .ok()
                    .and_then(|u| int.checked_add(u))
                    .ok_or_else(|| ExecutionError::function_error("sum", "overflow"))?;
            }
            cel::Value::Float(f) => {
                float += f;
                any_float = true;
            }
            _ => return Err(ExecutionError::function_error("sum", "a list of numbers")),
        }
    }
    Ok(if any_float { cel::Value::Float(float + int as f64) } else { cel::Value::Int(int) })
}

/// JSON as CEL: integers as `int`, other numbers as `double`, objects as maps.
pub(crate) fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<Key, cel::Value> =
                m.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A CEL value with no JSON form (bytes, a function, a number that is not finite).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NoJson(String);

/// A CEL value as JSON; what has no JSON form is an error.
pub(crate) fn from_cel(v: &cel::Value) -> Result<Value, NoJson> {
    Ok(match v {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| NoJson(format!("the number {f} has no value")))?,
        cel::Value::String(s) => Value::String(s.to_string()),
        cel::Value::List(items) => Value::Array(items.iter().map(from_cel).collect::<Result<_, _>>()?),
        cel::Value::Map(m) => {
            let mut entries: Vec<(String, Value)> = Vec::with_capacity(m.map.len());
            for (k, v) in m.map.iter() {
                let key = match k {
                    Key::String(s) => s.to_string(),
                    Key::Int(i) => i.to_string(),
                    Key::Uint(u) => u.to_string(),
                    Key::Bool(b) => b.to_string(),
                };
                entries.push((key, from_cel(v)?));
            }
            // A CEL map has no order; JSON written from it is sorted so a log never depends on
            // a hash.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        other => return Err(NoJson(format!("a {:?} has no JSON form", other.type_of()))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Compiles on a thread with the parser's stack, as documents are.
    fn programs(texts: &[String]) -> Result<Programs, ExprError> {
        let texts = texts.to_vec();
        std::thread::Builder::new()
            .stack_size(PARSE_STACK)
            .spawn(move || {
                let mut p = Programs::default();
                for t in &texts {
                    p.add(t)?;
                }
                Ok(p)
            })
            .unwrap()
            .join()
            .unwrap()
    }

    fn compile(text: &str) -> Result<(), ExprError> {
        programs(&[text.to_string()]).map(|_| ())
    }

    fn eval(text: &str, bindings: Vec<(&'static str, Value)>) -> Result<Value, ExprError> {
        let p = programs(&[text.to_string()])?;
        Scope::new(&p, bindings).eval(text)
    }

    #[test]
    fn evaluates_against_the_state() {
        let vars = json!({"pot": 12, "rate": 1.5, "names": ["a", "b"]});
        assert_eq!(eval("vars.pot * 2 + 1", vec![("vars", vars.clone())]), Ok(json!(25)));
        assert_eq!(eval("vars.rate * 2.0", vec![("vars", vars.clone())]), Ok(json!(3.0)));
        assert_eq!(eval("size(vars.names) == 2 && 'a' in vars.names", vec![("vars", vars.clone())]), Ok(json!(true)));
        assert_eq!(eval("sum([1, 2, 3])", vec![]), Ok(json!(6)));
        assert_eq!(eval("sum([1, 2.5])", vec![]), Ok(json!(3.5)));
        assert_eq!(
            eval(
                "agents.filter(a, a.role == 'juror').map(a, a.name)",
                vec![("agents", json!([{"name": "A", "role": "juror"}, {"name": "B", "role": "judge"}]))]
            ),
            Ok(json!(["A"]))
        );
    }

    #[test]
    fn refuses_before_parsing_what_is_too_big() {
        assert_eq!(compile(&"1+".repeat(300)).unwrap_err(), ExprError::TooLong(600));
        let deep = format!("{}1{}", "(".repeat(40), ")".repeat(40));
        assert_eq!(compile(&deep).unwrap_err(), ExprError::TooDeep(40));
        assert_eq!(compile(&"!".repeat(30)).unwrap_err(), ExprError::TooDeep(30));
        assert!(matches!(compile(&"true ? 1 : ".repeat(30)), Err(ExprError::TooLong(_) | ExprError::TooDeep(_))));
        let looping = "agents.map(a, agents.map(b, agents.map(c, 1)))";
        assert_eq!(compile(looping).unwrap_err(), ExprError::TooManyMacros(3));
        assert!(matches!(compile("vars.x +"), Err(ExprError::Parse(_))));
        assert_eq!(compile("secret.key == 1").unwrap_err(), ExprError::UnknownName("secret".into()));
        // A string literal's brackets are not nesting.
        assert!(compile(&format!("'{}' == phase", "(".repeat(100))).is_ok());
    }

    /// The longest and deepest texts the bounds let through parse (on the parser's thread) and
    /// evaluate on a thread with 1 MiB of stack (the runtime's worker threads have 2 MiB).
    #[test]
    fn the_worst_text_allowed_runs_on_a_small_stack() {
        let worst = [
            format!("{}1{}", "(".repeat(MAX_EXPR_DEPTH), ")".repeat(MAX_EXPR_DEPTH)),
            format!("{}1{}", "[".repeat(MAX_EXPR_DEPTH), "]".repeat(MAX_EXPR_DEPTH)),
            "1 + ".repeat(MAX_EXPR_CHARS / 4 - 1) + "1",
            "1 + ".repeat(MAX_TREE_DEPTH - 1) + "1",
            "vars".to_string() + &".a".repeat((MAX_EXPR_CHARS - 4) / 2),
            "vars".to_string() + &".a".repeat(MAX_TREE_DEPTH - 1),
            "true && ".repeat(MAX_EXPR_CHARS / 8 - 1) + "true",
            format!("{}true", "!".repeat(MAX_EXPR_DEPTH)),
            "true ? 1 : ".repeat(MAX_EXPR_DEPTH) + "1",
        ];
        let mut allowed = 0;
        for text in worst {
            let Ok(p) = programs(std::slice::from_ref(&text)) else {
                continue;
            };
            allowed += 1;
            std::thread::Builder::new()
                .stack_size(1 << 20)
                .spawn(move || {
                    let _ = Scope::new(&p, vec![("vars", json!({}))]).eval(&text);
                })
                .unwrap()
                .join()
                .unwrap();
        }
        assert!(allowed >= 4, "{allowed}");
        assert_eq!(compile(&("1 + ".repeat(30) + "1")), Err(ExprError::TreeTooDeep(31)));
    }
}
