//! The provider clients against local provider-shaped servers (axum on 127.0.0.1:0): the exact
//! request each dialect sends (method, path, headers, JSON body with tools and schemas), every
//! failure path (timeout, 429 + Retry-After, 5xx then success, malformed JSON, empty choices,
//! refusals and safety blocks, auth errors, a dead port), the shared concurrency and rate limits,
//! token usage, and a full werewolf run through the OpenAI dialect.
//! Also: the structured-output form detected from a refusal and remembered per endpoint, a reply
//! cut at max_tokens, the response size cap, and key redaction. The checks against a real model
//! are in `tests/tests/real_llm.rs`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use simtree::embedded::assets_dir;
use simtree::engine::memory::{Message, Role};
use simtree::engine::simulator::event_json;
use simtree::llm::cache;
use simtree::llm::chat::CacheHow;
use simtree::llm::config::OpenAiJsonMode;
use simtree::llm::ledger::{Ledger, MeteredClient};
use simtree::llm::price::PriceTable;
use simtree::llm::provider::structured_response;
use simtree::llm::record::LlmRecord;
use simtree::llm::{
    ChatProvider, ChatRequest, Dialect, JsonSchema, LlmClient, LlmConfig, LlmError, LlmState, ProviderClient,
    ProviderPool, ToolChoice, ToolSpec, build_provider, structured,
};
use simtree::scenario::Scenario;

const KEY: &str = "sk-test-SECRET-0123";

/// One canned answer of the fake server.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn ok(body: Value) -> Reply {
    Reply { status: 200, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
}

fn status(code: u16, body: &str) -> Reply {
    Reply { status: code, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
}

impl Reply {
    fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }

    fn after(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
}

/// What the fake server saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Value,
    at: Instant,
}

/// How the fake answers: a script (the last entry repeats), or a function of the request body.
enum Answer {
    Script(VecDeque<Reply>),
    Compute(Box<dyn Fn(&Value) -> Reply + Send>),
}

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Arc<Mutex<Answer>>,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

struct Server {
    base: String,
    fake: Fake,
}

impl Server {
    fn seen(&self) -> Vec<Seen> {
        self.fake.seen.lock().unwrap().clone()
    }

    fn peak(&self) -> usize {
        self.fake.peak.load(Ordering::SeqCst)
    }
}

async fn handle(State(f): State<Fake>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let now = f.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    f.peak.fetch_max(now, Ordering::SeqCst);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    f.seen.lock().unwrap().push(Seen {
        method,
        path: uri.to_string(),
        headers,
        body: body.clone(),
        at: Instant::now(),
    });
    let reply = match &mut *f.answer.lock().unwrap() {
        Answer::Script(q) if q.len() > 1 => q.pop_front().unwrap(),
        Answer::Script(q) => q.front().cloned().expect("a non-empty script"),
        Answer::Compute(g) => g(&body),
    };
    tokio::time::sleep(reply.delay).await;
    f.in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut resp = (StatusCode::from_u16(reply.status).unwrap(), [("content-type", "application/json")], reply.body)
        .into_response();
    for (k, v) in reply.headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

async fn serve(answer: Answer) -> Server {
    let fake = Fake {
        seen: Arc::default(),
        answer: Arc::new(Mutex::new(answer)),
        in_flight: Arc::default(),
        peak: Arc::default(),
    };
    let app = axum::Router::new().fallback(handle).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { base: format!("http://{addr}"), fake }
}

async fn script(replies: Vec<Reply>) -> Server {
    serve(Answer::Script(replies.into())).await
}

/// A config aimed at the fake server with fast retries.
fn config(dialect: Dialect, server: &Server, prefix: &str) -> LlmConfig {
    let mut c = LlmConfig::for_dialect(dialect);
    c.model = format!("{}-test", dialect.as_str());
    c.base_url = Some(format!("{}{prefix}", server.base));
    c.api_key = simtree::llm::ApiKey::new(KEY);
    c.timeout_s = 5.0;
    c.max_retries = 2;
    c.retry_backoff_s = 0.01;
    c
}

fn header<'a>(s: &'a Seen, name: &str) -> &'a str {
    s.headers.get(name).unwrap_or_else(|| panic!("no {name} header in {:?}", s.headers)).to_str().unwrap()
}

fn vote_tool() -> ToolSpec {
    ToolSpec {
        name: "vote".into(),
        description: "Vote to lynch a player.".into(),
        parameters: json!({"type": "object", "properties": {"target": {"type": "string"}},
                           "required": ["target"], "additionalProperties": false}),
    }
}

fn decision_schema() -> JsonSchema {
    JsonSchema::new(
        "decision",
        json!({"type": "object",
               "properties": {"action": {"type": "string", "enum": ["buy", "sell", "hold"]},
                              "qty": {"type": ["integer", "null"]}},
               "required": ["action", "qty"], "additionalProperties": false}),
    )
}

fn conversation() -> Vec<Message> {
    vec![
        Message::new(Role::System, "You are Ann."),
        Message::new(Role::User, "Hello."),
        Message::new(Role::Assistant, "Hi."),
        Message::new(Role::User, "Your move?"),
    ]
}

fn openai_text(text: &str) -> Value {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}})
}

async fn chat(p: &dyn ChatProvider, req: &ChatRequest) -> Result<simtree::llm::ChatResponse, LlmError> {
    p.chat(req, &mut LlmState::default()).await
}

async fn text_chat(p: Arc<dyn ChatProvider>) -> Result<String, LlmError> {
    let client = ProviderClient::new(p);
    LlmClient::chat(&client, &conversation(), &mut LlmState::default()).await
}

// ---------------------------------------------------------------------------------------------
// The exact requests.

#[tokio::test]
async fn openai_sends_chat_completions_with_tools_and_a_strict_schema() {
    let server = script(vec![ok(json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "vote", "arguments": "{\"target\": \"Pia\"}"}}]}}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
    }))])
    .await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.frequency_penalty = 0.5;
    let p = build_provider(&c).unwrap();
    let mut req = ChatRequest::new(conversation());
    req.tools = vec![vote_tool()];
    req.tool_choice = ToolChoice::Tool("vote".into());
    req.response_schema = Some(decision_schema());
    req.max_tokens = Some(99);
    let r = chat(p.as_ref(), &req).await.unwrap();

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(s.method, Method::POST);
    assert_eq!(s.path, "/v1/chat/completions");
    assert_eq!(header(s, "authorization"), format!("Bearer {KEY}"));
    assert_eq!(header(s, "content-type"), "application/json");
    assert_eq!(
        s.body,
        json!({
            "model": "openai-test",
            "messages": [
                {"role": "system", "content": "You are Ann."},
                {"role": "user", "content": "Hello."},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "Your move?"}
            ],
            "temperature": 0.7,
            "top_p": 1.0,
            "max_tokens": 99,
            "frequency_penalty": 0.5,
            "tools": [{"type": "function", "function": {
                "name": "vote", "description": "Vote to lynch a player.",
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}},
                               "required": ["target"], "additionalProperties": false}}}],
            "tool_choice": {"type": "function", "function": {"name": "vote"}},
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "decision",
                "schema": decision_schema().schema,
                "strict": true}}
        })
    );
    assert_eq!(r.text, "");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "vote");
    assert_eq!(r.tool_calls[0].arguments, json!({"target": "Pia"}));
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (42, 7));
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn openai_plain_requests_carry_no_tools_and_no_auth_without_a_key() {
    let server = script(vec![ok(openai_text("  Hi there.  "))]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1/");
    c.api_key = None;
    let text = text_chat(build_provider(&c).unwrap()).await.unwrap();
    assert_eq!(text, "Hi there.");
    let s = &server.seen()[0];
    assert_eq!(s.path, "/v1/chat/completions");
    assert!(s.headers.get("authorization").is_none());
    let keys: Vec<&str> = s.body.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["model", "messages", "temperature", "top_p", "max_tokens"]);
}

#[tokio::test]
async fn openai_json_object_mode_for_llama_cpp_python() {
    let server = script(vec![ok(openai_text("{\"action\": \"hold\", \"qty\": null}"))]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.openai_json_mode = OpenAiJsonMode::JsonObject;
    let p = build_provider(&c).unwrap();
    let v = structured(p.as_ref(), ChatRequest::new(conversation()), decision_schema(), &mut LlmState::default())
        .await
        .unwrap();
    assert_eq!(v, json!({"action": "hold", "qty": null}));
    assert_eq!(
        server.seen()[0].body["response_format"],
        json!({"type": "json_object", "schema": decision_schema().schema})
    );
}

#[tokio::test]
async fn gemini_sends_generate_content_with_system_instruction_schema_and_functions() {
    let server = script(vec![ok(json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "{\"action\": \"buy\", \"qty\": 3}"}]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 9, "totalTokenCount": 39}
    }))])
    .await;
    let c = config(Dialect::Gemini, &server, "/v1beta");
    let p = build_provider(&c).unwrap();
    let mut req = ChatRequest::new(conversation());
    req.tools = vec![vote_tool()];
    req.tool_choice = ToolChoice::Required;
    req.temperature = Some(0.1);
    let (v, resp) = structured_response(p.as_ref(), req, decision_schema(), &mut LlmState::default()).await.unwrap();
    assert_eq!(v, json!({"action": "buy", "qty": 3}));
    assert_eq!((resp.usage.prompt_tokens, resp.usage.completion_tokens), (30, 9));

    let s = &server.seen()[0];
    assert_eq!(s.method, Method::POST);
    assert_eq!(s.path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(header(s, "x-goog-api-key"), KEY);
    assert!(s.headers.get("authorization").is_none());
    assert_eq!(
        s.body,
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Hello."}]},
                {"role": "model", "parts": [{"text": "Hi."}]},
                {"role": "user", "parts": [{"text": "Your move?"}]}
            ],
            "systemInstruction": {"parts": [{"text": "You are Ann."}]},
            "generationConfig": {
                "temperature": 0.1, "topP": 1.0, "maxOutputTokens": 1024,
                "responseMimeType": "application/json",
                "responseSchema": {
                    "type": "object",
                    "properties": {"action": {"type": "string", "enum": ["buy", "sell", "hold"]},
                                   "qty": {"type": "integer", "nullable": true}},
                    "propertyOrdering": ["action", "qty"],
                    "required": ["action", "qty"]
                }
            },
            "tools": [{"functionDeclarations": [{
                "name": "vote", "description": "Vote to lynch a player.",
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}},
                               "propertyOrdering": ["target"], "required": ["target"]}}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}
        })
    );
    assert_eq!(s.body["generationConfig"]["responseSchema"]["propertyOrdering"], json!(["action", "qty"]));
}

#[tokio::test]
async fn anthropic_forces_a_tool_for_structured_output() {
    let server = script(vec![ok(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "anthropic-test",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "decision",
                     "input": {"action": "sell", "qty": 2}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 55, "output_tokens": 12}
    }))])
    .await;
    let mut c = config(Dialect::Anthropic, &server, "/v1");
    c.top_p = 0.9;
    let p = build_provider(&c).unwrap();
    let mut req = ChatRequest::new(conversation());
    req.tools = vec![vote_tool()];
    let (v, resp) = structured_response(p.as_ref(), req, decision_schema(), &mut LlmState::default()).await.unwrap();
    assert_eq!(v, json!({"action": "sell", "qty": 2}));
    assert_eq!((resp.usage.prompt_tokens, resp.usage.completion_tokens), (55, 12));

    let s = &server.seen()[0];
    assert_eq!(s.method, Method::POST);
    assert_eq!(s.path, "/v1/messages");
    assert_eq!(header(s, "x-api-key"), KEY);
    assert_eq!(header(s, "anthropic-version"), "2023-06-01");
    assert!(s.headers.get("authorization").is_none());
    assert_eq!(
        s.body,
        json!({
            "model": "anthropic-test",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are Ann.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Hello."},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "Your move?"}
            ],
            "temperature": 0.7,
            "top_p": 0.9,
            "tools": [
                {"name": "vote", "description": "Vote to lynch a player.",
                 "input_schema": vote_tool().parameters},
                {"name": "decision",
                 "description": "Give your answer by calling this tool with arguments matching its schema.",
                 "input_schema": decision_schema().schema}
            ],
            "tool_choice": {"type": "tool", "name": "decision"}
        })
    );
}

#[tokio::test]
async fn anthropic_plain_text_and_tool_choice_mapping() {
    let server = script(vec![ok(json!({
        "type": "message", "content": [{"type": "text", "text": " Fine. "}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 1}
    }))])
    .await;
    let p = build_provider(&config(Dialect::Anthropic, &server, "/v1")).unwrap();
    assert_eq!(text_chat(p.clone()).await.unwrap(), "Fine.");
    let plain = &server.seen()[0].body;
    assert!(plain.get("tools").is_none() && plain.get("tool_choice").is_none());
    assert!(plain.get("top_p").is_none(), "top_p = 1 is left out");
    for (choice, wire) in [
        (ToolChoice::Auto, json!({"type": "auto"})),
        (ToolChoice::None, json!({"type": "none"})),
        (ToolChoice::Required, json!({"type": "any"})),
    ] {
        let mut req = ChatRequest::new(conversation());
        req.tools = vec![vote_tool()];
        req.tool_choice = choice;
        chat(p.as_ref(), &req).await.unwrap();
        assert_eq!(server.seen().last().unwrap().body["tool_choice"], wire);
    }
}

/// The trading agent's conversation at its second decision point: its first call and that
/// call's result, then the new case.
fn trading_conversation() -> ChatRequest {
    use simtree::llm::ToolCall;
    let call = ToolCall { id: Some("call_1".into()), name: "vote".into(), arguments: json!({"target": "Pia"}) };
    let mut req = ChatRequest::new(vec![
        Message::new(Role::System, "You trade."),
        Message::new(Role::User, "Decision point 0."),
        Message::assistant_calls("Buying.", vec![call.clone()]),
        Message::tool_result(&call, r#"{"status":"accepted"}"#),
        Message::new(Role::User, "Decision point 1."),
    ]);
    req.tools = vec![vote_tool()];
    req
}

#[tokio::test]
async fn gemini_and_anthropic_get_earlier_tool_calls_and_results_as_native_tool_messages() {
    let server = script(vec![ok(json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "vote", "args": {"target": "Ronan"}}}]}, "finishReason": "STOP"}]
    }))])
    .await;
    let p = build_provider(&config(Dialect::Gemini, &server, "/v1beta")).unwrap();
    let r = chat(p.as_ref(), &trading_conversation()).await.unwrap();
    assert_eq!(r.tool_calls[0].arguments, json!({"target": "Ronan"}));
    assert_eq!(
        server.seen()[0].body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Decision point 0."}]},
            {"role": "model", "parts": [{"text": "Buying."},
                {"functionCall": {"name": "vote", "args": {"target": "Pia"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "vote", "response": {"output": {"status": "accepted"}}}}]},
            {"role": "user", "parts": [{"text": "Decision point 1."}]}
        ])
    );

    let server = script(vec![ok(json!({
        "type": "message", "content": [{"type": "tool_use", "id": "toolu_2", "name": "vote",
                                         "input": {"target": "Ronan"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 1}
    }))])
    .await;
    let p = build_provider(&config(Dialect::Anthropic, &server, "/v1")).unwrap();
    let r = chat(p.as_ref(), &trading_conversation()).await.unwrap();
    assert_eq!(r.tool_calls[0].id.as_deref(), Some("toolu_2"));
    assert_eq!(
        server.seen()[0].body["messages"],
        json!([
            {"role": "user", "content": "Decision point 0."},
            {"role": "assistant", "content": [{"type": "text", "text": "Buying."},
                {"type": "tool_use", "id": "call_1", "name": "vote", "input": {"target": "Pia"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "{\"status\":\"accepted\"}"}]},
            {"role": "user", "content": "Decision point 1."}
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// Prompt caches: each dialect's cache fields, what each call records of them, and what cached
// tokens cost.

/// A run's metered client on `provider`, recording in `ledger` (no budget, no coalescing).
fn metered(provider: Arc<dyn ChatProvider>, ledger: &Arc<Ledger>) -> MeteredClient {
    MeteredClient {
        provider,
        ledger: ledger.clone(),
        budget: None,
        watch: Default::default(),
        coalesce: None,
        warm_up: None,
    }
}

/// Ann's prompts: her last turn in a parent node's run, then her first two turns in a child's
/// run (each extends the one before it).
fn ann_prompts() -> [Vec<Message>; 3] {
    let mut m = vec![Message::new(Role::System, "You are Ann. ".repeat(20))];
    let mut prompts = Vec::new();
    for turn in 0..3 {
        if turn > 0 {
            m.push(Message::new(Role::Assistant, format!("I act, turn {turn}.")));
        }
        m.push(Message::new(Role::User, format!("News {turn}.")));
        m.push(Message::new(Role::Assistant, format!("Noted {turn}.")));
        m.push(Message::new(Role::User, format!("Your move {turn}?")));
        prompts.push(m.clone());
    }
    prompts.try_into().unwrap()
}

/// Runs Ann's three prompts through `provider` as a parent's run (affinity 7), then a child's
/// (affinity 42, started from the parent's state); returns the records.
async fn ann_calls(provider: Arc<dyn ChatProvider>) -> Vec<LlmRecord> {
    let ledger = Arc::new(Ledger::default());
    let client = metered(provider, &ledger);
    let mut state = LlmState { speaker: Some("Ann".into()), ..LlmState::default() };
    let [parent, one, two] = ann_prompts();
    state.start_run(7);
    client.chat(&parent, &mut state).await.unwrap();
    let mut child = state.clone();
    child.start_run(42);
    client.chat(&one, &mut child).await.unwrap();
    client.chat(&two, &mut child).await.unwrap();
    ledger.take()
}

fn how(r: &LlmRecord) -> CacheHow {
    r.cache.as_ref().map_or(CacheHow::None, |c| c.how)
}

#[tokio::test]
async fn openai_sends_a_prompt_cache_key_per_node_and_agent_and_prices_cached_tokens() {
    let mut answer = openai_text("ok");
    answer["usage"] = json!({"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010,
                             "prompt_tokens_details": {"cached_tokens": 800}});
    let server = script(vec![ok(answer)]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.model = "gpt-4o-mini".into();
    let records = ann_calls(build_provider(&c).unwrap()).await;
    let keys: Vec<Value> = server.seen().iter().map(|s| s.body["prompt_cache_key"].clone()).collect();
    let (parent, child) = (cache::key(7, Some("Ann")), cache::key(42, Some("Ann")));
    assert_eq!(keys, vec![json!(parent), json!(child), json!(child)]);
    assert_ne!(parent, child, "each node its own key");
    assert!(!child.contains("Ann"), "no name in clear: {child}");
    let recorded: Vec<Option<String>> = records.iter().map(|r| r.cache.as_ref().unwrap().key.clone()).collect();
    assert_eq!(recorded, vec![Some(parent.clone()), Some(child.clone()), Some(child.clone())]);
    for r in &records {
        assert_eq!(how(r), CacheHow::PromptCacheKey);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (1000, 800));
    }
    assert_eq!(records[0].repeated_tokens, 0, "nothing was sent before");
    assert!(
        records[1].repeated_tokens > 500 && records[2].repeated_tokens > records[1].repeated_tokens / 2,
        "{records:?}"
    );
    // $0.15 per million prompt tokens, $0.075 cached, $0.60 completion.
    let t = PriceTable::default().tally(&records).unwrap();
    let paid = (200.0 * 0.15 + 800.0 * 0.075 + 10.0 * 0.60) / 1e6;
    assert!((t.money - 3.0 * paid).abs() < 1e-15, "{t:?}");
    assert!((t.saved - 3.0 * 800.0 * (0.15 - 0.075) / 1e6).abs() < 1e-15, "{t:?}");

    // Switched off, no key is sent and the call says the server caches by itself.
    c.prompt_cache = false;
    let before = server.seen().len();
    let off = ann_calls(build_provider(&c).unwrap()).await;
    assert!(server.seen()[before..].iter().all(|s| s.body.get("prompt_cache_key").is_none()));
    assert!(off.iter().all(|r| how(r) == CacheHow::Implicit && r.cache.as_ref().unwrap().key.is_none()));
}

#[tokio::test]
async fn a_server_that_refuses_the_cache_key_is_asked_again_without_it_and_never_sent_it_again() {
    let server = serve(Answer::Compute(Box::new(|body| {
        if body.get("prompt_cache_key").is_some() {
            status(400, r#"{"error": {"message": "Unrecognized request argument supplied: prompt_cache_key"}}"#)
        } else {
            ok(openai_text("fine"))
        }
    })))
    .await;
    let records = ann_calls(build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap()).await;
    let sent: Vec<bool> = server.seen().iter().map(|s| s.body.get("prompt_cache_key").is_some()).collect();
    assert_eq!(sent, vec![true, false, false, false], "refused once, then left out");
    assert!(records.iter().all(|r| how(r) == CacheHow::Implicit), "{records:?}");
}

#[tokio::test]
async fn anthropic_places_breakpoints_after_the_system_prompt_the_fork_and_the_last_turn() {
    let server = script(vec![ok(json!({
        "type": "message", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "cache_creation_input_tokens": 300,
                  "cache_read_input_tokens": 600, "output_tokens": 10}
    }))])
    .await;
    let mut c = config(Dialect::Anthropic, &server, "/v1");
    c.model = "claude-3-5-haiku-latest".into();
    let records = ann_calls(build_provider(&c).unwrap()).await;
    let points: Vec<Vec<u32>> = records.iter().map(|r| r.cache.as_ref().unwrap().breakpoints.clone()).collect();
    // The parent's prompt fixed its first 3 messages, the child's first turn its first 7.
    assert_eq!(points, vec![vec![1], vec![1, 3], vec![1, 3, 7]]);
    assert!(records.iter().all(|r| how(r) == CacheHow::CacheControl));
    let seen = server.seen();
    let cached = |body: &Value| -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["content"].as_array().is_some_and(|b| b.last().unwrap().get("cache_control").is_some()))
            .map(|m| m["content"][0]["text"].as_str().unwrap().to_string())
            .collect()
    };
    let last = &seen[2].body;
    assert_eq!(last["system"][0]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(cached(last), vec!["Noted 0.", "Noted 1."], "{last}");
    assert_eq!(last["messages"][0], json!({"role": "user", "content": "News 0."}), "others keep the short form");
    assert!(cached(&seen[0].body).is_empty());
    // Reads and writes are counted apart and priced apart: $0.80 per million prompt tokens,
    // $0.08 read from the cache, $1.00 written to it, $4.00 completion.
    let r = &records[2];
    assert_eq!((r.prompt_tokens, r.cached_tokens, r.cache_write_tokens), (1000, 600, 300));
    let t = PriceTable::default().tally(&records).unwrap();
    let paid = (100.0 * 0.80 + 600.0 * 0.08 + 300.0 * 1.00 + 10.0 * 4.00) / 1e6;
    assert!((t.money - 3.0 * paid).abs() < 1e-15, "{t:?}");
    assert!((t.saved - 3.0 * ((1000.0 * 0.80 + 10.0 * 4.00) / 1e6 - paid)).abs() < 1e-15);

    // Switched off, nothing is marked: Anthropic caches nothing.
    c.prompt_cache = false;
    let before = server.seen().len();
    let off = ann_calls(build_provider(&c).unwrap()).await;
    assert!(off.iter().all(|r| how(r) == CacheHow::None));
    assert!(server.seen()[before..].iter().all(|s| s.body["system"].is_string() && cached(&s.body).is_empty()));
}

#[tokio::test]
async fn gemini_reports_its_implicit_cache_hits_and_they_are_priced_as_cached() {
    let server = script(vec![ok(json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 1000, "candidatesTokenCount": 10, "cachedContentTokenCount": 700}
    }))])
    .await;
    let mut c = config(Dialect::Gemini, &server, "/v1beta");
    c.model = "gemini-2.0-flash".into();
    let records = ann_calls(build_provider(&c).unwrap()).await;
    assert!(records.iter().all(|r| how(r) == CacheHow::Implicit && r.cached_tokens == 700));
    assert!(server.seen().iter().all(|s| s.body.get("cachedContent").is_none()), "no explicit cache");
    let t = PriceTable::default().tally(&records).unwrap();
    let paid = (300.0 * 0.10 + 700.0 * 0.025 + 10.0 * 0.40) / 1e6;
    assert!((t.money - 3.0 * paid).abs() < 1e-15, "{t:?}");
}

// ---------------------------------------------------------------------------------------------
// Failure paths.

#[tokio::test]
async fn a_slow_provider_times_out_per_attempt_and_is_retried() {
    let server = script(vec![ok(openai_text("late")).after(Duration::from_secs(3))]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.timeout_s = 0.2;
    c.max_retries = 1;
    let start = Instant::now();
    let e = text_chat(build_provider(&c).unwrap()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "LLM request failed: openai:openai-test: timed out after 0.2s (gave up after 2 attempts)"
    );
    assert_eq!(server.seen().len(), 2);
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_retried() {
    let server = script(vec![
        status(429, r#"{"error": {"message": "Rate limit reached"}}"#).header("retry-after", "1"),
        ok(openai_text("after the wait")),
    ])
    .await;
    let c = config(Dialect::OpenAi, &server, "/v1");
    let text = text_chat(build_provider(&c).unwrap()).await.unwrap();
    assert_eq!(text, "after the wait");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at - seen[0].at;
    // The backoff is 10 ms, so only the header explains a wait of a second.
    assert!(waited >= Duration::from_secs(1), "waited only {waited:?}");
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
}

#[tokio::test]
async fn a_persistent_429_fails_with_the_status_and_the_attempt_count() {
    let server =
        script(vec![status(429, r#"{"error": {"message": "Rate limit reached"}}"#).header("retry-after-ms", "20")])
            .await;
    let e = text_chat(build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "LLM request failed: openai:openai-test: HTTP 429 Too Many Requests: Rate limit reached (gave up after 3 attempts)"
    );
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_until_success() {
    let server = script(vec![
        status(500, "internal error"),
        status(503, r#"{"error": {"message": "overloaded"}}"#),
        ok(json!({"type": "message", "content": [{"type": "text", "text": "third time"}],
                  "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 2}})),
    ])
    .await;
    let p = build_provider(&config(Dialect::Anthropic, &server, "/v1")).unwrap();
    let r = chat(p.as_ref(), &ChatRequest::new(conversation())).await.unwrap();
    assert_eq!(r.text, "third time");
    assert_eq!(server.seen().len(), 3);
    assert_eq!(server.seen()[0].body, server.seen()[2].body, "retries resend the same request");
}

#[tokio::test]
async fn client_errors_are_not_retried_and_never_show_the_key() {
    // A proxy that echoes the auth header back in its error body.
    let server = serve(Answer::Compute(Box::new(|_| {
        status(401, &format!(r#"{{"error": {{"message": "Incorrect API key provided: Bearer {KEY}"}}}}"#))
    })))
    .await;
    let c = config(Dialect::OpenAi, &server, "/v1");
    let e = text_chat(build_provider(&c).unwrap()).await.unwrap_err();
    let msg = e.to_string();
    assert_eq!(
        msg,
        "LLM request failed: openai:openai-test: HTTP 401 Unauthorized: Incorrect API key provided: Bearer ***"
    );
    assert!(!format!("{e:?}").contains("SECRET"));
    assert!(!format!("{c:?}").contains("SECRET"));
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn malformed_json_is_a_clear_unretried_error() {
    let server = script(vec![status(200, "{\"choices\": [oops")]).await;
    let e = text_chat(build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap()).await.unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("LLM response unusable: openai:openai-test: malformed JSON in the response body"), "{msg}");
    assert!(msg.contains(r#"body starts "{\"choices\": [oops""#), "{msg}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn empty_choices_candidates_and_content_are_errors() {
    for (dialect, prefix, body, want) in [
        (Dialect::OpenAi, "/v1", json!({"choices": []}), "openai:openai-test: the response has no choices"),
        (Dialect::Gemini, "/v1beta", json!({"candidates": []}), "gemini:gemini-test: the response has no candidates"),
        (
            Dialect::Anthropic,
            "/v1",
            json!({"type": "message", "content": [], "stop_reason": "end_turn"}),
            "anthropic:anthropic-test: the response has no content",
        ),
    ] {
        let server = script(vec![ok(body)]).await;
        let e = text_chat(build_provider(&config(dialect, &server, prefix)).unwrap()).await.unwrap_err();
        assert_eq!(e, LlmError::Response(want.into()));
        assert_eq!(server.seen().len(), 1);
    }
}

#[tokio::test]
async fn refusals_and_safety_blocks_are_refused_errors() {
    for (dialect, prefix, body, want) in [
        (
            Dialect::OpenAi,
            "/v1",
            json!({"choices": [{"message": {"role": "assistant", "content": null,
                                            "refusal": "I can't help with that."},
                                "finish_reason": "stop"}]}),
            "openai:openai-test: the model refused: I can't help with that.",
        ),
        (
            Dialect::Gemini,
            "/v1beta",
            json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}),
            "gemini:gemini-test: the prompt was blocked by the safety filter (blockReason SAFETY)",
        ),
        (
            Dialect::Gemini,
            "/v1beta",
            json!({"candidates": [{"finishReason": "SAFETY", "safetyRatings": []}]}),
            "gemini:gemini-test: the answer was blocked by the safety filter (finishReason SAFETY)",
        ),
        (
            Dialect::Anthropic,
            "/v1",
            json!({"type": "message", "content": [], "stop_reason": "refusal"}),
            "anthropic:anthropic-test: the model refused (stop_reason refusal)",
        ),
    ] {
        let server = script(vec![ok(body)]).await;
        let p = build_provider(&config(dialect, &server, prefix)).unwrap();
        let e = text_chat(p.clone()).await.unwrap_err();
        assert_eq!(e, LlmError::Refused(want.into()));
        assert_eq!(e.to_string(), format!("LLM refused: {want}"));
        let e = structured(p.as_ref(), ChatRequest::new(conversation()), decision_schema(), &mut LlmState::default())
            .await
            .unwrap_err();
        assert_eq!(e, LlmError::Refused(want.into()));
    }
}

#[tokio::test]
async fn a_dead_port_is_a_connection_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut c = LlmConfig::for_dialect(Dialect::OpenAi);
    c.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
    c.max_retries = 1;
    c.retry_backoff_s = 0.01;
    let e = text_chat(build_provider(&c).unwrap()).await.unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("LLM request failed: openai:gpt-4o-mini: connection failed:"), "{msg}");
    assert!(msg.ends_with("(gave up after 2 attempts)"), "{msg}");
}

#[tokio::test]
async fn a_structured_answer_that_breaks_the_schema_names_the_field() {
    let server = script(vec![ok(openai_text("{\"action\": \"short\", \"qty\": 1}"))]).await;
    let p = build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap();
    let e = structured(p.as_ref(), ChatRequest::new(conversation()), decision_schema(), &mut LlmState::default())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "LLM response unusable: openai:openai-test: structured output does not match schema decision: $.action: \"short\" is not one of \"buy\", \"sell\", \"hold\""
    );
}

// ---------------------------------------------------------------------------------------------
// Shared limits.

#[tokio::test]
async fn parallel_calls_never_exceed_the_concurrency_limit() {
    let server = script(vec![ok(openai_text("slow")).after(Duration::from_millis(80))]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.max_concurrency = 3;
    // Two configs for the same endpoint from one pool share one gate.
    let pool = ProviderPool::new();
    let mut warm = c.clone();
    warm.temperature = 0.3;
    let providers = [pool.get(&c).unwrap(), pool.get(&warm).unwrap()];
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let p = providers[i % 2].clone();
        tasks.spawn(async move { text_chat(p).await });
    }
    for r in tasks.join_all().await {
        assert_eq!(r.unwrap(), "slow");
    }
    assert_eq!(server.seen().len(), 16);
    assert_eq!(server.peak(), 3, "the fake server saw at most 3 requests at once");
}

#[tokio::test]
async fn the_rate_limit_spaces_request_starts() {
    let server = script(vec![ok(openai_text("ok"))]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.requests_per_second = Some(20.0);
    let p = build_provider(&c).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let p = p.clone();
        tasks.spawn(async move { text_chat(p).await });
    }
    for r in tasks.join_all().await {
        r.unwrap();
    }
    let mut at: Vec<Instant> = server.seen().iter().map(|s| s.at).collect();
    at.sort();
    // Five starts 50 ms apart span 200 ms at the client; arrival jitter on a busy machine can
    // move single arrivals, so the span is checked (unlimited, it would be a few ms).
    let span = at[4] - at[0];
    assert!(span >= Duration::from_millis(170), "five requests arrived within {span:?}");
}

// ---------------------------------------------------------------------------------------------
// Accounting and the engine.

#[tokio::test]
async fn usage_and_latency_reach_the_observer() {
    let server = script(vec![ok(openai_text("counted")).after(Duration::from_millis(30))]).await;
    let p = build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let client = ProviderClient::new(p).with_observer(move |r| {
        let resp = r.result.as_ref().unwrap();
        sink.lock().unwrap().push((r.provider.clone(), resp.usage, resp.latency_ms, r.request.messages.len()));
    });
    for _ in 0..2 {
        client.chat(&conversation(), &mut LlmState::default()).await.unwrap();
    }
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2);
    let (provider, usage, latency, messages) = &log[0];
    assert_eq!(provider, "openai:openai-test");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (11, 3));
    assert!(*latency >= 30, "latency {latency} ms");
    assert_eq!(*messages, 4);
}

/// The mock, with its text trimmed as every real dialect trims (upstream does the same).
struct TrimmedMock;

impl LlmClient for TrimmedMock {
    fn chat<'a>(
        &'a self,
        messages: &'a [Message],
        state: &'a mut LlmState,
    ) -> simtree::llm::BoxFuture<'a, Result<String, LlmError>> {
        let text = simtree::llm::mock::reply(messages, state).trim().to_string();
        Box::pin(async move { Ok(text) })
    }
}

/// Werewolf for 10 turns through the OpenAI dialect, the fake server answering as the mock would
/// (its own counters), gives exactly the log of the (trimmed) mock itself.
#[tokio::test]
async fn werewolf_through_the_openai_dialect_matches_the_mock() {
    let scenario = Scenario::load_file(&assets_dir().expect("assets").join("scenarios/werewolf.json")).unwrap();
    let counters = Arc::new(Mutex::new(LlmState::default()));
    let server = serve(Answer::Compute(Box::new(move |body| {
        let messages: Vec<Message> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let role = match m["role"].as_str().unwrap() {
                    "system" => Role::System,
                    "assistant" => Role::Assistant,
                    _ => Role::User,
                };
                Message::new(role, m["content"].as_str().unwrap())
            })
            .collect();
        let text = simtree::llm::mock::reply(&messages, &mut counters.lock().unwrap());
        ok(openai_text(&text))
    })))
    .await;
    let client = ProviderClient::new(build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap());

    let mut direct = scenario.build(Some(7)).unwrap();
    let mut direct_events = Vec::new();
    direct.run(10, &TrimmedMock, &mut direct_events).await.unwrap();
    let mut remote = scenario.build(Some(7)).unwrap();
    let mut remote_events = Vec::new();
    remote.run(10, &client, &mut remote_events).await.unwrap();

    let log = |ev: &[simtree::engine::Event]| ev.iter().map(event_json).collect::<Vec<_>>().join("\n");
    assert!(direct_events.len() > 20);
    assert_eq!(server.seen().len() as u64, direct.world().llm.mock_counters.values().sum::<u64>());
    assert_eq!(log(&remote_events), log(&direct_events));
}

// ---------------------------------------------------------------------------------------------
// Structured-output forms, cut-off replies, response size, secrets.

/// What llama-cpp-python's server answers to `response_format: {"type": "json_schema"}`.
fn refuses_json_schema(body: &Value) -> Reply {
    if body["response_format"]["type"] == "json_schema" {
        return status(
            500,
            r#"{"error": {"message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}]", "type": "internal_server_error"}}"#,
        );
    }
    ok(openai_text("{\"action\": \"hold\", \"qty\": null}"))
}

#[tokio::test]
async fn a_refused_json_schema_falls_back_to_json_object_once_per_endpoint() {
    let server = serve(Answer::Compute(Box::new(refuses_json_schema))).await;
    let pool = ProviderPool::new();
    let c = config(Dialect::OpenAi, &server, "/v1");
    let ask = |p: Arc<dyn ChatProvider>| async move {
        structured(p.as_ref(), ChatRequest::new(conversation()), decision_schema(), &mut LlmState::default()).await
    };
    assert_eq!(ask(pool.get(&c).unwrap()).await.unwrap(), json!({"action": "hold", "qty": null}));
    // Another config for the same endpoint (another agent's override) already knows.
    let mut other = c.clone();
    other.temperature = 0.1;
    assert!(ask(pool.get(&other).unwrap()).await.is_ok());
    let forms: Vec<Value> = server.seen().iter().map(|s| s.body["response_format"]["type"].clone()).collect();
    assert_eq!(
        forms,
        [json!("json_schema"), json!("json_object"), json!("json_object")],
        "the refusal is not retried as is, and the other form is remembered"
    );
    assert_eq!(server.seen()[1].body["response_format"]["schema"], decision_schema().schema);
}

#[tokio::test]
async fn a_server_that_refuses_both_forms_says_so() {
    let server = serve(Answer::Compute(Box::new(|_| {
        status(400, r#"{"error": {"message": "response_format is not supported"}}"#)
    })))
    .await;
    let p = build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap();
    let e = structured(p.as_ref(), ChatRequest::new(conversation()), decision_schema(), &mut LlmState::default())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "LLM request failed: openai:openai-test: the server refuses both forms of structured output \
         (response_format json_schema: HTTP 400 Bad Request: response_format is not supported; \
         json_object: HTTP 400 Bad Request: response_format is not supported)"
    );
    assert_eq!(server.seen().len(), 2);
    // A plain request is unaffected: only requests asking for JSON carry response_format.
    let plain = serve(Answer::Compute(Box::new(|_| {
        status(400, r#"{"error": {"message": "response_format is not supported"}}"#)
    })))
    .await;
    let e = text_chat(build_provider(&config(Dialect::OpenAi, &plain, "/v1")).unwrap()).await.unwrap_err();
    assert!(e.to_string().contains("HTTP 400"), "{e}");
    assert_eq!(plain.seen().len(), 1);
}

#[tokio::test]
async fn a_reply_cut_at_max_tokens_names_the_cause_and_the_limit() {
    let server = script(vec![ok(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"action\": \"ho"},
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 64, "total_tokens": 75}
    }))])
    .await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.max_tokens = 64;
    let p = build_provider(&c).unwrap();
    let e = structured(p.as_ref(), ChatRequest::new(conversation()), decision_schema(), &mut LlmState::default())
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "LLM response unusable: openai:openai-test: structured output for decision was cut off at \
             the max_tokens limit (64 tokens) before the JSON was complete; raise max_tokens (LLM_MAX_TOKENS)."
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn abm_generation_on_openai_sends_the_strict_schema_the_display_route_shows() {
    use simtree::abm::generate::{GenerateOptions, GenerateRequest, MockAbmLlm, ProviderStructured, generate};
    use simtree::abm::schema::{Provider, provider_schema, wrapped};
    let answer = MockAbmLlm::answer("a forest fire").to_string();
    let server = serve(Answer::Compute(Box::new(move |_| ok(openai_text(&answer))))).await;
    let provider = build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap();
    let request = GenerateRequest { prompt: "a forest fire".into(), last_model: None };
    let out = generate(&ProviderStructured { provider }, &request, &GenerateOptions::default()).await;
    let out = serde_json::to_value(out).unwrap();
    assert_eq!(out["success"], true, "{out}");
    let sent = &server.seen()[0].body["response_format"];
    assert_eq!(sent["type"], "json_schema");
    assert_eq!(sent["json_schema"]["strict"], true);
    let schema = &sent["json_schema"]["schema"];
    assert_eq!(*schema, provider_schema(Provider::OpenAi));
    assert_eq!(*schema, wrapped(Provider::OpenAi)["response_format"]["json_schema"]["schema"]);
    // The strict form: no OpenAPI `nullable` anywhere, every property required.
    assert!(!schema.to_string().contains("nullable"));
    let props = schema["properties"].as_object().unwrap();
    assert_eq!(schema["required"].as_array().unwrap().len(), props.len());
    assert_eq!(schema["additionalProperties"], false);
}

/// A provider that answers every request with a `total`-byte body (chunked, or announced with
/// Content-Length), written straight to the socket so that it counts what the client accepted.
async fn huge_provider(total: usize, announce: bool) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = sock.read(&mut buf).await;
                let head = if announce {
                    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {total}\r\n\r\n")
                } else {
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                        .to_string()
                };
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'a'; 64 * 1024];
                let framed = [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk.clone(), b"\r\n".to_vec()].concat();
                let mut written = 0;
                while written < total {
                    let piece = if announce { &chunk } else { &framed };
                    if sock.write_all(piece).await.is_err() {
                        return;
                    }
                    written += chunk.len();
                    counter.fetch_add(chunk.len(), Ordering::SeqCst);
                }
            });
        }
    });
    (format!("http://{addr}/v1"), sent)
}

#[tokio::test]
async fn a_50_mb_response_is_refused_without_reading_it() {
    const MB50: usize = 50 * 1024 * 1024;
    for announce in [false, true] {
        let (url, sent) = huge_provider(MB50, announce).await;
        let mut c = LlmConfig::for_dialect(Dialect::OpenAi);
        c.base_url = Some(url);
        c.max_retries = 0;
        let started = Instant::now();
        let e = text_chat(build_provider(&c).unwrap()).await.unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(
                "larger than max_response_bytes = 8388608 bytes (LLM_MAX_RESPONSE_BYTES); it was not read further"
            ),
            "{msg}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        // The provider could write ahead into socket buffers, but never the whole body.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            sent.load(Ordering::SeqCst) < MB50 / 2,
            "announce={announce}: {} bytes were pulled",
            sent.load(Ordering::SeqCst)
        );
    }
}

#[tokio::test]
async fn a_short_placeholder_key_leaves_error_texts_untouched() {
    let server =
        script(vec![status(400, r#"{"error": {"message": "unexpected text: expected JSON, max 0x10 tokens"}}"#)]).await;
    let mut c = config(Dialect::OpenAi, &server, "/v1");
    c.api_key = simtree::llm::ApiKey::new("x");
    let e = text_chat(build_provider(&c).unwrap()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "LLM request failed: openai:openai-test: HTTP 400 Bad Request: unexpected text: expected JSON, max 0x10 tokens"
    );
}

#[tokio::test]
async fn a_key_the_provider_echoes_is_masked_in_text_and_tool_calls() {
    let server = serve(Answer::Compute(Box::new(|_| {
        let args = json!({"target": format!("Bearer {KEY}")}).to_string();
        ok(json!({"choices": [{"index": 0, "message": {"role": "assistant",
            "content": format!("your key is {KEY}."),
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "vote", "arguments": args}}]},
            "finish_reason": "tool_calls"}]}))
    })))
    .await;
    let p = build_provider(&config(Dialect::OpenAi, &server, "/v1")).unwrap();
    let r = chat(p.as_ref(), &ChatRequest::new(conversation())).await.unwrap();
    assert_eq!(r.text, "your key is ***.");
    assert_eq!(r.tool_calls[0].arguments, json!({"target": "Bearer ***"}));
}
