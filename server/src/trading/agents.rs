//! Trading agents: what an agent is, how it is invoked, and how its decision is extracted.
//!
//! Every agent answers an [`AgentInvocation`] the same way the seed's LLM agent does: with a
//! [`ModelReply`] holding tool calls, of which only `submit_decision` means anything. The rule-based
//! baselines (buy-and-hold, momentum, mean-reversion) compute their Decision from the Case alone
//! and emit one such call; the LLM agent puts the Case in a prompt, offers the one tool with the
//! JSON schema of a Decision, and asks a [`ToolModel`]. [`extract_decision`] then applies the
//! seed's rules uniformly: no call → hold, several → the last, invalid arguments → rejected.
//!
//! An agent is data ([`AgentSpec`]), so an episode can be cloned, stored and have its agent or
//! prompt swapped by a branch op. The model behind the LLM agent is passed in per call, like the
//! engine's `LlmClient`; [`MockToolModel`] is the deterministic offline dialect,
//! [`FnToolModel`] wraps any function (tests), and `trading::provider` has the real provider and
//! its replay.
//!
//! Requests, messages, tool specs and tool calls are the LLM layer's own (`llm::chat`): the
//! agent's earlier calls and their results stay tool messages all the way to the dialect.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::models::{AgentInvocation, Case, Decision, DecisionResult, Order, Side};
use crate::llm::chat::{ChatRequest, Message, Role, ToolCall, ToolChoice, ToolSpec};
use crate::llm::{BoxFuture, LlmError};

/// The name of the agent's only tool.
pub(crate) const SUBMIT_DECISION: &str = "submit_decision";

// ---------------------------------------------------------------------------------------------
// The tool-calling seam
// ---------------------------------------------------------------------------------------------

/// What a model (or a rule-based agent) answered: free text and tool calls (each with an id, so
/// its result can name it). Stored in the episode and, as JSON, in a provider run's recording.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    #[serde(default)]
    pub(crate) text: String,
    #[serde(default)]
    pub(crate) tool_calls: Vec<ToolCall>,
}

/// A chat model with tool calling. Implementations: [`MockToolModel`], [`FnToolModel`], and
/// `trading::provider`'s real provider and replay.
pub trait ToolModel: Send + Sync {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>>;
}

/// Any function from a request to a reply, as a [`ToolModel`].
pub struct FnToolModel<F>(pub F);

impl<F> ToolModel for FnToolModel<F>
where
    F: Fn(&ChatRequest) -> Result<ModelReply, LlmError> + Send + Sync,
{
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        let reply = (self.0)(request);
        Box::pin(async move { reply })
    }
}

/// The JSON schema of a Decision, as the `submit_decision` tool's parameters.
pub(crate) fn decision_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "orders": {
                "type": "array",
                "description": "Orders to execute together; an empty list holds.",
                "items": {
                    "type": "object",
                    "properties": {
                        "ticker": {"type": "string", "description": "One of the case's tickers."},
                        "side": {"type": "string", "enum": ["buy", "sell"]},
                        "quantity": {"type": "integer", "minimum": 1,
                                     "description": "Whole number of shares."}
                    },
                    "required": ["ticker", "side", "quantity"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["orders"],
        "additionalProperties": false
    })
}

/// The `submit_decision` tool offered to the LLM agent.
pub(crate) fn submit_decision_tool() -> ToolSpec {
    ToolSpec {
        name: SUBMIT_DECISION.into(),
        description: "Submit your orders for this decision point. All orders execute together \
                      at the case's current prices, sells before buys, or none do; the result \
                      says which, and why when rejected. Submit an empty list to hold."
            .into(),
        parameters: decision_schema(),
    }
}

// ---------------------------------------------------------------------------------------------
// Extraction
// ---------------------------------------------------------------------------------------------

/// The decision taken from an agent's tool calls.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Extracted {
    /// Index (in the reply's `tool_calls`) of the `submit_decision` call used; `None` when there
    /// was none.
    pub(crate) call: Option<usize>,
    /// The Decision, or why the call's arguments are not one.
    pub(crate) decision: Result<Decision, DecisionError>,
}

/// Why a `submit_decision` call's arguments are not a Decision (the step rejects it and tells
/// the agent this message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecisionError {
    /// The arguments came as a string that is not JSON (serde's message).
    #[error("arguments are not valid JSON: {0}")]
    NotJson(String),
    /// The JSON is not a Decision: the path of the field at fault (`None` for the arguments as
    /// a whole) and serde's message.
    #[error("{}{message}", path.as_deref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Invalid { path: Option<String>, message: String },
}

/// The seed's extraction rules: no `submit_decision` call → hold; several → the last one; a last
/// call whose arguments are not a valid Decision → an error (the step is rejected). Calls to other
/// tool names are ignored.
pub(crate) fn extract_decision(calls: &[ToolCall]) -> Extracted {
    let Some(idx) = calls.iter().rposition(|c| c.name == SUBMIT_DECISION) else {
        return Extracted { call: None, decision: Ok(Decision::hold()) };
    };
    Extracted { call: Some(idx), decision: parse_decision(&calls[idx].arguments) }
}

/// Parses tool-call arguments into a Decision; the error names the JSON path at fault.
pub(crate) fn parse_decision(arguments: &Value) -> Result<Decision, DecisionError> {
    let parsed;
    let value = match arguments {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|e| DecisionError::NotJson(e.to_string()))?;
            &parsed
        }
        v => v,
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        DecisionError::Invalid { path: (path != ".").then_some(path), message: e.inner().to_string() }
    })
}

/// The messages that answer each of `reply`'s tool calls once the decision has been handled: the
/// used `submit_decision` call gets `result`, earlier ones are marked superseded, other tools
/// unknown. A reply without a `submit_decision` call gets a user note that it counted as a hold.
pub(crate) fn tool_results(reply: &ModelReply, used: Option<usize>, result: &DecisionResult) -> Vec<Message> {
    let mut out = Vec::new();
    for (i, call) in reply.tool_calls.iter().enumerate() {
        let content = if Some(i) == used {
            serde_json::to_string(result).unwrap_or_default()
        } else if call.name == SUBMIT_DECISION {
            serde_json::to_string(&DecisionResult::rejected("superseded by a later submit_decision call; not executed"))
                .unwrap_or_default()
        } else {
            format!("unknown tool '{}'; the only tool is {SUBMIT_DECISION}", call.name)
        };
        out.push(Message::tool_result(call, content));
    }
    if used.is_none() {
        out.push(Message::new(
            Role::User,
            format!("No {SUBMIT_DECISION} call was made, so this decision point counted as a hold."),
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Agents
// ---------------------------------------------------------------------------------------------

pub use simtree_shared::trading::{AgentSpec, MAX_LOOKBACK};

/// The Decision of a rule-based agent for `case`; `None` for the LLM agent.
pub(crate) fn rule_decision(spec: &AgentSpec, case: &Case) -> Option<Decision> {
    Some(match *spec {
        AgentSpec::BuyAndHold => buy_and_hold(case),
        AgentSpec::Momentum { lookback } => momentum(case, lookback),
        AgentSpec::MeanReversion { lookback, band } => mean_reversion(case, lookback, band),
        AgentSpec::Llm { .. } => return None,
    })
}
/// The default system prompt of the LLM agent.
pub(crate) const DEFAULT_SYSTEM_PROMPT: &str = "\
You manage a stock portfolio in a day-by-day trading simulation. At each decision point you \
receive a case: the tradable tickers, recent daily price bars with a summary of the period since \
your last decision, any dated information items, and your current cash and share positions.

Decide by calling the submit_decision tool exactly once. Rules:
- Trade only the tickers listed in the case, in whole shares, long only (you cannot sell shares \
you do not hold).
- Orders fill at each ticker's current_price. Sells execute before buys, so sale proceeds can pay \
for purchases in the same decision.
- Either every order executes or none does: one invalid order rejects the whole decision. The \
tool's result tells you which happened and why.
- An empty list of orders means you hold. If you make no call, you hold.
Think briefly about trend, risk and the information items, then submit.";

/// The prompt text that carries the Case (the mock dialect reads the JSON back from it).
pub(crate) fn case_message(invocation: &AgentInvocation) -> String {
    let case = serde_json::to_string(&invocation.case.for_agent()).unwrap_or_default();
    let remaining = match invocation.steps_remaining {
        Some(0) => "This is the last decision point.".to_owned(),
        Some(n) => format!("{n} more decision points follow this one."),
        None => String::new(),
    };
    format!("Decision point {}. {remaining}\nCase:\n```json\n{case}\n```", invocation.case.case_id)
}

/// One earlier decision point as the LLM agent remembers it: the model's reply and the answers
/// to its tool calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    pub(crate) case_id: String,
    pub(crate) reply: ModelReply,
    pub results: Vec<Message>,
}

/// The request the LLM agent sends: system prompt, the remembered exchanges (their cases are not
/// repeated), then the current case.
pub(crate) fn llm_request(system_prompt: &str, history: &[Arc<Exchange>], invocation: &AgentInvocation) -> ChatRequest {
    request_ending(system_prompt, history, case_message(invocation))
}

/// System prompt, the remembered exchanges, then `last` as the user's turn; the tool offered.
fn request_ending(system_prompt: &str, history: &[Arc<Exchange>], last: String) -> ChatRequest {
    let mut messages = vec![Message::new(Role::System, system_prompt)];
    for ex in history {
        messages
            .push(Message::new(Role::User, format!("Decision point {} (its case is no longer shown).", ex.case_id)));
        messages.push(Message::assistant_calls(ex.reply.text.as_str(), ex.reply.tool_calls.clone()));
        messages.extend(ex.results.iter().cloned());
    }
    messages.push(Message::new(Role::User, last));
    ChatRequest { messages, tools: vec![submit_decision_tool()], ..ChatRequest::default() }
}

/// The request an interview of the LLM agent sends: exactly the context its next decision
/// would see (its system prompt and the exchanges it remembers), then `question` as a user turn
/// in place of a case. The tool stays offered, as in every request the agent has seen, but no
/// call is allowed: an interview decides nothing. `None` for a rule-based agent, which has no
/// model to ask.
pub(crate) fn interview_request(spec: &AgentSpec, history: &[Arc<Exchange>], question: &str) -> Option<ChatRequest> {
    let AgentSpec::Llm { system_prompt, history: keep } = spec else {
        return None;
    };
    let prompt = system_prompt.as_deref().unwrap_or(DEFAULT_SYSTEM_PROMPT);
    let from = history.len().saturating_sub(*keep);
    let turn = format!(
        "{INTERVIEW_MARK} {question}\nAnswer the interviewer in your own words. This is a \
         question, not a decision point: submit nothing."
    );
    let mut request = request_ending(prompt, &history[from..], turn);
    request.tool_choice = ToolChoice::None;
    Some(request)
}

/// How an interview turn starts (the mock recognises it by this).
pub(crate) const INTERVIEW_MARK: &str = "[Interview]";

/// Invokes the agent `spec` at one decision point. Rule-based agents answer at once with one
/// `submit_decision` call; the LLM agent asks `model` with `history` as its memory.
pub(crate) async fn invoke(
    spec: &AgentSpec,
    history: &[Arc<Exchange>],
    invocation: &AgentInvocation,
    model: &dyn ToolModel,
) -> Result<ModelReply, LlmError> {
    if let Some(decision) = rule_decision(spec, &invocation.case) {
        return Ok(ModelReply {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: Some(format!("{}-{}", spec.kind(), invocation.case.case_id)),
                name: SUBMIT_DECISION.into(),
                arguments: serde_json::to_value(&decision).unwrap_or_default(),
            }],
        });
    }
    let AgentSpec::Llm { system_prompt, history: keep } = spec else {
        unreachable!("every other kind has a rule decision")
    };
    let prompt = system_prompt.as_deref().unwrap_or(DEFAULT_SYSTEM_PROMPT);
    let from = history.len().saturating_sub(*keep);
    let request = llm_request(prompt, &history[from..], invocation);
    model.complete(&request).await
}

/// Whole shares of each ticker bought by splitting `cash` equally among `prices`.
pub(crate) fn equal_split(cash: f64, prices: &[(&str, f64)]) -> Vec<(String, i64)> {
    if prices.is_empty() || cash <= 0.0 {
        return Vec::new();
    }
    let budget = cash / prices.len() as f64;
    prices
        .iter()
        .filter(|(_, p)| *p > 0.0)
        .map(|(t, p)| (t.to_string(), (budget / p).floor() as i64))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Sells every share of `sells`, then spends the cash after the sales equally on `buys`.
fn rebalance(case: &Case, sells: &[&str], buys: &[&str]) -> Decision {
    let held = &case.portfolio;
    let mut orders = Vec::new();
    let mut cash = held.cash;
    for &t in sells {
        let (n, Some(p)) = (held.shares(t), case.price(t)) else {
            continue;
        };
        if n > 0 {
            orders.push(Order::new(t, Side::Sell, n));
            cash += n as f64 * p;
        }
    }
    let priced: Vec<(&str, f64)> = buys.iter().filter_map(|&t| case.price(t).map(|p| (t, p))).collect();
    for (t, n) in equal_split(cash, &priced) {
        orders.push(Order::new(t, Side::Buy, n));
    }
    Decision { orders }
}

fn buy_and_hold(case: &Case) -> Decision {
    if case.portfolio.positions.values().any(|&n| n != 0) {
        return Decision::hold();
    }
    let all: Vec<&str> = case.tickers.iter().map(String::as_str).collect();
    rebalance(case, &[], &all)
}

/// The last `n` closes of `ticker` in the case, oldest first (`None` with fewer bars).
fn closes(case: &Case, ticker: &str, n: usize) -> Option<Vec<f64>> {
    let bars = &case.stock_data.get(ticker)?.daily_bars;
    (bars.len() >= n).then(|| bars[bars.len() - n..].iter().map(|b| b.close).collect())
}

fn momentum(case: &Case, lookback: usize) -> Decision {
    let (mut sells, mut buys) = (Vec::new(), Vec::new());
    for t in &case.tickers {
        let Some(c) = closes(case, t, lookback.saturating_add(1)) else {
            continue;
        };
        let change = c[c.len() - 1] / c[0] - 1.0;
        let held = case.portfolio.shares(t) > 0;
        if held && change < 0.0 {
            sells.push(t.as_str());
        } else if !held && change > 0.0 {
            buys.push(t.as_str());
        }
    }
    rebalance(case, &sells, &buys)
}

fn mean_reversion(case: &Case, lookback: usize, band: f64) -> Decision {
    let (mut sells, mut buys) = (Vec::new(), Vec::new());
    for t in &case.tickers {
        let Some(c) = closes(case, t, lookback) else {
            continue;
        };
        let mean = c.iter().sum::<f64>() / c.len() as f64;
        let sd = (c.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / c.len() as f64).sqrt();
        let last = c[c.len() - 1];
        let held = case.portfolio.shares(t) > 0;
        if held && last >= mean {
            sells.push(t.as_str());
        } else if !held && sd > 0.0 && (last - mean) / sd < -band {
            buys.push(t.as_str());
        }
    }
    rebalance(case, &sells, &buys)
}

// ---------------------------------------------------------------------------------------------
// The mock dialect
// ---------------------------------------------------------------------------------------------

/// A deterministic offline model that always makes one valid `submit_decision` call.
///
/// It reads the case JSON back from the last user message and applies a small rule on each
/// ticker's interval summary: sell a held ticker that fell more than 1% over the interval, and buy
/// the best riser not yet held with 30% of the cash on hand. Its orders never break an execution
/// rule, so episodes with the LLM agent run end to end offline. A last message without a case gets
/// a text reply and no call (a hold).
#[derive(Clone, Copy, Debug, Default)]
pub struct MockToolModel;

impl ToolModel for MockToolModel {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        let reply = mock_reply(request);
        Box::pin(async move { Ok(reply) })
    }
}

/// Tickers named by news items of the case, split by the tone of the item.
fn news_tickers(case: &Value, tickers: &[String]) -> (Vec<String>, Vec<String>) {
    const BAD: [&str; 8] = ["recall", "lawsuit", "miss", "fraud", "downgrade", "loss", "probe", "plunge"];
    const GOOD: [&str; 6] = ["beat", "record", "upgrade", "surge", "approval", "growth"];
    let (mut bad, mut good) = (Vec::new(), Vec::new());
    for item in case["case_data"]["items"].as_array().into_iter().flatten() {
        if item["kind"] != "news" {
            continue;
        }
        let text = item["content"].as_str().unwrap_or("").to_lowercase();
        for t in tickers {
            let named = text.contains(&t.to_lowercase()) || company(t).is_some_and(|c| text.contains(c));
            if !named {
                continue;
            }
            if BAD.iter().any(|w| text.contains(w)) {
                bad.push(t.clone());
            } else if GOOD.iter().any(|w| text.contains(w)) {
                good.push(t.clone());
            }
        }
    }
    (bad, good)
}

/// The company name a headline would use for a ticker of the shipped data.
fn company(ticker: &str) -> Option<&'static str> {
    match ticker {
        "AAPL" => Some("apple"),
        "GOOG" => Some("google"),
        "IBM" => Some("ibm"),
        "MSFT" => Some("microsoft"),
        _ => None,
    }
}

fn mock_reply(request: &ChatRequest) -> ModelReply {
    let last_user =
        request.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.as_ref()).unwrap_or("");
    let case = last_user
        .split_once("```json\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .and_then(|(json, _)| serde_json::from_str::<Value>(json).ok());
    if let Some(question) = last_user.strip_prefix(INTERVIEW_MARK) {
        return mock_interview(request, question);
    }
    let Some(case) = case else {
        return ModelReply { text: "Mock: no case found in the prompt; holding.".into(), tool_calls: Vec::new() };
    };
    let case_id = case["case_id"].as_str().unwrap_or("?");
    let cash = case["portfolio"]["cash"].as_f64().unwrap_or(0.0);
    let held = |t: &str| case["portfolio"]["positions"][t].as_i64().unwrap_or(0);
    let mut moves: Vec<(String, f64, f64)> = Vec::new(); // ticker, interval change, price
    if let Some(stocks) = case["stock_data"].as_object() {
        for (t, sd) in stocks {
            let s = &sd["interval_summary"];
            let (Some(open), Some(close), Some(price)) =
                (s["open"].as_f64(), s["close"].as_f64(), sd["current_price"].as_f64())
            else {
                continue;
            };
            if open > 0.0 && price > 0.0 {
                moves.push((t.clone(), close / open - 1.0, price));
            }
        }
    }
    // News naming a ticker moves the mock like a headline would a nervous trader: bad news sells
    // the ticker (and keeps it off the buy list), good news makes it the one to buy.
    let (bad, good) = news_tickers(&case, &moves.iter().map(|m| m.0.clone()).collect::<Vec<_>>());
    let mut orders = Vec::new();
    for (t, change, _) in &moves {
        if held(t) > 0 && (*change < -0.01 || bad.contains(t)) {
            orders.push(Order::new(t.as_str(), Side::Sell, held(t)));
        }
    }
    let best = moves
        .iter()
        .filter(|(t, change, _)| held(t) == 0 && !bad.contains(t) && (*change > 0.0 || good.contains(t)))
        .max_by(|a, b| {
            (good.contains(&a.0), a.1).partial_cmp(&(good.contains(&b.0), b.1)).unwrap_or(std::cmp::Ordering::Equal)
        });
    if let Some((t, _, price)) = best {
        let n = (cash * 0.3 / price).floor() as i64;
        if n > 0 {
            orders.push(Order::new(t.as_str(), Side::Buy, n));
        }
    }
    let summary = if orders.is_empty() {
        "nothing compelling, holding".to_owned()
    } else {
        orders.iter().map(|o| format!("{} {} {}", o.side.as_str(), o.quantity, o.ticker)).collect::<Vec<_>>().join(", ")
    };
    ModelReply {
        text: format!("Mock analysis of {case_id}: {summary}."),
        tool_calls: vec![ToolCall {
            id: Some(format!("mock-{case_id}")),
            name: SUBMIT_DECISION.into(),
            arguments: json!({ "orders": orders }),
        }],
    }
}

/// The mock's answer to an interview: its last decision as it wrote it, in words; no call.
fn mock_interview(request: &ChatRequest, question: &str) -> ModelReply {
    let question = question.lines().next().unwrap_or("").trim();
    let last = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.content.is_empty())
        .map_or_else(|| "I have made no decision yet".to_owned(), |m| format!("My last word was: {}", m.content));
    ModelReply { text: format!("Mock trader, asked \"{question}\": {last}"), tool_calls: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trading::execution::execute_decision;
    use crate::trading::models::{CaseData, PortfolioSnapshot, PricePoint, StockData};

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall { id: Some(format!("c-{name}")), name: name.into(), arguments: args }
    }

    #[test]
    fn no_call_is_a_hold() {
        let e = extract_decision(&[]);
        assert_eq!(e, Extracted { call: None, decision: Ok(Decision::hold()) });
        let e = extract_decision(&[call("get_case", json!({}))]);
        assert_eq!(e.call, None, "other tools do not count");
        assert_eq!(e.decision, Ok(Decision::hold()));
    }

    #[test]
    fn several_calls_use_the_last() {
        let calls = [
            call(SUBMIT_DECISION, json!({"orders": [{"ticker": "A", "side": "buy", "quantity": 1}]})),
            call(SUBMIT_DECISION, json!({"orders": [{"ticker": "B", "side": "sell", "quantity": 2}]})),
            call("other", json!({})),
        ];
        let e = extract_decision(&calls);
        assert_eq!(e.call, Some(1));
        assert_eq!(e.decision.unwrap().orders, vec![Order::new("B", Side::Sell, 2)]);
    }

    #[test]
    fn invalid_last_call_is_an_error_even_after_a_valid_one() {
        let calls = [
            call(SUBMIT_DECISION, json!({"orders": []})),
            call(SUBMIT_DECISION, json!({"orders": [{"ticker": "A", "side": "hold", "quantity": 1}]})),
        ];
        let e = extract_decision(&calls);
        assert_eq!(e.call, Some(1));
        let msg = e.decision.unwrap_err().to_string();
        assert!(msg.starts_with("orders[0].side: unknown variant `hold`"), "{msg}");
    }

    #[test]
    fn string_arguments_are_parsed_and_bad_json_is_reported() {
        let ok = extract_decision(&[call(
            SUBMIT_DECISION,
            json!(r#"{"orders": [{"ticker": "A", "side": "buy", "quantity": 3}]}"#),
        )]);
        assert_eq!(ok.decision.unwrap().orders[0].quantity, 3);
        let bad = extract_decision(&[call(SUBMIT_DECISION, json!("{orders: oops"))]);
        assert!(matches!(bad.decision, Err(DecisionError::NotJson(_))));
        let missing = extract_decision(&[call(SUBMIT_DECISION, json!({"orders": [{"ticker": "A"}]}))]);
        assert_eq!(missing.decision.unwrap_err().to_string(), "orders[0]: missing field `side`");
        let extra = extract_decision(&[call(SUBMIT_DECISION, json!({"orders": [], "why": "x"}))]);
        assert!(extra.decision.unwrap_err().to_string().contains("unknown field `why`"));
        let not_object = extract_decision(&[call(SUBMIT_DECISION, json!([1]))]);
        assert!(matches!(not_object.decision, Err(DecisionError::Invalid { .. })));
    }

    #[test]
    fn tool_results_answer_every_call() {
        let reply = ModelReply {
            text: String::new(),
            tool_calls: vec![
                call(SUBMIT_DECISION, json!({"orders": []})),
                call("peek", json!({})),
                ToolCall { id: Some("last".into()), ..call(SUBMIT_DECISION, json!({"orders": []})) },
            ],
        };
        let result = DecisionResult::rejected("rejected, nothing executed: x");
        let msgs = tool_results(&reply, Some(2), &result);
        assert_eq!(msgs.len(), 3);
        assert!(msgs[0].content.contains("superseded"));
        assert!(msgs[1].content.contains("unknown tool 'peek'"));
        assert_eq!(msgs[2].tool_call_id(), Some("last"));
        let back: DecisionResult = serde_json::from_str(&msgs[2].content).unwrap();
        assert_eq!(back, result);
        let none = tool_results(&ModelReply::default(), None, &result);
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].role, Role::User);
    }

    #[test]
    fn agent_specs_parse_with_defaults_and_reject_unknown_fields() {
        let m: AgentSpec = serde_json::from_value(json!({"kind": "momentum"})).unwrap();
        assert_eq!(m, AgentSpec::Momentum { lookback: 10 });
        let b: AgentSpec = serde_json::from_value(json!({"kind": "buy_and_hold"})).unwrap();
        assert_eq!(b, AgentSpec::BuyAndHold);
        let l: AgentSpec = serde_json::from_value(json!({"kind": "llm", "system_prompt": "Be bold."})).unwrap();
        assert_eq!(l, AgentSpec::Llm { system_prompt: Some("Be bold.".into()), history: 2 });
        let err =
            serde_json::from_value::<AgentSpec>(json!({"kind": "momentum", "lookbak": 3})).unwrap_err().to_string();
        assert!(err.contains("unknown field `lookbak`"), "{err}");
        for spec in [b, m, l, AgentSpec::from_kind("mean-reversion").unwrap()] {
            let back: AgentSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
            assert_eq!(back, spec);
            assert_eq!(AgentSpec::from_kind(spec.kind()).unwrap().kind(), spec.kind());
        }
        assert!(AgentSpec::from_kind("oracle").unwrap_err().to_string().contains("known: buy_and_hold"));
        assert!(AgentSpec::Momentum { lookback: 0 }.validate().is_err());
        assert!(AgentSpec::MeanReversion { lookback: 5, band: -1.0 }.validate().is_err());
    }

    /// A case over tickers with the given closes (oldest first) and portfolio.
    fn case_with(series: &[(&str, &[f64])], cash: f64, held: &[(&str, i64)]) -> Case {
        let stock_data = series
            .iter()
            .map(|(t, closes)| {
                let bars: Vec<PricePoint> = closes
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| PricePoint::daily(&format!("2020-01-{:02}", i + 1), c, c, c, c, 1))
                    .collect();
                let summary = crate::trading::models::IntervalPriceSummary::of(&bars);
                let price = *closes.last().unwrap();
                (t.to_string(), StockData { current_price: price, daily_bars: bars, interval_summary: summary })
            })
            .collect();
        Case {
            case_id: "e:0".into(),
            tickers: series.iter().map(|(t, _)| t.to_string()).collect(),
            case_data: CaseData::default(),
            stock_data,
            portfolio: PortfolioSnapshot { cash, positions: held.iter().map(|(t, n)| (t.to_string(), *n)).collect() },
            decision_point_idx: Some(0),
            information_cutoff_timestamp: Some("2020-01-09".into()),
        }
    }

    #[test]
    fn buy_and_hold_invests_equally_once() {
        let c = case_with(&[("A", &[10.0]), ("B", &[30.0])], 1000.0, &[]);
        let d = rule_decision(&AgentSpec::BuyAndHold, &c).unwrap();
        assert_eq!(d.orders, vec![Order::new("A", Side::Buy, 50), Order::new("B", Side::Buy, 16)]);
        let c = case_with(&[("A", &[10.0]), ("B", &[30.0])], 20.0, &[("A", 50)]);
        assert_eq!(rule_decision(&AgentSpec::BuyAndHold, &c).unwrap(), Decision::hold());
    }

    #[test]
    fn momentum_sells_fallers_and_buys_risers_with_the_proceeds() {
        // A fell over 2 bars and is held; B rose and is not held; C rose and is held (kept).
        let c = case_with(
            &[("A", &[12.0, 11.0, 10.0]), ("B", &[20.0, 21.0, 25.0]), ("C", &[5.0, 5.0, 6.0])],
            0.0,
            &[("A", 10), ("C", 3)],
        );
        let d = rule_decision(&AgentSpec::Momentum { lookback: 2 }, &c).unwrap();
        assert_eq!(d.orders, vec![Order::new("A", Side::Sell, 10), Order::new("B", Side::Buy, 4)]);
        let (r, _) = execute_decision(&d, &c, &c.portfolio);
        assert!(r.is_accepted(), "{}", r.message);
        // Too few bars: no signal.
        let d = rule_decision(&AgentSpec::Momentum { lookback: 5 }, &c).unwrap();
        assert_eq!(d, Decision::hold());
    }

    #[test]
    fn mean_reversion_buys_dips_and_exits_at_the_mean() {
        // A: mean 10, last 7 is far below; B held and back above its mean.
        let c = case_with(&[("A", &[11.0, 11.0, 11.0, 7.0]), ("B", &[10.0, 9.0, 9.0, 12.0])], 100.0, &[("B", 2)]);
        let d = rule_decision(&AgentSpec::MeanReversion { lookback: 4, band: 1.0 }, &c).unwrap();
        assert_eq!(d.orders, vec![Order::new("B", Side::Sell, 2), Order::new("A", Side::Buy, 17)]);
        let (r, _) = execute_decision(&d, &c, &c.portfolio);
        assert!(r.is_accepted(), "{}", r.message);
        let strict = rule_decision(&AgentSpec::MeanReversion { lookback: 4, band: 2.0 }, &c).unwrap();
        assert_eq!(strict.orders, vec![Order::new("B", Side::Sell, 2)], "A is within 2 sd");
    }

    fn invocation(case: Case) -> AgentInvocation {
        AgentInvocation { case, episode_id: "e".into(), agent_id: "llm".into(), steps_remaining: Some(3) }
    }

    #[test]
    fn llm_request_carries_the_case_without_metadata_and_one_tool() {
        let c = case_with(&[("A", &[10.0, 11.0])], 1000.0, &[]);
        let history = vec![Arc::new(Exchange {
            case_id: "e:-1".into(),
            reply: ModelReply { text: "hi".into(), tool_calls: vec![call(SUBMIT_DECISION, json!({"orders": []}))] },
            results: vec![Message::tool_result(&call(SUBMIT_DECISION, json!({})), "{}")],
        })];
        let req = llm_request(DEFAULT_SYSTEM_PROMPT, &history, &invocation(c.clone()));
        assert_eq!(req.tools.len(), 1);
        assert_eq!(req.tools[0].name, SUBMIT_DECISION);
        assert_eq!(req.tools[0].parameters, decision_schema());
        let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
        use Role::*;
        assert_eq!(roles, [System, User, Assistant, Tool, User]);
        let last = &req.messages[4].content;
        assert!(last.starts_with("Decision point e:0. 3 more decision points follow this one."));
        let json = last.split_once("```json\n").unwrap().1.split_once("\n```").unwrap().0;
        let shown: Value = serde_json::from_str(json).unwrap();
        assert_eq!(shown, serde_json::to_value(c.for_agent()).unwrap());
        assert!(shown.get("information_cutoff_timestamp").is_none());
        assert!(shown.get("decision_point_idx").is_none());
    }

    #[test]
    fn llm_agent_keeps_only_its_history_window() {
        let c = case_with(&[("A", &[10.0, 11.0])], 1000.0, &[]);
        let history: Vec<Arc<Exchange>> = (0..5)
            .map(|i| Arc::new(Exchange { case_id: format!("e:{i}"), reply: ModelReply::default(), results: vec![] }))
            .collect();
        let seen = std::sync::Mutex::new(Vec::new());
        let model = FnToolModel(|req: &ChatRequest| {
            seen.lock().unwrap().push(req.messages.len());
            Ok(ModelReply::default())
        });
        let spec = AgentSpec::Llm { system_prompt: Some("Custom.".into()), history: 2 };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let reply = rt.block_on(invoke(&spec, &history, &invocation(c), &model)).unwrap();
        assert_eq!(reply, ModelReply::default());
        // system + 2 × (user, assistant) + the case.
        assert_eq!(*seen.lock().unwrap(), [6]);
    }

    #[test]
    fn mock_model_makes_one_valid_call() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        // A rose (best riser, bought with 30% of cash); B held and fell 10% (sold).
        let c = case_with(&[("A", &[10.0, 12.0]), ("B", &[50.0, 45.0])], 1000.0, &[("B", 4)]);
        let req = llm_request(DEFAULT_SYSTEM_PROMPT, &[], &invocation(c.clone()));
        let reply = rt.block_on(MockToolModel.complete(&req)).unwrap();
        assert_eq!(reply.tool_calls.len(), 1);
        let e = extract_decision(&reply.tool_calls);
        let d = e.decision.unwrap();
        assert_eq!(d.orders, vec![Order::new("B", Side::Sell, 4), Order::new("A", Side::Buy, 25)]);
        assert!(execute_decision(&d, &c, &c.portfolio).0.is_accepted());
        assert_eq!(reply.text, "Mock analysis of e:0: sell 4 B, buy 25 A.");
        // No case in the prompt: no call.
        let empty = ChatRequest::new(vec![Message::new(Role::User, "hello")]);
        assert!(rt.block_on(MockToolModel.complete(&empty)).unwrap().tool_calls.is_empty());
    }

    #[test]
    fn rule_agents_answer_with_one_submit_decision_call() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let c = case_with(&[("A", &[10.0])], 100.0, &[]);
        let failing = FnToolModel(|_: &ChatRequest| Err(LlmError::Request("must not be called".into())));
        let reply = rt.block_on(invoke(&AgentSpec::BuyAndHold, &[], &invocation(c), &failing)).unwrap();
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.tool_calls[0].id.as_deref(), Some("buy_and_hold-e:0"));
        assert_eq!(extract_decision(&reply.tool_calls).decision.unwrap().orders, vec![Order::new("A", Side::Buy, 10)]);
    }
}
