//! What made a node, in words and colours (pure, tested natively).
//!
//! The graph, its tooltips and the inspector describe every node by the ops on its edge
//! ("broadcast: 'Breaking…'", "+3 turns" (or decisions, steps), "cash → 500,000", "infectionRate → 0.6"). Social ops keep
//! upstream's edge colours; trading and ABM ops get colours of their own so a trading tree does
//! not read as a social one. This module also holds the small rules the editors apply before a
//! request is sent: which ops deserve a confirmation, and when a node cannot be advanced.

use serde_json::Value;
use simtree_shared::{EdgeType, NodeView, Op};

use crate::i18n::{Lang, t};

/// How wide `text` is drawn at `font_px`, over-estimated so that a label measured by it never
/// takes more room than this says: a wide (CJK) character is an em, a capital three quarters, any
/// other character 0.62 of one (system sans-serif, bold included).
pub fn text_px(text: &str, font_px: f64) -> f64 {
    text.chars()
        .map(|c| match c {
            c if !c.is_ascii() => 1.0,
            'A'..='Z' | 'm' | 'w' => 0.75,
            _ => 0.62,
        })
        .sum::<f64>()
        * font_px
}

/// `text` shortened to at most `max` characters and to `room` pixels at `font_px` (with an
/// ellipsis when cut); `None` when fewer than three characters would be left, so that a label
/// too cramped to read is left out rather than drawn over its neighbours.
pub fn fit_label(text: &str, max: usize, room: f64, font_px: f64) -> Option<String> {
    let text = ellipsis(text, max);
    if text_px(&text, font_px) <= room {
        return Some(text);
    }
    let mut kept = String::new();
    for c in text.trim_end_matches('…').chars() {
        kept.push(c);
        if text_px(&kept, font_px) + font_px > room {
            kept.pop();
            break;
        }
    }
    (kept.chars().count() >= 3).then(|| format!("{}…", kept.trim_end()))
}

/// Shortens `text` to `max` characters, with an ellipsis when cut.
pub fn ellipsis(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// A number with thousands separators (`500000` → `500,000`; fractions kept to two places).
pub fn grouped(x: f64) -> String {
    // Rounded to cents first: 1234.999 is 1,235, not 1,234 with a fraction rounded away.
    let cents = (x.abs() * 100.0).round() as u64;
    let neg = x < 0.0 && cents > 0;
    let (whole, frac) = (cents / 100, cents % 100);
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if frac > 0 {
        out.push_str(&format!(".{frac:02}"));
    }
    if neg { format!("-{out}") } else { out }
}

/// A JSON value as a short literal (`0.6`, `'SIR'`, `{…}`).
fn literal(v: &Value) -> String {
    match v {
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), grouped_if_large),
        Value::String(s) => format!("'{}'", ellipsis(s, 24)),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        other => ellipsis(&other.to_string(), 24),
    }
}

fn grouped_if_large(x: f64) -> String {
    if x.abs() >= 10_000.0 { grouped(x) } else { format!("{x}") }
}

fn keys(map: &serde_json::Map<String, Value>) -> String {
    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} → {}", literal(v))).collect();
    ellipsis(&parts.join(", "), 60)
}

/// The money part of a usage line: what the calls cost, what prompt caches and coalesced calls
/// saved, and the share of input a prompt cache could serve (each only when known).
pub fn money_text(u: &simtree_shared::Usage, saved: &str, cacheable: &str) -> String {
    let mut s = String::new();
    if let Some(m) = u.money {
        s.push_str(&format!(" · ${m:.4}"));
    }
    if let Some(v) = u.saved {
        s.push_str(&format!(" ({saved} ${v:.4})"));
    }
    if let Some(c) = u.cacheable_share {
        s.push_str(&format!(" · {:.0}% {cacheable}", c * 100.0));
    }
    s
}

/// One op in a few words.
pub fn op_label(op: &Op, lang: Lang, kind: Kind) -> String {
    let w = |key| t(lang, key);
    match op {
        Op::Advance { turns } => {
            let (one, many) = kind.advance_units();
            format!("+{turns} {}", w(if *turns == 1 { one } else { many }))
        }
        Op::AgentCtxAppend { name, role, content } => {
            format!("{name} ← {role}: '{}'", ellipsis(content, 40))
        }
        Op::AgentPlanReplace { name, plan_state } => {
            let plan_state = plan_state.json();
            let empty = plan_state.as_object().is_some_and(|m| m.is_empty()) || plan_state.is_null();
            let plan = if empty { w("op.cleared").into() } else { literal(plan_state) };
            format!("{name}: {} {plan}", w("op.plan"))
        }
        Op::AgentPropsPatch { name, updates } => format!("{name}: {}", keys(updates)),
        Op::SceneStatePatch { updates } => format!("{}: {}", w("op.scene"), keys(updates)),
        Op::PublicBroadcast { text } => format!("{}: '{}'", w("op.broadcast"), ellipsis(text, 40)),
        Op::PortfolioPatch { cash, positions } => {
            let mut parts = Vec::new();
            if let Some(c) = cash {
                parts.push(format!("{} → {}", w("op.cash"), grouped(*c)));
            }
            if !positions.is_empty() {
                let shares = positions.iter().map(|(t, n)| (t.clone(), Value::from(*n))).collect();
                parts.push(keys(&shares));
            }
            parts.join(", ")
        }
        Op::CaseDataInject { item } => format!("{}: '{}'", item.kind.as_str(), ellipsis(&item.content, 40)),
        Op::AgentSwap { agent } => format!("{} → {}", w("op.agent"), agent.kind()),
        Op::AgentPromptReplace { system_prompt } => {
            format!("{}: '{}'", w("op.prompt"), ellipsis(system_prompt, 40))
        }
        Op::AbmSetGlobal { name, value } | Op::AbmSetEnvironment { name, value } => {
            format!("{name} → {}", literal(value))
        }
        Op::AbmSetAgent { agent_type, name, value, agent_id } => {
            let who = agent_id.map_or_else(|| agent_type.clone(), |id| format!("{agent_type} #{id}"));
            format!("{who}.{name} → {}", literal(value))
        }
        Op::SceneVarSet { name, value, agent } => match agent {
            Some(a) => format!("{a}.{name} → {}", literal(value)),
            None => format!("{name} → {}", literal(value)),
        },
        Op::AgentRoleSet { name, role } => format!("{name}: role → {role}"),
        Op::SceneProseSet { prose } => format!("{}: {}", w("op.prose"), prose_parts(prose)),
    }
}

/// The parts of the prose a `scene_prose_set` gives: `description, rules, vote`.
fn prose_parts(prose: &simtree_shared::SceneProse) -> String {
    let parts = [("description", &prose.description), ("rules", &prose.rules), ("examples", &prose.examples)];
    parts
        .into_iter()
        .filter(|(_, text)| text.is_some())
        .map(|(name, _)| name.to_string())
        .chain(prose.actions.keys().cloned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// All ops of an edge in a few words; an empty list is a plain copy.
pub fn ops_label(ops: &[Op], lang: Lang, kind: Kind) -> String {
    if ops.is_empty() {
        return t(lang, "op.copy").into();
    }
    ops.iter().map(|op| op_label(op, lang, kind)).collect::<Vec<_>>().join("; ")
}

/// An advance that ran fewer turns than it asked for: "+120 of 200 decisions".
pub fn short_advance_label(ran: u64, asked: u64, lang: Lang, kind: Kind) -> String {
    t(lang, "op.ranOf")
        .replace("{{ran}}", &ran.to_string())
        .replace("{{asked}}", &asked.to_string())
        .replace("{{unit}}", t(lang, kind.advance_units().1))
}

/// What an edge is drawn as: a colour and a name for the legend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeStyle {
    pub name: &'static str,
    pub colour: &'static str,
}

const fn style(name: &'static str, colour: &'static str) -> EdgeStyle {
    EdgeStyle { name, colour }
}

// Social edges keep upstream's colours (spec §4.2); trading and ABM ops have their own hues.
pub const ADVANCE: EdgeStyle = style("advance", "#000");
pub const AGENT_CTX: EdgeStyle = style("agent_ctx", "#1b5e20");
pub const AGENT_PLAN: EdgeStyle = style("agent_plan", "#e65100");
pub const AGENT_PROPS: EdgeStyle = style("agent_props", "#5e35b1");
pub const SCENE_STATE: EdgeStyle = style("scene_state", "#6d4c41");
pub const PUBLIC_EVENT: EdgeStyle = style("public_event", "#1e4976");
pub const MULTI: EdgeStyle = style("multi", "#888");
pub const PORTFOLIO: EdgeStyle = style("portfolio", "#00838f");
pub const NEWS: EdgeStyle = style("news", "#c2185b");
pub const AGENT_SWAP: EdgeStyle = style("agent_swap", "#7b1fa2");
pub const PROMPT: EdgeStyle = style("prompt", "#ef6c00");
pub const ABM_GLOBAL: EdgeStyle = style("global", "#2e7d32");
pub const ABM_ENV: EdgeStyle = style("environment", "#0277bd");
pub const ABM_AGENT: EdgeStyle = style("agents", "#ad1457");
/// A sweep's cells and replicates, whatever their ops: the grid reads as one family.
pub const SWEEP: EdgeStyle = style("sweep", "#b08800");
/// An exploration's candidates and replicates, whatever their ops.
pub const EXPLORE: EdgeStyle = style("explore", "#8a3ffc");

/// The CSS colour of a style: its own, but the theme's (`--edge-advance`) for advances, whose
/// upstream black would vanish on a dark theme.
pub fn theme_colour(s: &EdgeStyle) -> &'static str {
    if s.name == ADVANCE.name { "var(--edge-advance)" } else { s.colour }
}

/// The style of one op.
pub fn op_style(op: &Op) -> EdgeStyle {
    match op {
        Op::Advance { .. } => ADVANCE,
        Op::AgentCtxAppend { .. } => AGENT_CTX,
        Op::AgentPlanReplace { .. } => AGENT_PLAN,
        Op::AgentPropsPatch { .. } => AGENT_PROPS,
        Op::SceneStatePatch { .. } | Op::SceneVarSet { .. } | Op::SceneProseSet { .. } => SCENE_STATE,
        Op::AgentRoleSet { .. } => AGENT_PROPS,
        Op::PublicBroadcast { .. } => PUBLIC_EVENT,
        Op::PortfolioPatch { .. } => PORTFOLIO,
        Op::CaseDataInject { .. } => NEWS,
        Op::AgentSwap { .. } => AGENT_SWAP,
        Op::AgentPromptReplace { .. } => PROMPT,
        Op::AbmSetGlobal { .. } => ABM_GLOBAL,
        Op::AbmSetEnvironment { .. } => ABM_ENV,
        Op::AbmSetAgent { .. } => ABM_AGENT,
    }
}

/// The style of an edge: a sweep's own, else its single op's, else by edge type (several ops →
/// multi).
pub fn edge_style(kind: EdgeType, ops: Option<&[Op]>) -> EdgeStyle {
    match kind {
        EdgeType::Sweep => return SWEEP,
        EdgeType::Explore => return EXPLORE,
        _ => {}
    }
    if let Some([one]) = ops {
        return op_style(one);
    }
    match kind {
        EdgeType::Advance => ADVANCE,
        EdgeType::AgentCtx => AGENT_CTX,
        EdgeType::AgentPlan => AGENT_PLAN,
        EdgeType::AgentProps => AGENT_PROPS,
        EdgeType::SceneState => SCENE_STATE,
        EdgeType::PublicEvent => PUBLIC_EVENT,
        EdgeType::Root | EdgeType::Multi => MULTI,
        EdgeType::Sweep => SWEEP,
        EdgeType::Explore => EXPLORE,
    }
}

/// The three kinds of simulation a tree can hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    #[default]
    Social,
    Trading,
    Abm,
}

impl Kind {
    /// The kind of a node view.
    pub fn of_view(view: &NodeView) -> Kind {
        match view {
            NodeView::Trading(_) => Kind::Trading,
            NodeView::Abm(_) => Kind::Abm,
            NodeView::Social(_) => Kind::Social,
        }
    }

    /// The i18n key of the unit a run of this kind counts in `run_progress`.
    pub fn progress_unit(self) -> &'static str {
        match self {
            Kind::Social => "progress.turn",
            Kind::Trading => "progress.decision",
            Kind::Abm => "progress.step",
        }
    }

    /// The i18n keys of one and of several of the units an advance of this kind runs (the
    /// graph's edge labels: "+1 turn", "+3 decisions", "+5 steps").
    pub fn advance_units(self) -> (&'static str, &'static str) {
        match self {
            Kind::Social => ("op.turn", "op.turns"),
            Kind::Trading => ("op.decision", "op.decisions"),
            Kind::Abm => ("op.step", "op.steps"),
        }
    }

    /// The i18n key of the plural unit a run of this kind is counted in (the ops panel's labels).
    pub fn units(self) -> &'static str {
        match self {
            Kind::Social => "unit.turns",
            Kind::Trading => "unit.decisions",
            Kind::Abm => "unit.steps",
        }
    }

    /// The edge legend of this kind.
    pub fn legend(self) -> &'static [EdgeStyle] {
        match self {
            Kind::Social => &[ADVANCE, AGENT_CTX, AGENT_PLAN, AGENT_PROPS, SCENE_STATE, PUBLIC_EVENT, SWEEP, EXPLORE],
            Kind::Trading => &[ADVANCE, PORTFOLIO, NEWS, AGENT_SWAP, PROMPT, SWEEP, EXPLORE],
            Kind::Abm => &[ADVANCE, ABM_GLOBAL, ABM_ENV, ABM_AGENT, SWEEP, EXPLORE],
        }
    }
}

/// A short name of what a tree simulates, from its root's view: the scene, the trading episode
/// or the model.
pub fn scenario_label(view: &NodeView) -> String {
    match view {
        NodeView::Social(v) => v.scene.clone(),
        NodeView::Trading(v) => v.episode_id.clone(),
        // abm-quant models carry no name of their own.
        NodeView::Abm(_) => "agent-based model".into(),
    }
}

/// Why a node cannot usefully be advanced (its episode is over, its model terminated); `None`
/// when it can. Advancing it anyway would only make an empty child.
pub fn finished_reason(view: &NodeView) -> Option<String> {
    match view {
        NodeView::Trading(v) if v.done => Some(format!(
            "the episode is finished ({} of {} decision points)",
            v.next_decision_point, v.decision_points
        )),
        NodeView::Abm(v) => {
            v.terminated.as_ref().map(|t| format!("the model terminated at step {} ({})", v.steps, t.reason))
        }
        _ => None,
    }
}

/// Ops that silently destroy something: the question to ask before sending them.
pub fn needs_confirm(op: &Op) -> Option<String> {
    let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty()) || v.as_str() == Some("");
    match op {
        Op::AgentPlanReplace { name, plan_state } if empty(plan_state.json()) => Some(format!(
            "Replace {}'s plan with an empty one? The current plan is lost on the new branch.",
            if name.is_empty() { "the agent" } else { name }
        )),
        Op::AgentPromptReplace { system_prompt } if system_prompt.is_empty() => {
            Some("Replace the system prompt with an empty one?".into())
        }
        Op::AgentPropsPatch { updates, .. } | Op::SceneStatePatch { updates } if updates.is_empty() => {
            Some("The patch is empty: the branch will be a plain copy. Continue?".into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_label_is_fitted_to_its_room_or_left_out() {
        assert_eq!(fit_label("+3 turns", 22, 200.0, 10.0).as_deref(), Some("+3 turns"));
        let cut = fit_label("broadcast: 'Breaking news'", 22, 60.0, 10.0).unwrap();
        assert!(cut.ends_with('…') && text_px(&cut, 10.0) <= 60.0, "{cut}");
        assert_eq!(fit_label("broadcast: 'Breaking news'", 22, 25.0, 10.0), None);
        assert_eq!(fit_label("广播：突发新闻", 22, 45.0, 10.0).as_deref(), Some("广播：…"));
        // The character cap holds however wide the room.
        assert_eq!(fit_label(&"x".repeat(40), 22, 1e9, 10.0).unwrap().chars().count(), 22);
    }

    #[test]
    fn the_money_part_shows_cost_savings_and_the_cacheable_share_when_known() {
        let mut u = simtree_shared::Usage::default();
        assert_eq!(super::money_text(&u, "saved", "cacheable"), "");
        u.money = Some(0.012_34);
        u.saved = Some(0.5);
        u.cacheable_share = Some(0.876);
        assert_eq!(super::money_text(&u, "saved", "cacheable"), " · $0.0123 (saved $0.5000) · 88% cacheable");
    }

    use super::*;
    use serde_json::json;

    fn op(v: Value) -> Op {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn labels_say_what_made_a_node() {
        assert_eq!(op_label(&Op::Advance { turns: 3 }, Lang::En, Kind::Social), "+3 turns");
        assert_eq!(op_label(&Op::Advance { turns: 1 }, Lang::En, Kind::Social), "+1 turn");
        assert_eq!(op_label(&Op::Advance { turns: 3 }, Lang::En, Kind::Trading), "+3 decisions");
        assert_eq!(op_label(&Op::Advance { turns: 1 }, Lang::En, Kind::Abm), "+1 step");
        assert_eq!(
            op_label(
                &op(json!({"op": "public_broadcast", "text": "Breaking news: the bridge is closed for repairs"})),
                Lang::En,
                Kind::Social
            ),
            "broadcast: 'Breaking news: the bridge is closed for…'"
        );
        assert_eq!(
            op_label(&op(json!({"op": "portfolio_patch", "cash": 500000.0})), Lang::En, Kind::Trading),
            "cash → 500,000"
        );
        assert_eq!(
            op_label(
                &op(json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.6})),
                Lang::En,
                Kind::Social
            ),
            "infectionRate → 0.6"
        );
        assert_eq!(
            op_label(
                &op(
                    json!({"op": "abm_set_agent", "agent_type": "Person", "name": "status", "value": "I", "agent_id": 4})
                ),
                Lang::En,
                Kind::Social
            ),
            "Person #4.status → 'I'"
        );
        assert_eq!(
            op_label(
                &op(json!({"op": "case_data_inject", "item": {"kind": "news", "content": "Recall"}})),
                Lang::En,
                Kind::Social
            ),
            "news: 'Recall'"
        );
        assert_eq!(
            op_label(&op(json!({"op": "agent_plan_replace", "name": "Ann", "plan_state": {}})), Lang::En, Kind::Social),
            "Ann: plan cleared"
        );
        assert_eq!(ops_label(&[], Lang::En, Kind::Social), "copy");
        assert_eq!(ops_label(&[], Lang::Zh, Kind::Social), "副本");
        assert_eq!(op_label(&Op::Advance { turns: 3 }, Lang::Zh, Kind::Social), "+3 回合");
        assert_eq!(grouped(1234567.5), "1,234,567.50");
        assert_eq!(grouped(-999.0), "-999");
        assert_eq!(grouped(1234.999), "1,235", "rounded up into the next whole");
        assert_eq!(grouped(99_999.996), "100,000");
        assert_eq!(grouped(0.05), "0.05");
        assert_eq!(grouped(-0.001), "0");
    }

    #[test]
    fn trading_and_abm_ops_have_their_own_colours() {
        let social: Vec<&str> = Kind::Social.legend().iter().map(|s| s.colour).collect();
        for kind in [Kind::Trading, Kind::Abm] {
            // Advance, sweep and explore are every kind's; the op colours are the kind's own.
            for s in kind.legend().iter().filter(|s| ![ADVANCE, SWEEP, EXPLORE].contains(s)) {
                assert!(!social.contains(&s.colour), "{} reuses a social colour", s.name);
            }
        }
        let patch = op(json!({"op": "portfolio_patch", "cash": 1.0}));
        assert_eq!(edge_style(EdgeType::SceneState, Some(&[patch])), PORTFOLIO);
        assert_eq!(edge_style(EdgeType::PublicEvent, None).colour, "#1e4976");
        assert_eq!(edge_style(EdgeType::Multi, Some(&[])), MULTI);
        let rate = op(json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.3}));
        assert_eq!(edge_style(EdgeType::Sweep, Some(&[rate])), SWEEP, "a sweep cell reads as the sweep");
        assert_eq!(
            edge_style(EdgeType::Explore, Some(&[op(json!({"op": "abm_set_global", "name": "x", "value": 1}))])),
            EXPLORE
        );
    }

    /// A node view of `fields`' kind: `fields` over an empty view of that kind.
    fn view(fields: Value) -> NodeView {
        let performance = json!({"total_return": 0.0, "annualised_return": 0.0, "volatility": 0.0, "sharpe": null, "max_drawdown": 0.0});
        let mut v = match fields["kind"].as_str() {
            Some("trading") => json!({
                "episode_id": "e", "agent_id": "a", "agent": {"kind": "buy_and_hold"}, "tickers": [],
                "decision_points": 0, "next_decision_point": 0, "done": false, "current_date": null,
                "next_date": null, "portfolio": {"cash": 0.0}, "portfolio_value": 0.0, "pending_case_data": [],
                "equity_curve": [], "buy_and_hold_curve": [], "trades": [],
                "metrics": {"episode_id": "e", "agent_id": "a", "start_date": null, "end_date": null, "days": 0,
                    "initial_value": 0.0, "final_value": 0.0, "strategy": performance, "buy_and_hold": performance,
                    "buy_and_hold_final_value": 0.0, "decision_points": 0, "num_trades": 0, "rejected_decisions": 0}
            }),
            Some("abm") => {
                json!({"model": {}, "seed": 0, "steps": 0, "terminated": null, "pending": [], "snapshot_bytes": null})
            }
            _ => json!({"scene": "", "state": {}}),
        };
        for (k, x) in fields.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn finished_nodes_and_destructive_ops_are_recognised() {
        let done = view(json!({"kind": "trading", "done": true, "next_decision_point": 146, "decision_points": 146}));
        assert!(finished_reason(&done).unwrap().contains("146 of 146"));
        assert_eq!(finished_reason(&view(json!({"kind": "trading", "done": false}))), None);
        let ended = view(json!({"kind": "abm", "steps": 12, "terminated": {"reason": "no infected"}}));
        assert!(finished_reason(&ended).unwrap().contains("step 12 (no infected)"));
        assert_eq!(finished_reason(&view(json!({"kind": "abm", "terminated": null}))), None);
        assert!(needs_confirm(&op(json!({"op": "agent_plan_replace", "name": "Ann", "plan_state": {}}))).is_some());
        assert!(
            needs_confirm(&op(json!({"op": "agent_plan_replace", "name": "Ann", "plan_state": {"strategy": "x"}})))
                .is_none()
        );
        assert!(needs_confirm(&op(json!({"op": "public_broadcast", "text": ""}))).is_none());
        assert_eq!(scenario_label(&view(json!({"kind": "social", "scene": "council"}))), "council");
    }
}
