//! The New page's documents, the pure part (tested natively): the scenario a user writes there
//! is one JSON value, and the form and the JSON view are two views of it. The form reads and
//! writes single places of it by JSON pointer ([`text_at`], [`set_at`]), so fields the form does
//! not show (an agent's `properties`, a village's map) survive every form edit.
//!
//! Beside that: the starting documents of each kind, which kind a document is, the server's
//! refusals read for their place (a CSV's `line N`, a document's JSON path), the line of the
//! pretty-printed document where a JSON path starts (so the JSON view can mark a validator's
//! finding), and the preview of a CSV before it is uploaded (its first rows and each ticker's
//! closes).

use serde::Deserialize;
use serde_json::{Map, Value, json};
use simtree_shared::{ActionKind, SceneKind, SimKind};

/// The scene types a new social scenario is offered (`scene.type`), as the server reads them.
pub fn scene_types() -> impl Iterator<Item = &'static str> {
    SceneKind::OFFERED.into_iter().map(SceneKind::name)
}

/// The orderings (`ordering.kind`): who acts next.
pub const ORDERINGS: [&str; 6] = ["sequential", "asynchronous", "cycled", "random", "controlled", "llm_moderated"];

/// The actions an agent of scene type `scene` may hold (the server refuses any other), in the
/// server's order: the common ones, then the type's own. Every action for a type the server
/// does not know (its refusal then names `scene.type`).
pub fn actions_of(scene: &str) -> Vec<&'static str> {
    match SceneKind::from_name(scene) {
        Some(k) => k.catalogue().map(ActionKind::name).collect(),
        None => ActionKind::ALL.iter().map(|a| a.name()).collect(),
    }
}

/// A new social scenario: a two-agent chat, ready to create as it is.
pub fn social_template() -> Value {
    json!({
        "title": "My scene",
        "description": "",
        "scene": {"type": "simple_chat", "name": "my_scene", "initial_event": "The conversation begins."},
        "agents": [agent_template("Alice"), agent_template("Bob")],
        "ordering": {"kind": "sequential"},
        "max_steps_per_turn": 3,
        "default_turns": 20,
        "broadcasts": []
    })
}

fn agent_template(name: &str) -> Value {
    json!({
        "name": name,
        "user_profile": "",
        "style": "friendly",
        "action_space": ["send_message", "yield"]
    })
}

/// A new trading scenario on the shipped data: buy and hold, two tickers, half a year.
pub fn trading_template() -> Value {
    json!({
        "title": "My trading episode",
        "description": "",
        "default_turns": 20,
        "episode": {
            "episode_id": "my-episode",
            "agent_id": "buy_and_hold",
            "tickers": ["AAPL", "MSFT"],
            "initial_cash": 100000.0,
            "start_date": "2012-06-01",
            "end_date": "2012-12-31",
            "agent": {"kind": "buy_and_hold"}
        }
    })
}

/// What a document is: a trading scenario names an `episode`, a social one a `scene`, and an
/// abm-quant document is an envelope (`success`), `{model, …}` or a bare model.
pub fn kind_of(doc: &Value) -> Option<SimKind> {
    let o = doc.as_object()?;
    if o.contains_key("episode") {
        Some(SimKind::Trading)
    } else if o.contains_key("scene") || (o.contains_key("agents") && !o.contains_key("codingLanguage")) {
        Some(SimKind::Social)
    } else if ["success", "model", "codingLanguage"].iter().any(|k| o.contains_key(*k)) {
        Some(SimKind::Abm)
    } else {
        None
    }
}

/// A document's title: `title`, or an abm-quant envelope's `supportingInfo.title`.
pub fn title_of(doc: &Value) -> String {
    [doc.pointer("/title"), doc.pointer("/supportingInfo/title")]
        .into_iter()
        .flatten()
        .find_map(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

// ---- Reading and writing one place of the document ----

/// The value at `ptr` as a form shows it: a string as it is, a number or boolean in JSON, nothing
/// for a missing value or null.
pub fn text_at(doc: &Value, ptr: &str) -> String {
    match doc.pointer(ptr) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// Sets the value at `ptr`, making the objects on the way; `None` removes it. An array index
/// past the end (or a step through a scalar) changes nothing.
pub fn set_at(doc: &mut Value, ptr: &str, value: Option<Value>) {
    let Some((parent, last)) = ptr.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    let Some(holder) = walk_making(doc, parent) else {
        return;
    };
    match (holder, value) {
        (Value::Object(o), Some(v)) => {
            o.insert(last, v);
        }
        (Value::Object(o), None) => {
            o.shift_remove(&last);
        }
        (Value::Array(a), Some(v)) => {
            if let Some(slot) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                *slot = v;
            }
        }
        (Value::Array(a), None) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a.remove(i);
            }
        }
        _ => {}
    }
}

/// The value at `ptr`, with missing (or null) objects on the way made empty.
fn walk_making<'a>(doc: &'a mut Value, ptr: &str) -> Option<&'a mut Value> {
    let mut at = doc;
    for raw in ptr.split('/').skip(1) {
        let key = raw.replace("~1", "/").replace("~0", "~");
        if at.is_null() {
            *at = Value::Object(Map::new());
        }
        at = match at {
            Value::Object(o) => o.entry(key).or_insert(Value::Null),
            Value::Array(a) => a.get_mut(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    if at.is_null() {
        *at = Value::Object(Map::new());
    }
    Some(at)
}

/// What a text field puts in the document: the text, or nothing when it is empty.
pub fn text_value(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| Value::String(text.to_string()))
}

/// What a number field puts in the document: the number, nothing when it is empty, and the
/// text itself when it is no number (the server's refusal then names the field).
pub fn number_value(text: &str) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    Some(if let Ok(n) = t.parse::<u64>() {
        json!(n)
    } else if let Some(n) = t.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        Value::Number(n)
    } else {
        Value::String(t.to_string())
    })
}

/// A list of strings, one a line (initial events), as a text area shows it.
pub fn lines_of(doc: &Value, ptr: &str) -> String {
    strings_at(doc, ptr).join("\n")
}

/// A list of names, comma-separated, as a text field shows it.
pub fn names_of(doc: &Value, ptr: &str) -> String {
    strings_at(doc, ptr).join(", ")
}

fn strings_at(doc: &Value, ptr: &str) -> Vec<String> {
    doc.pointer(ptr)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect())
        .unwrap_or_default()
}

/// The non-empty lines of a text area as a list.
pub fn lines_value(text: &str) -> Value {
    list_value(text.lines())
}

/// The non-empty comma-separated names of a text field as a list.
pub fn names_value(text: &str) -> Value {
    list_value(text.split(','))
}

/// The parts of a text, trimmed, as a list of strings (empty parts left out).
fn list_value<'a>(parts: impl Iterator<Item = &'a str>) -> Value {
    parts.map(str::trim).filter(|l| !l.is_empty()).map(|l| Value::String(l.into())).collect()
}

/// A werewolf `role_map` as lines of `name: role`.
pub fn roles_of(doc: &Value) -> String {
    doc.pointer("/scene/config/role_map")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter().map(|(k, v)| format!("{k}: {}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join("\n")
        })
        .unwrap_or_default()
}

/// Lines of `name: role` as a werewolf `role_map` (lines without a colon are left out).
pub fn roles_value(text: &str) -> Value {
    let map: Map<String, Value> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), Value::String(v.trim().to_string())))
        .filter(|(k, _)| !k.is_empty())
        .collect();
    Value::Object(map)
}

// ---- Agents, actions, ordering ----

pub fn agent_count(doc: &Value) -> usize {
    doc.pointer("/agents").and_then(Value::as_array).map_or(0, Vec::len)
}

/// The agents' names, in order.
pub fn agent_names(doc: &Value) -> Vec<String> {
    (0..agent_count(doc)).map(|i| text_at(doc, &format!("/agents/{i}/name"))).collect()
}

/// Appends an agent with a name no other agent has.
pub fn add_agent(doc: &mut Value) {
    let names = agent_names(doc);
    let name = (names.len() + 1..).map(|n| format!("Agent {n}")).find(|n| !names.contains(n)).unwrap_or_default();
    if !doc.pointer("/agents").is_some_and(Value::is_array) {
        set_at(doc, "/agents", Some(json!([])));
    }
    let mut agent = agent_template(&name);
    // An agent of a custom scene holds a role of the scene and, of the registry, only `yield`.
    if text_at(doc, "/scene/type") == SceneKind::Custom.name() {
        agent["action_space"] = json!(["yield"]);
        let role = crate::scene_form::role_names(doc).into_iter().next().unwrap_or_default();
        agent["properties"] = json!({ "role": role });
    }
    if let Some(a) = doc.pointer_mut("/agents").and_then(Value::as_array_mut) {
        a.push(agent);
    }
}

pub fn has_action(doc: &Value, agent: usize, action: &str) -> bool {
    doc.pointer(&format!("/agents/{agent}/action_space"))
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == action))
}

/// Adds `action` to the agent's action space, or takes it out.
pub fn toggle_action(doc: &mut Value, agent: usize, action: &str) {
    let ptr = format!("/agents/{agent}/action_space");
    if doc.pointer(&format!("/agents/{agent}")).is_none() {
        return;
    }
    if !doc.pointer(&ptr).is_some_and(Value::is_array) {
        set_at(doc, &ptr, Some(json!([])));
    }
    if let Some(a) = doc.pointer_mut(&ptr).and_then(Value::as_array_mut) {
        match a.iter().position(|v| v == action) {
            Some(i) => {
                a.remove(i);
            }
            None => a.push(Value::String(action.into())),
        }
    }
}

/// Switches the ordering's kind, keeping what the new kind also reads (`names`, `moderator`)
/// and dropping the rest (the server refuses a field the kind does not know).
pub fn set_ordering(doc: &mut Value, kind: &str) {
    let old = doc.pointer("/ordering").cloned().unwrap_or(Value::Null);
    let mut o = Map::new();
    o.insert("kind".into(), Value::String(kind.into()));
    let keep: &[&str] = match kind {
        "sequential" | "asynchronous" | "cycled" => &["names"],
        "llm_moderated" => &["moderator", "names"],
        _ => &[],
    };
    for k in keep {
        if let Some(v) = old.get(*k) {
            o.insert((*k).into(), v.clone());
        }
    }
    if kind == "cycled" && !o.contains_key("names") {
        o.insert("names".into(), json!(agent_names(doc)));
    }
    if kind == "llm_moderated" && !o.contains_key("moderator") {
        let first = agent_names(doc).into_iter().next().unwrap_or_default();
        o.insert("moderator".into(), Value::String(first));
    }
    set_at(doc, "/ordering", Some(Value::Object(o)));
}

/// Switches the scene type: its settings go, and so does every action (in an agent's action
/// space or in the scene's prose) the new type does not offer. A custom scene starts from
/// [`crate::scene_form::template`], each agent in its first role.
pub fn set_scene_type(doc: &mut Value, kind: &str) {
    if text_at(doc, "/scene/type") == kind {
        return;
    }
    set_at(doc, "/scene/type", Some(Value::String(kind.into())));
    set_at(doc, "/scene/config", None);
    let offered = actions_of(kind);
    let keep = |v: &Value| v.as_str().is_some_and(|a| offered.contains(&a));
    for i in 0..agent_count(doc) {
        if let Some(a) = doc.pointer_mut(&format!("/agents/{i}/action_space")).and_then(Value::as_array_mut) {
            a.retain(keep);
        }
    }
    if let Some(p) = doc.pointer_mut("/scene/prose/actions").and_then(Value::as_object_mut) {
        p.retain(|name, _| offered.contains(&name.as_str()));
    }
    if kind == SceneKind::Custom.name() {
        crate::scene_form::make_custom(doc);
    }
}

// ---- Trading ----

/// The episode's tickers.
pub fn tickers_of(doc: &Value) -> Vec<String> {
    strings_at(doc, "/episode/tickers")
}

/// Adds `ticker` to the episode or takes it out.
pub fn toggle_ticker(doc: &mut Value, ticker: &str) {
    let mut t = tickers_of(doc);
    match t.iter().position(|x| x == ticker) {
        Some(i) => {
            t.remove(i);
        }
        None => t.push(ticker.into()),
    }
    set_at(doc, "/episode/tickers", Some(json!(t)));
}

/// Picks the agent kind: its default parameters, and the same `agent_id`.
pub fn set_trading_agent(doc: &mut Value, kind: &str) {
    set_at(doc, "/episode/agent", Some(json!({"kind": kind})));
    set_at(doc, "/episode/agent_id", Some(Value::String(kind.into())));
}

/// Trades on `dataset` (the shipped data is no dataset at all): keeps the tickers it has and
/// puts the window inside its dates.
pub fn set_dataset(doc: &mut Value, dataset: Option<&str>, tickers: &[String], first: &str, last: &str) {
    set_at(doc, "/episode/dataset", dataset.map(|d| Value::String(d.into())));
    let mut kept: Vec<String> = tickers_of(doc).into_iter().filter(|t| tickers.contains(t)).collect();
    if kept.is_empty() {
        kept = tickers.iter().take(2).cloned().collect();
    }
    set_at(doc, "/episode/tickers", Some(json!(kept)));
    let inside = |d: &str| !d.is_empty() && d >= first && d <= last;
    if !inside(&text_at(doc, "/episode/start_date")) {
        set_at(doc, "/episode/start_date", text_value(first));
    }
    if !inside(&text_at(doc, "/episode/end_date")) {
        set_at(doc, "/episode/end_date", text_value(last));
    }
}

// ---- The server's refusals, read for their place ----

/// The line a CSV refusal names (`line 8: high 41.2 below low 41.5`).
pub fn refusal_line(detail: &str) -> Option<usize> {
    let rest = &detail[detail.find("line ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|_| rest[digits.len()..].starts_with(':'))
}

pub use simtree_shared::refusal_path;

/// A JSON path (`agents[2].name`) as a JSON pointer (`/agents/2/name`), to find the form field
/// that shows that place.
pub fn path_pointer(path: &str) -> String {
    path_steps(path)
        .unwrap_or_default()
        .into_iter()
        .map(|s| match s {
            Ok(key) => format!("/{}", key.replace('~', "~0").replace('/', "~1")),
            Err(i) => format!("/{i}"),
        })
        .collect()
}

/// Whether the place `bad` (a JSON pointer) is the field at `ptr` or inside it.
pub fn within(bad: &str, ptr: &str) -> bool {
    bad == ptr || bad.strip_prefix(ptr).is_some_and(|rest| rest.starts_with('/'))
}

/// One finding of `POST /api/abm/validate`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Issue {
    pub severity: String,
    #[serde(default)]
    pub code: String,
    pub path: String,
    pub message: String,
}

/// The reply of `POST /api/abm/validate`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Validation {
    pub ok: bool,
    #[serde(default)]
    pub issues: Vec<Issue>,
}

/// The document as the JSON view shows it.
pub fn pretty(doc: &Value) -> String {
    serde_json::to_string_pretty(doc).unwrap_or_default()
}

/// A JSON path's steps: `a.b[2].c` is `a`, `b`, 2, `c`.
fn path_steps(path: &str) -> Option<Vec<Result<String, usize>>> {
    let mut steps = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut idx) = part.split_once('[').map_or((part, ""), |(k, i)| (k, i));
        if !key.is_empty() {
            steps.push(Ok(key.to_string()));
        }
        while !idx.is_empty() {
            let (n, more) = idx.split_once(']')?;
            steps.push(Err(n.parse().ok()?));
            idx = more.strip_prefix('[').unwrap_or(more);
        }
    }
    Some(steps)
}

/// How many lines `v` takes in [`pretty`]'s form.
fn line_count(v: &Value) -> usize {
    match v {
        Value::Array(a) if !a.is_empty() => 2 + a.iter().map(line_count).sum::<usize>(),
        Value::Object(o) if !o.is_empty() => 2 + o.values().map(line_count).sum::<usize>(),
        _ => 1,
    }
}

/// The line (1-based) of [`pretty`]`(doc)` where the value at `path` starts; for a path that
/// goes past what the document has, the line of the deepest part that is there.
pub fn line_of_path(doc: &Value, path: &str) -> usize {
    let mut line = 1;
    let mut at = doc;
    for step in path_steps(path).unwrap_or_default() {
        let children: Vec<&Value> = match at {
            Value::Object(o) => o.values().collect(),
            Value::Array(a) => a.iter().collect(),
            _ => break,
        };
        let found = match (&step, at) {
            (Ok(k), Value::Object(o)) => o.keys().position(|name| name == k),
            (Err(i), Value::Array(a)) => (*i < a.len()).then_some(*i),
            _ => None,
        };
        let Some(i) = found else { break };
        line += 1 + children[..i].iter().map(|c| line_count(c)).sum::<usize>();
        at = children[i];
    }
    line
}

/// The character offsets `[start, end)` of line `line` (1-based) of `text`, to select it.
pub fn line_span(text: &str, line: usize) -> (usize, usize) {
    let mut start = 0;
    for (i, l) in text.split('\n').enumerate() {
        let len = l.chars().count();
        if i + 1 == line {
            return (start, start + len);
        }
        start += len + 1;
    }
    (start, start)
}

// ---- A CSV before it is uploaded ----

/// The first rows of a CSV (each with its line number) and each ticker's closes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsvPreview {
    pub header: Vec<String>,
    pub rows: Vec<(usize, Vec<String>)>,
    /// Data lines in the file.
    pub total: usize,
    /// `(ticker, dates, closes)` for every ticker, in the order they first appear.
    pub closes: Vec<(String, Vec<String>, Vec<f64>)>,
}

/// Reads the file the way the server's format says (`date,ticker,open,high,low,close,volume…`)
/// for a look before uploading: a cell that is no number is left out of the closes, and judging
/// the file is the server's work.
pub fn csv_preview(text: &str, first_rows: usize) -> CsvPreview {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, head)) = lines.next() else {
        return CsvPreview::default();
    };
    let header: Vec<String> = head.split(',').map(|s| s.trim().to_string()).collect();
    let col = |name: &str| header.iter().position(|h| h == name);
    let (date, ticker, close) = (col("date"), col("ticker"), col("close"));
    let mut p = CsvPreview { header: header.clone(), ..CsvPreview::default() };
    for (i, line) in lines {
        let cells: Vec<String> = line.split(',').map(|s| s.trim().to_string()).collect();
        p.total += 1;
        if let (Some(d), Some(t), Some(c)) = (date, ticker, close)
            && let (Some(d), Some(t), Some(c)) = (cells.get(d), cells.get(t), cells.get(c))
            && let Ok(c) = c.parse::<f64>()
        {
            let slot = match p.closes.iter().position(|(name, ..)| name == t) {
                Some(s) => s,
                None => {
                    p.closes.push((t.clone(), Vec::new(), Vec::new()));
                    p.closes.len() - 1
                }
            };
            p.closes[slot].1.push(d.clone());
            p.closes[slot].2.push(c);
        }
        if p.rows.len() < first_rows {
            p.rows.push((i + 1, cells));
        }
    }
    p
}

/// Line `line` (1-based) of `text`, to show next to a refusal that names it.
pub fn text_line(text: &str, line: usize) -> Option<&str> {
    text.lines().nth(line.checked_sub(1)?)
}

/// A dataset name made from a file name: its stem with every other character turned into `_`
/// (the server takes 1 to 64 of letters, digits, `_` and `-`, starting with a letter or digit).
pub fn dataset_name(file: &str) -> String {
    let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(64)
        .collect();
    if name.is_empty() { "my_data".into() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_writes_one_place_and_keeps_the_rest() {
        let mut d = social_template();
        set_at(&mut d, "/agents/0/properties", Some(json!({"mood": "calm"})));
        set_at(&mut d, "/agents/0/name", text_value("Ann"));
        set_at(&mut d, "/scene/config/num_decks", number_value("2"));
        assert_eq!(text_at(&d, "/agents/0/name"), "Ann");
        assert_eq!(d["agents"][0]["properties"]["mood"], "calm");
        assert_eq!(d["scene"]["config"], json!({"num_decks": 2}));
        set_at(&mut d, "/description", text_value(""));
        assert!(d.get("description").is_none(), "an empty text field leaves no field");
        set_at(&mut d, "/agents/9/name", text_value("nobody"));
        assert_eq!(agent_count(&d), 2, "no agent is made by a write past the end");
        assert_eq!(number_value("1.5"), Some(json!(1.5)));
        assert_eq!(number_value("ten"), Some(json!("ten")), "the server names the field");
        assert_eq!(text_at(&d, "/max_steps_per_turn"), "3");
    }

    #[test]
    fn agents_actions_and_ordering() {
        let mut d = social_template();
        add_agent(&mut d);
        assert_eq!(agent_names(&d), ["Alice", "Bob", "Agent 3"]);
        toggle_action(&mut d, 2, "vote");
        assert!(has_action(&d, 2, "vote"));
        toggle_action(&mut d, 2, "vote");
        assert!(!has_action(&d, 2, "vote"));
        set_at(&mut d, "/agents/1", None);
        assert_eq!(agent_names(&d), ["Alice", "Agent 3"]);
        set_ordering(&mut d, "llm_moderated");
        assert_eq!(d["ordering"], json!({"kind": "llm_moderated", "moderator": "Alice"}));
        set_ordering(&mut d, "random");
        assert_eq!(d["ordering"], json!({"kind": "random"}));
        set_ordering(&mut d, "cycled");
        assert_eq!(names_of(&d, "/ordering/names"), "Alice, Agent 3");
        set_at(&mut d, "/scene/config", Some(json!({"role_map": {}})));
        set_scene_type(&mut d, "council");
        assert!(d["scene"].get("config").is_none());
        assert_eq!(lines_value(" a \n\n b"), json!(["a", "b"]));
        assert_eq!(names_value("A, ,B"), json!(["A", "B"]));
        let roles = roles_value("Ann: werewolf\nBob:seer\nnonsense");
        assert_eq!(roles, json!({"Ann": "werewolf", "Bob": "seer"}));
        set_at(&mut d, "/scene/config/role_map", Some(roles));
        assert_eq!(roles_of(&d), "Ann: werewolf\nBob: seer");
    }

    #[test]
    fn the_picker_offers_the_scene_types_catalogue_and_a_switch_drops_the_rest() {
        assert_eq!(
            scene_types().collect::<Vec<_>>(),
            ["simple_chat", "council", "werewolf", "landlord", "village", "custom"]
        );
        let chat = actions_of("simple_chat");
        assert!(chat.contains(&"send_message") && !chat.contains(&"vote") && !chat.contains(&"night_kill"));
        let council = actions_of("council");
        assert_eq!(council.len(), chat.len() + 5);
        assert!(council.contains(&"vote") && !council.contains(&"play_cards"));
        assert_eq!(actions_of("no such type").len(), 29);

        let mut d = social_template();
        set_scene_type(&mut d, "council");
        toggle_action(&mut d, 0, "vote");
        set_at(&mut d, "/scene/prose", Some(json!({"rules": "r", "actions": {"vote": {}, "yield": {}}})));
        set_scene_type(&mut d, "werewolf");
        assert_eq!(d["agents"][0]["action_space"], json!(["send_message", "yield"]));
        assert_eq!(d["scene"]["prose"], json!({"rules": "r", "actions": {"yield": {}}}));
    }

    #[test]
    fn trading_fields() {
        let mut d = trading_template();
        toggle_ticker(&mut d, "AAPL");
        toggle_ticker(&mut d, "IBM");
        assert_eq!(tickers_of(&d), ["MSFT", "IBM"]);
        set_trading_agent(&mut d, "momentum");
        assert_eq!(d["episode"]["agent"], json!({"kind": "momentum"}));
        let t = vec!["ABC".to_string(), "XYZ".to_string()];
        set_dataset(&mut d, Some("mine"), &t, "2020-01-02", "2020-03-31");
        assert_eq!(tickers_of(&d), ["ABC", "XYZ"]);
        assert_eq!(text_at(&d, "/episode/start_date"), "2020-01-02");
        assert_eq!(text_at(&d, "/episode/end_date"), "2020-03-31");
        assert_eq!(text_at(&d, "/episode/dataset"), "mine");
        set_dataset(&mut d, None, &t, "2020-01-02", "2020-03-31");
        assert!(d["episode"].get("dataset").is_none());
    }

    #[test]
    fn kinds_and_titles() {
        assert_eq!(kind_of(&social_template()), Some(SimKind::Social));
        assert_eq!(kind_of(&trading_template()), Some(SimKind::Trading));
        let abm = json!({"success": true, "model": {}, "supportingInfo": {"title": "SIR"}});
        assert_eq!(kind_of(&abm), Some(SimKind::Abm));
        assert_eq!(kind_of(&json!({"codingLanguage": "python", "agents": []})), Some(SimKind::Abm));
        assert_eq!(kind_of(&json!([1])), None);
        assert_eq!(title_of(&abm), "SIR");
        assert_eq!(title_of(&social_template()), "My scene");
    }

    #[test]
    fn refusals_name_their_place() {
        assert_eq!(refusal_line("line 8: high 41.2 below low 41.5"), Some(8));
        assert_eq!(refusal_line("line 1: the header has 3 columns"), Some(1));
        assert_eq!(refusal_line("3000 rows; too many"), None);
        assert_eq!(
            refusal_path("scenario: agents[0].action_space[1]: unknown variant `fly`").as_deref(),
            Some("agents[0].action_space[1]")
        );
        assert_eq!(
            refusal_path("scenario: error[unresolved-reference] model.dataAnalytics.trackedVariables[0].sourceName: global variable 'x' is not declared").as_deref(),
            Some("model.dataAnalytics.trackedVariables[0].sourceName")
        );
        assert_eq!(
            refusal_path("episode config: tickers[0]: unknown ticker 'XYZ'").as_deref(),
            Some("episode.tickers[0]")
        );
        assert_eq!(path_pointer("agents[2].action_space[0]"), "/agents/2/action_space/0");
        assert_eq!(path_pointer("max_steps_per_turn"), "/max_steps_per_turn");
        assert!(within("/agents/2/action_space/0", "/agents/2/action_space"));
        assert!(within("/title", "/title"));
        assert!(!within("/titles", "/title"));
        assert_eq!(refusal_path("scenario: the landlord scene needs exactly 4 agents, got 1"), None);
    }

    #[test]
    fn a_path_is_found_on_its_line_of_the_pretty_document() {
        let doc = json!({
            "a": 1,
            "model": {"empty": [], "list": [{"x": 1}, {"y": {"z": [1, 2]}}], "last": {}},
            "b": "two\nlines"
        });
        let text = pretty(&doc);
        let lines: Vec<&str> = text.lines().collect();
        for (path, starts) in [
            ("a", "\"a\": 1"),
            ("model", "\"model\": {"),
            ("model.empty", "\"empty\": []"),
            ("model.list[1].y.z[1]", "2"),
            ("model.list[1]", "{"),
            ("model.last", "\"last\": {}"),
            ("b", "\"b\":"),
            ("model.list[7].x", "\"list\": ["),
        ] {
            let line = line_of_path(&doc, path);
            assert!(lines[line - 1].trim().starts_with(starts), "{path}: line {line} is {:?}", lines[line - 1]);
        }
        assert_eq!(line_of_path(&doc, ""), 1);
        assert_eq!(line_span("ab\ncd\ne", 2), (3, 5));
        assert_eq!(line_span("ab", 1), (0, 2));
    }

    #[test]
    fn a_csv_preview_has_its_first_rows_and_each_tickers_closes() {
        let csv = "date,ticker,open,high,low,close,volume\n\
                   2020-01-02,ABC,10,11,9,10.5,100\n\
                   2020-01-02,XYZ,5,6,4,5.5,10\n\
                   \n\
                   2020-01-03,ABC,10,11,9,oops,100\n\
                   2020-01-06,ABC,10,11,9,11,100\n";
        let p = csv_preview(csv, 2);
        assert_eq!(p.header.len(), 7);
        assert_eq!(p.total, 4);
        assert_eq!(p.rows.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(p.closes[0].0, "ABC");
        assert_eq!(p.closes[0].2, [10.5, 11.0]);
        assert_eq!(p.closes[1].1, ["2020-01-02"]);
        assert_eq!(text_line(csv, 5), Some("2020-01-03,ABC,10,11,9,oops,100"));
        assert_eq!(text_line(csv, 0), None);
        assert_eq!(csv_preview("", 5), CsvPreview::default());
        assert_eq!(dataset_name("my prices.2020.csv"), "my_prices_2020");
        assert_eq!(dataset_name("__.csv"), "my_data");
    }
}
