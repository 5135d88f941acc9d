//! The trading kind at a tree node: what the seam asks of a [`TradingEpisode`] — run decision
//! points as events, take a trading branch op, and show the agent's memory as its state (the
//! view is the episode's own [`TradingEpisode::view`]).

use serde_json::Value;
use simtree_shared::trading::DecisionEvent;
use simtree_shared::{AgentErrorEvent, AgentState, MemoryLine, NodeState, Op};

use super::{SimError, op_name};
use crate::engine::event::{Event, EventSink};
use crate::llm::chat::ChatRequest;
use crate::trading::agents::ToolModel;
use crate::trading::episode::{TradingEpisode, TradingOp};

/// Runs up to `turns` decision points (fewer when the episode ends), one `decision_point` event
/// each. A failed model call is logged as an `agent_error` and ends the run; the episode is left
/// as it was before that decision point.
pub(super) async fn run(
    t: &mut TradingEpisode,
    turns: u64,
    tools: &dyn ToolModel,
    sink: &mut (dyn EventSink + Send),
) -> Result<(), SimError> {
    for _ in 0..turns {
        if t.is_done() {
            break;
        }
        match t.step(tools).await {
            Ok(r) => sink.emit(Event::of(&DecisionEvent {
                log: &r.log,
                portfolio: r.portfolio,
                value: r.value,
                done: r.done,
            })),
            Err(e) => {
                let error = AgentErrorEvent {
                    agent: t.config().agent_id.clone(),
                    step: t.decision_points_done() as u64 + 1,
                    error: e.to_string(),
                };
                sink.emit(Event::of(&error));
                return Err(e.into());
            }
        }
        if sink.wants_state() {
            sink.state(state(t));
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// Applies one of the trading ops (`portfolio_patch`, `case_data_inject`, `agent_swap`,
/// `agent_prompt_replace`); they produce no event.
pub(super) fn apply_op(t: &mut TradingEpisode, op: &Op) -> Result<Vec<Event>, SimError> {
    let op = trading_op(op)?;
    t.apply_op(&op).map_err(|e| SimError::BadOp(e.to_string()))?;
    Ok(Vec::new())
}

/// The trading op a shared [`Op`] stands for.
fn trading_op(op: &Op) -> Result<TradingOp, SimError> {
    Ok(match op {
        Op::PortfolioPatch { cash, positions } => TradingOp::PortfolioPatch {
            cash: *cash,
            positions: positions.iter().map(|(t, &n)| (t.clone(), n)).collect(),
        },
        Op::CaseDataInject { item } => TradingOp::CaseDataInject { item: item.clone() },
        Op::AgentSwap { agent } => TradingOp::AgentSwap { agent: (**agent).clone() },
        Op::AgentPromptReplace { system_prompt } => {
            TradingOp::AgentPromptReplace { system_prompt: system_prompt.clone() }
        }
        other => return Err(SimError::WrongOp("a trading episode", op_name(other))),
    })
}

/// The one agent, the trader: its spec as the plan and its remembered exchanges (the model's
/// replies and their tool results) as its memory.
pub(super) fn state(t: &TradingEpisode) -> NodeState {
    let mut memory = Vec::new();
    for ex in t.memory() {
        let reply = serde_json::to_string(&ex.reply).unwrap_or_default();
        memory.push(MemoryLine { role: "assistant".into(), content: reply });
        for r in &ex.results {
            memory.push(MemoryLine { role: "tool".into(), content: r.content.to_string() });
        }
    }
    NodeState {
        turns: t.decision_points_done() as u64,
        agents: vec![AgentState {
            name: t.config().agent_id.clone(),
            role: Some("trader".into()),
            plan_state: serde_json::to_value(t.agent()).unwrap_or(Value::Null),
            short_memory: memory,
            emotion: String::new(),
            properties: serde_json::Map::new(),
        }],
    }
}

/// The request an interview of `agent` sends at this state: the LLM trader's context and the
/// question; a rule-based trader or another name is refused.
pub(super) fn interview(t: &TradingEpisode, agent: &str, question: &str) -> Result<ChatRequest, SimError> {
    let name = &t.config().agent_id;
    if agent != name {
        return Err(SimError::Interview(format!("no agent '{agent}' here (agents: {name})")));
    }
    t.interview(question).ok_or_else(|| {
        SimError::Interview(format!(
            "agent '{agent}' is a rule-based trader ({}): it has no language model to interview",
            t.agent().kind()
        ))
    })
}

/// The LLM agent decides once per decision point (a tool round may add calls); the rule-based
/// agents call no model.
pub(super) fn call_shape(t: &TradingEpisode) -> super::CallShape {
    match t.agent() {
        crate::trading::agents::AgentSpec::Llm { .. } => {
            super::CallShape { least: 1, most: 1, why: "a decision point is one call of the LLM agent".into() }
        }
        _ => super::CallShape::none("a rule-based trading agent makes no LLM call"),
    }
}
