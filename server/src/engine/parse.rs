//! Strict parsing of an agent's LLM response.
//!
//! A response has up to five sections (`--- Thoughts ---`, `--- Plan ---`, `--- Action ---`,
//! `--- Plan Update ---`, `--- Emotion Update ---`). The Action section must hold exactly one
//! `<Action name="…">` XML element whose direct children are its fields; the Plan Update is a small
//! tag language (`<Goals>`, `<Milestones>`, `<Strategy>`, `<Notes>`) that replaces the agent's plan.
//! Anything malformed is a [`ParseError`]; the agent retries the same request (see `agent.rs`).

pub use simtree_shared::ActionCall;

use super::plan::{Goal, Milestone, PlanState};

/// Why a response could not be used. The message is shown in `agent_error` events.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParseError {
    #[error("the Action element is not well-formed XML: {0}")]
    ActionXml(String),
    #[error("the Plan Update is not well-formed: {0}")]
    PlanXml(String),
    #[error("the Plan Update has an unknown tag <{0}> (allowed: Goals, Milestones, Strategy, Notes)")]
    PlanTag(String),
    #[error("the Plan Update's <{tag}> line {line:?} is not a numbered item like \"1. text\"")]
    PlanList { tag: String, line: String },
    #[error("the Plan Update marks more than one goal [CURRENT]")]
    PlanTwoCurrent,
}

/// The sections of a response, each trimmed; a missing section is empty.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sections<'a> {
    thoughts: &'a str,
    plan: &'a str,
    pub(crate) action: &'a str,
    pub(crate) plan_update: &'a str,
    pub(crate) emotion_update: &'a str,
}

const THOUGHTS: &str = "--- Thoughts ---";
const PLAN: &str = "--- Plan ---";
const ACTION: &str = "--- Action ---";
const PLAN_UPDATE: &str = "--- Plan Update ---";
const EMOTION_UPDATE: &str = "--- Emotion Update ---";

/// Text between the first `start` marker and the next `end` marker (both required).
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let Some(i) = text.find(start) else { return "" };
    let rest = &text[i + start.len()..];
    match rest.find(end) {
        Some(j) => rest[..j].trim(),
        None => "",
    }
}

/// Text after the first `start` marker up to the first `end` marker, or to the end of the text.
fn after<'a>(text: &'a str, start: &str, end: Option<&str>) -> &'a str {
    let Some(i) = text.find(start) else { return "" };
    let rest = &text[i + start.len()..];
    let rest = match end.and_then(|e| rest.find(e)) {
        Some(j) => &rest[..j],
        None => rest,
    };
    rest.trim()
}

/// Splits a response into its sections (first match of each marker).
pub(crate) fn split_sections(text: &str) -> Sections<'_> {
    Sections {
        thoughts: between(text, THOUGHTS, PLAN),
        plan: between(text, PLAN, ACTION),
        action: after(text, ACTION, Some("\n--- Plan Update ---")),
        plan_update: after(text, PLAN_UPDATE, Some("\n--- Emotion Update ---")),
        emotion_update: after(text, EMOTION_UPDATE, None),
    }
}

/// Replaces every `&` that does not start a character or entity reference with `&amp;`, so raw
/// ampersands in LLM prose ("R&D") do not break the XML parse.
pub(crate) fn normalize_ampersands(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 8);
    let mut last = 0;
    for (i, _) in text.match_indices('&') {
        out.push_str(&text[last..i]);
        if starts_reference(&bytes[i + 1..]) {
            out.push('&');
        } else {
            out.push_str("&amp;");
        }
        last = i + 1;
    }
    out.push_str(&text[last..]);
    out
}

/// Whether bytes following an `&` form `#digits;`, `#xhex;` or `letter alnum*;`.
fn starts_reference(rest: &[u8]) -> bool {
    let (body, ok): (&[u8], fn(u8) -> bool) = match rest {
        [b'#', b'x', tail @ ..] => (tail, |c| c.is_ascii_hexdigit()),
        [b'#', tail @ ..] => (tail, |c| c.is_ascii_digit()),
        [c, ..] if c.is_ascii_alphabetic() => (&rest[1..], |c| c.is_ascii_alphanumeric()),
        _ => return false,
    };
    let n = body.iter().take_while(|&&c| ok(c)).count();
    let named = matches!(rest.first(), Some(c) if c.is_ascii_alphabetic());
    (n > 0 || named) && body.get(n) == Some(&b';')
}

/// Locates the single Action element: from the first `<Action` through the last `</Action>`, else
/// the first self-closing `<Action … />`.
fn locate_action(block: &str) -> Option<&str> {
    let start = block.find("<Action")?;
    let open_end = start + block[start..].find('>')?;
    if let Some(close) = block.rfind("</Action>")
        && close > open_end
    {
        return Some(&block[start..close + "</Action>".len()]);
    }
    let end = start + block[start..].find("/>")?;
    Some(&block[start..end + 2])
}

/// Parses the Action block. `Ok(None)` means "no action here" (empty block, no element, wrong root,
/// no name); an element that is present but malformed is an error.
pub(crate) fn parse_action(block: &str) -> Result<Option<ActionCall>, ParseError> {
    if block.trim().is_empty() {
        return Ok(None);
    }
    let Some(span) = locate_action(block) else {
        return Ok(None);
    };
    let xml = normalize_ampersands(span);
    let doc = roxmltree::Document::parse(&xml).map_err(|e| ParseError::ActionXml(e.to_string()))?;
    let root = doc.root_element();
    if !root.tag_name().name().eq_ignore_ascii_case("action") {
        return Ok(None);
    }
    let name = root.attribute("name").or_else(|| root.attribute("NAME")).unwrap_or("");
    if name.is_empty() {
        return Ok(None);
    }
    let mut call = ActionCall::new(name);
    for child in root.children().filter(|n| n.is_element()) {
        let value = child.text().unwrap_or("").trim().to_string();
        match child.tag_name().name() {
            "action" => call.name = value,
            tag => {
                call.fields.insert(tag.to_string(), value);
            }
        }
    }
    Ok(Some(call))
}

fn starts_with_no_change(block: &str) -> bool {
    block.trim().get(..9).is_some_and(|p| p.eq_ignore_ascii_case("no change"))
}

/// Items of a numbered list (`1. text` per line); empty text or `(none)` is an empty list.
fn numbered_items(tag: &str, text: &str) -> Result<Vec<String>, ParseError> {
    let text = text.trim();
    if text.is_empty() || text.eq_ignore_ascii_case("(none)") {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        let item = (digits > 0).then(|| line[digits..].strip_prefix('.')).flatten();
        match item {
            Some(item) => items.push(item.trim().to_string()),
            None => {
                return Err(ParseError::PlanList { tag: tag.into(), line: line.into() });
            }
        }
    }
    Ok(items)
}

/// Removes a marker such as `[CURRENT]` from an item; reports whether it was there.
fn take_marker(item: &str, marker: &str) -> (String, bool) {
    if item.contains(marker) { (item.replace(marker, "").trim().to_string(), true) } else { (item.to_string(), false) }
}

/// Parses a Plan Update block. `Ok(None)` = no update (empty or `no change`); otherwise the new
/// plan, which replaces the old one wholesale (absent tags give empty values).
pub(crate) fn parse_plan_update(block: &str) -> Result<Option<PlanState>, ParseError> {
    if block.trim().is_empty() || starts_with_no_change(block) {
        return Ok(None);
    }
    let xml = normalize_ampersands(&format!("<Update>{block}</Update>"));
    let doc = roxmltree::Document::parse(&xml).map_err(|e| ParseError::PlanXml(e.to_string()))?;
    let mut plan = PlanState::default();
    for child in doc.root_element().children().filter(|n| n.is_element()) {
        let tag = child.tag_name().name();
        let text = child.text().unwrap_or("");
        match tag {
            "Goals" => {
                let mut current_seen = false;
                plan.goals = Vec::new();
                for (i, item) in numbered_items(tag, text)?.into_iter().enumerate() {
                    let (desc, current) = take_marker(&item, "[CURRENT]");
                    if current && current_seen {
                        return Err(ParseError::PlanTwoCurrent);
                    }
                    current_seen |= current;
                    let status = if current { "current" } else { "pending" };
                    plan.goals.push(Goal::new(format!("g{}", i + 1), desc, status));
                }
            }
            "Milestones" => {
                plan.milestones = numbered_items(tag, text)?
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let (desc, done) = take_marker(&item, "[DONE]");
                        let status = if done { "done" } else { "pending" };
                        Milestone::new(format!("m{}", i + 1), desc, status)
                    })
                    .collect();
            }
            "Strategy" => plan.strategy = text.trim().to_string(),
            "Notes" => plan.notes = text.trim().to_string(),
            other => return Err(ParseError::PlanTag(other.to_string())),
        }
    }
    Ok(Some(plan))
}

/// Parses an Emotion Update block: `None` when empty or `no change`, else the trimmed text.
pub(crate) fn parse_emotion(block: &str) -> Option<String> {
    let block = block.trim();
    (!block.is_empty() && !starts_with_no_change(block)).then(|| block.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "--- Thoughts ---\nthink\n\n--- Plan ---\n1. Do. [CURRENT]\n\n--- Action ---\n<Action name=\"send_message\"><message>Hi &amp; bye</message></Action>\n\n--- Plan Update ---\nno change\n\n--- Emotion Update ---\nJoy\n";

    #[test]
    fn sections_are_split_and_trimmed() {
        let s = split_sections(FULL);
        assert_eq!(s.thoughts, "think");
        assert_eq!(s.plan, "1. Do. [CURRENT]");
        assert_eq!(s.action, "<Action name=\"send_message\"><message>Hi &amp; bye</message></Action>");
        assert_eq!(s.plan_update, "no change");
        assert_eq!(s.emotion_update, "Joy");
        assert_eq!(split_sections("nothing"), Sections::default());
    }

    #[test]
    fn a_single_action_parses_with_fields_in_order() {
        let call = parse_action(split_sections(FULL).action).unwrap().unwrap();
        assert_eq!(call.name, "send_message");
        assert_eq!(call.get("message"), Some("Hi & bye"));
        let json = serde_json::to_string(&call).unwrap();
        assert_eq!(json, r#"{"action":"send_message","message":"Hi & bye"}"#);
        let self_closing = parse_action("text <Action name=\"yield\" /> more").unwrap().unwrap();
        assert_eq!(self_closing, ActionCall::new("yield"));
    }

    #[test]
    fn no_action_element_is_not_an_error() {
        assert_eq!(parse_action(""), Ok(None));
        assert_eq!(parse_action("I will just think."), Ok(None));
        // Case-sensitive: a lower-case tag is not found.
        assert_eq!(parse_action("<action name=\"yield\"></action>"), Ok(None));
        // Wrong root tag and missing names are "no action".
        assert_eq!(parse_action("<Actions name=\"yield\" />"), Ok(None));
        assert_eq!(parse_action("<Action><message>x</message></Action>"), Ok(None));
        assert_eq!(parse_action("<Action name=\"\" />"), Ok(None));
    }

    #[test]
    fn two_actions_make_one_broken_span() {
        let two = "<Action name=\"yield\"></Action>\n<Action name=\"yield\"></Action>";
        assert!(matches!(parse_action(two), Err(ParseError::ActionXml(_))));
    }

    #[test]
    fn broken_xml_is_an_error() {
        let broken = "<Action name=\"send_message\"><message>hi</msg></Action>";
        assert!(matches!(parse_action(broken), Err(ParseError::ActionXml(_))));
        // An unknown named entity survives normalisation and then fails the XML parse.
        let nbsp = "<Action name=\"send_message\"><message>a&nbsp;b</message></Action>";
        assert!(matches!(parse_action(nbsp), Err(ParseError::ActionXml(_))));
    }

    #[test]
    fn stray_ampersands_are_normalised() {
        assert_eq!(normalize_ampersands("R&D &amp; &#38; &#x26; & x&"), "R&amp;D &amp; &#38; &#x26; &amp; x&amp;");
        assert_eq!(normalize_ampersands("&#; &#x; &1;"), "&amp;#; &amp;#x; &amp;1;");
        let call = parse_action("<Action name=\"speak\"><message>Q&A</message></Action>").unwrap();
        assert_eq!(call.unwrap().get("message"), Some("Q&A"));
    }

    #[test]
    fn later_duplicate_fields_overwrite_and_an_action_child_renames() {
        let xml = "<Action name=\"a\"><x>1</x><y> 2 </y><x>3</x><action>b</action></Action>";
        let call = parse_action(xml).unwrap().unwrap();
        assert_eq!(call.name, "b");
        assert_eq!(
            call.fields.iter().collect::<Vec<_>>(),
            vec![(&"x".to_string(), &"3".to_string()), (&"y".to_string(), &"2".to_string())]
        );
    }

    #[test]
    fn plan_update_replaces_with_numbered_goals_and_markers() {
        let block = "<Goals>\n1. Win the vote [CURRENT]\n2. Stay calm\n</Goals>\n<Milestones>1. Opened [DONE]\n2.Closed</Milestones><Strategy> be brief </Strategy>";
        let plan = parse_plan_update(block).unwrap().unwrap();
        assert_eq!(plan.goals.len(), 2);
        assert_eq!(plan.goals[0], Goal::new("g1", "Win the vote", "current"));
        assert_eq!(plan.goals[1], Goal::new("g2", "Stay calm", "pending"));
        assert_eq!(plan.milestones[0], Milestone::new("m1", "Opened", "done"));
        assert_eq!(plan.milestones[1], Milestone::new("m2", "Closed", "pending"));
        assert_eq!(plan.strategy, "be brief");
        assert_eq!(plan.notes, "");
    }

    #[test]
    fn plan_update_no_change_and_failures() {
        assert_eq!(parse_plan_update(""), Ok(None));
        assert_eq!(parse_plan_update("No change."), Ok(None));
        // Plain text parses to an all-empty plan (upstream wipes the plan too).
        assert_eq!(parse_plan_update("None"), Ok(Some(PlanState::default())));
        assert_eq!(parse_plan_update("<Goals>(none)</Goals>"), Ok(Some(PlanState::default())));
        assert!(matches!(parse_plan_update("<Goal>1. x</Goal>"), Err(ParseError::PlanTag(t)) if t == "Goal"));
        assert!(matches!(parse_plan_update("<Goals>- x</Goals>"), Err(ParseError::PlanList { .. })));
        assert!(matches!(parse_plan_update("<Goals>1. x"), Err(ParseError::PlanXml(_))));
        assert_eq!(parse_plan_update("<Goals>1. a [CURRENT]\n2. b [CURRENT]</Goals>"), Err(ParseError::PlanTwoCurrent));
        assert!(parse_plan_update("<Notes>R&D</Notes>").unwrap().unwrap().notes == "R&D");
    }

    #[test]
    fn emotion_update() {
        assert_eq!(parse_emotion(""), None);
        assert_eq!(parse_emotion("no change"), None);
        assert_eq!(parse_emotion(" Joy \n"), Some("Joy".to_string()));
    }
}
