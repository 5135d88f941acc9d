//! The branch editor: one form per op kind of the open tree's kind, pre-filled from the selected
//! node and validated as the user types, plus custom JSON as the expert mode.
//!
//! Each form keeps its inputs in local signals and writes the op it would send (or the reason it
//! cannot) into one `draft` signal; the editor's Apply button sends the draft, asking first when
//! [`needs_confirm`] says the op destroys something. Turning inputs into ops is
//! [`crate::editors`]'s job (pure, tested natively); this file only wires it to the DOM.

use leptos::prelude::*;
use serde_json::{Map, Value};
use simtree_shared::abm::AbmView;
use simtree_shared::trading::{AgentSpec, TradingView};
use simtree_shared::{AgentState, LogEntry, NodeView, Op};

use crate::api::{self, ApiError};
use crate::editors::{
    AbmTarget, Field, PLAN_SCHEMA, abm_agent_ids, abm_fields, abm_op, abm_sets, agent_swap, last_abm_values, news_item,
    op_kinds, parse_value, plan_from_text, portfolio_patch, prompt_replace, scene_patch, social_fields, value_text,
};
use crate::field::labelled;
use crate::ops::{Kind, needs_confirm};
use crate::state::{Tree, ctx};

type Draft = RwSignal<Result<Op, String>>;

/// Parses typed JSON into `T`, with the message the forms show under their input.
fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))
}

/// A text input bound to a signal.
fn text_input(id: &'static str, sig: RwSignal<String>, placeholder: &'static str) -> impl IntoView {
    view! { <input id=id placeholder=placeholder prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev)) /> }
}

/// A labelled field.
#[component]
pub fn BranchEditor(tree: Tree, node_view: RwSignal<Option<NodeView>>) -> impl IntoView {
    let ctx = ctx();
    let kind = RwSignal::new("public_broadcast".to_string());
    let draft: Draft = RwSignal::new(Err(String::new()));
    let pending = RwSignal::new(None::<(Op, String)>);
    // A tree of another kind offers other ops: start from its first one.
    Effect::new(move |_| {
        let kinds = op_kinds(tree.kind.get());
        if !kinds.contains(&kind.get_untracked().as_str()) {
            kind.set(kinds[0].to_string());
        }
    });
    Effect::new(move |_| {
        kind.track();
        tree.selected.track();
        pending.set(None);
    });
    let send = move |op: Op| {
        let (Some(t), Some(parent)) = (tree.id.get_untracked(), tree.selected.get_untracked()) else {
            return;
        };
        pending.set(None);
        tree.run(async move {
            let r = api::branch(t, parent, &[op]).await?;
            tree.selected.set(Some(r.child));
            Ok(())
        });
    };
    let apply = move |_| match draft.get_untracked() {
        Err(e) => ctx.error(ApiError::Client(if e.is_empty() { "nothing to apply".into() } else { e })),
        Ok(op) => match needs_confirm(&op) {
            Some(q) => pending.set(Some((op, q))),
            None => send(op),
        },
    };
    // The form is made anew for each op kind, selected node and state of that node (a re-read
    // that finds the same state keeps it, and what was typed): every "now" it shows is the
    // selected node's, never the one selected before (whose view may still be the last read).
    let basis = Memo::new(move |_| (kind.get(), tree.selected.get(), node_view.get()));
    let form = move || {
        let (k, node, view) = basis.get();
        draft.set(Err(String::new()));
        let Some(node) = node else {
            return ().into_any();
        };
        let loading = || view! { <p id="op-loading" class="muted">{move || ctx.tr("common.loading")}</p> }.into_any();
        match k.as_str() {
            "custom" => view! { <CustomForm tree draft /> }.into_any(),
            "public_broadcast" | "agent_ctx_append" | "agent_plan_replace" | "agent_props_patch" => {
                view! { <SocialForm tree node kind=k draft /> }.into_any()
            }
            "scene_state_patch" => match view.as_ref().and_then(NodeView::social) {
                Some(v) => view! { <ScenePatchForm state=v.state.clone() draft /> }.into_any(),
                None => loading(),
            },
            "scene_prose_set" => match view.as_ref().and_then(NodeView::social).and_then(|v| v.about.clone()) {
                Some(about) => view! { <ProseForm about draft /> }.into_any(),
                None => loading(),
            },
            "abm_set_global" | "abm_set_environment" | "abm_set_agent" => match view.as_ref().and_then(NodeView::abm) {
                Some(v) => view! { <AbmForm tree node view=v.clone() kind=k draft /> }.into_any(),
                None => loading(),
            },
            _ => match view.as_ref().and_then(NodeView::trading) {
                Some(v) => view! { <TradingForm view=v.clone() kind=k draft /> }.into_any(),
                None => loading(),
            },
        }
    };
    let op_kind = view! {
        <select id="op-kind" on:change=move |ev| kind.set(event_target_value(&ev)) prop:value=move || kind.get()>
            {move || op_kinds(tree.kind.get()).iter().map(|k| {
                let label = if *k == "custom" { ctx.tr("branch.custom") } else { crate::i18n::wire_term(ctx.lang.get(), k) };
                view! { <option value=*k selected=move || kind.get() == *k>{label}</option> }
            }).collect_view()}
        </select>
    };
    view! {
        <section class="panel branch">
            <h3>{move || ctx.tr("simtree.branch")}</h3>
            {labelled("simtree.opKind", "op-kind", op_kind)}
            {form}
            {move || draft.get().err().filter(|e| !e.is_empty()).map(|e| {
                let class = if e.starts_with(crate::editors::NOTHING_YET) { "hint muted" } else { "error" };
                view! { <p id="op-error" class=class>{e}</p> }
            })}
            <button id="branch-btn" class="primary" disabled=move || tree.selected.get().is_none() || tree.busy.get() || draft.with(Result::is_err) on:click=apply>
                {move || ctx.tr("common.apply")}
            </button>
            {move || pending.get().map(|(op, q)| view! {
                <div id="confirm-op" class="confirm">
                    <span>{q}</span>
                    <button id="confirm-op-yes" class="danger" on:click=move |_| send(op.clone())>{move || ctx.tr("common.apply")}</button>
                    <button id="confirm-op-no" on:click=move |_| pending.set(None)>{move || ctx.tr("common.cancel")}</button>
                </div>
            })}
        </section>
    }
}

/// Any op as JSON; starts from an example of the tree's kind so its shape is visible.
#[component]
fn CustomForm(tree: Tree, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let example = match tree.kind.get_untracked() {
        Kind::Trading => r#"{"op": "portfolio_patch", "cash": 500000}"#,
        Kind::Abm => r#"{"op": "abm_set_global", "name": "infectionRate", "value": 0.6}"#,
        Kind::Social => r#"{"op": "public_broadcast", "text": "Breaking news"}"#,
    };
    let text = RwSignal::new(example.to_string());
    Effect::new(move |_| {
        draft.set(parse_json::<Op>(&text.get()));
    });
    view! {
        <div class="field">
            <label for="op-json">{move || ctx.tr("branch.customHelp")}</label>
            <textarea id="op-json" class="json" prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev))></textarea>
        </div>
    }
}

/// Broadcast, context append, plan replace and props patch: an agent of the node and a text or
/// JSON value. The plan editor starts from the chosen agent's plan at this node and shows the
/// shape a plan has.
#[component]
fn SocialForm(tree: Tree, node: u64, kind: String, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let agents = RwSignal::new(Vec::<AgentState>::new());
    if let Some(t) = tree.id.get_untracked().filter(|_| !tree.is_running(node)) {
        leptos::task::spawn_local(async move {
            if let Ok(state) = api::node_state(t, node).await {
                agents.try_set(state.agents);
            }
        });
    }
    let agent = RwSignal::new(String::new());
    let role = RwSignal::new("user".to_string());
    let content = RwSignal::new(String::new());
    let text = RwSignal::new("(announcement)".to_string());
    let json_text = RwSignal::new("{}".to_string());
    let plan = kind == "agent_plan_replace";
    Effect::new(move |_| {
        let list = agents.with(|l| l.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
        if !list.contains(&agent.get_untracked()) {
            agent.set(list.first().cloned().unwrap_or_default());
        }
    });
    // The plan editor shows the chosen agent's plan as it is at this node.
    Effect::new(move |_| {
        let name = agent.get();
        if plan && let Some(p) = agents.with(|l| l.iter().find(|a| a.name == name).map(|a| a.plan_state.clone())) {
            json_text.set(serde_json::to_string_pretty(&p).unwrap_or_default());
        }
    });
    let k = kind.clone();
    Effect::new(move |_| {
        let op = match k.as_str() {
            "public_broadcast" => Ok(Op::PublicBroadcast { text: text.get() }),
            "agent_ctx_append" => {
                Ok(Op::AgentCtxAppend { name: agent.get(), role: role.get(), content: content.get() })
            }
            "agent_plan_replace" => plan_from_text(&json_text.get())
                .map(|plan_state| Op::AgentPlanReplace { name: agent.get(), plan_state }),
            _ => parse_json::<Map<String, Value>>(&json_text.get())
                .map(|updates| Op::AgentPropsPatch { name: agent.get(), updates }),
        };
        draft.set(op);
    });
    let agent_select = view! {
        <div class="field">
            <label for="op-agent">{move || ctx.tr("sim.agent")}</label>
            <select id="op-agent" on:change=move |ev| agent.set(event_target_value(&ev)) prop:value=move || agent.get()>
                <For
                    each=move || agents.with(|l| l.iter().map(|a| a.name.clone()).collect::<Vec<_>>())
                    key=|a| a.clone()
                    children=move |a| view! { <option value=a.clone() selected=move || agent.get() == a>{a.clone()}</option> }
                />
            </select>
        </div>
    };
    match kind.as_str() {
        "public_broadcast" => labelled("simtree.broadcast", "op-text", text_input("op-text", text, "")).into_any(),
        "agent_ctx_append" => view! {
            {agent_select}
            <div class="field">
                <select id="op-role" on:change=move |ev| role.set(event_target_value(&ev)) prop:value=move || role.get()>
                    <option value="user">"user"</option>
                    <option value="assistant">"assistant"</option>
                </select>
                <textarea id="op-content" prop:value=move || content.get() on:input=move |ev| content.set(event_target_value(&ev))></textarea>
            </div>
        }
        .into_any(),
        _ => view! {
            {agent_select}
            <div class="field">
                <label for="op-json">{move || ctx.tr(if plan { "branch.planHelp" } else { "branch.jsonHelp" })}</label>
                <textarea id="op-json" class="json" prop:value=move || json_text.get() on:input=move |ev| json_text.set(event_target_value(&ev))></textarea>
                {plan.then(|| view! { <p id="op-plan-schema" class="muted"><code>{PLAN_SCHEMA}</code></p> })}
            </div>
        }
        .into_any(),
    }
}

/// Picks one of `fields` and types its new value, starting from the current one; says the
/// field's type, what it holds now, and whether the typed value parses.
#[component]
fn FieldPicker(fields: Signal<Vec<Field>>, picked: RwSignal<Option<Field>>, typed: RwSignal<String>) -> impl IntoView {
    let ctx = ctx();
    let name = RwSignal::new(String::new());
    // A new field list (another node, another agent type) keeps the name if it is still there.
    Effect::new(move |_| {
        let list = fields.get();
        let n = name.get();
        let f = list.iter().find(|f| f.name == n).or(list.first()).cloned();
        if let Some(f) = &f
            && picked.get_untracked().as_ref().map(|p| &p.name) != Some(&f.name)
        {
            typed.set(value_text(&f.current));
        }
        picked.set(f);
    });
    let check = move || {
        let f = picked.get()?;
        parse_value(f.ty, &typed.get()).err()
    };
    view! {
        <div class="field">
            <label for="op-field">{move || ctx.tr("branch.field")}</label>
            <select id="op-field" on:change=move |ev| name.set(event_target_value(&ev))>
                {move || fields.get().into_iter().map(|f| {
                    let n = f.name.clone();
                    view! { <option value=n.clone() selected=move || picked.with(|p| p.as_ref().map(|p| &p.name) == Some(&n))>{format!("{} ({})", f.name, f.ty.name())}</option> }
                }).collect_view()}
            </select>
        </div>
        {move || picked.get().map(|f| view! {
            <p id="op-field-now" class="muted">{format!("{}: {}", ctx.tr("branch.now"), f.now)} {(!f.description.is_empty()).then(|| format!(" — {}", f.description))}</p>
        })}
        <div class="field">
            <label for="op-value">{move || ctx.tr("branch.newValue")}</label>
            <input id="op-value" class=move || if check().is_some() { "invalid" } else { "" } prop:value=move || typed.get() on:input=move |ev| typed.set(event_target_value(&ev)) />
        </div>
    }
}

/// The scene state patch: a known key with its type and current value, plus JSON for the rest.
#[component]
fn ScenePatchForm(state: Value, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let fields = Signal::stored(social_fields(&state));
    let picked = RwSignal::new(None::<Field>);
    let typed = RwSignal::new(String::new());
    let json_text = RwSignal::new("{}".to_string());
    Effect::new(move |_| {
        let p = picked.get();
        draft.set(scene_patch(
            &json_text.get(),
            p.as_ref().map(|f| (f, typed.get())).as_ref().map(|(f, t)| (*f, t.as_str())),
        ));
    });
    view! {
        <FieldPicker fields picked typed />
        <div class="field">
            <label for="op-json">{move || ctx.tr("branch.moreJson")}</label>
            <textarea id="op-json" class="json" prop:value=move || json_text.get() on:input=move |ev| json_text.set(event_target_value(&ev))></textarea>
        </div>
    }
}

/// The prose the selected node's prompts carry, each part in its own box to edit; Apply sends
/// the parts typed differently (`scene_prose_set`), and the child's prompts carry them.
#[component]
fn ProseForm(about: simtree_shared::SceneAbout, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let now = StoredValue::new([about.description, about.rules, about.examples]);
    let typed = now.with_value(|n| n.clone().map(RwSignal::new));
    Effect::new(move |_| {
        let texts = typed.map(|t| t.get());
        draft.set(
            now.with_value(|n| crate::editors::prose_set([&n[0], &n[1], &n[2]], [&texts[0], &texts[1], &texts[2]])),
        );
    });
    let part = move |i: usize, id: &'static str, label: &'static str| {
        let sig = typed[i];
        view! {
            <div class="field">
                <label for=id>{move || ctx.tr(label)}</label>
                <textarea id=id class="prose" prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev))></textarea>
            </div>
        }
    };
    view! {
        <p class="hint muted">{move || ctx.tr("branch.proseHint")}</p>
        {part(0, "op-prose-description", "new.proseDescription")}
        {part(1, "op-prose-rules", "new.proseRules")}
        {part(2, "op-prose-examples", "new.proseExamples")}
    }
}

/// ABM globals, environment and agent attributes from the model's declarations, with what the
/// node holds: a value set by a branch op on its path since the last step, else the last step's
/// tracked value, else the declared initial value.
#[component]
fn AbmForm(tree: Tree, node: u64, view: AbmView, kind: String, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let target = match kind.as_str() {
        "abm_set_global" => AbmTarget::Global,
        "abm_set_environment" => AbmTarget::Environment,
        _ => AbmTarget::Agent,
    };
    let outline = StoredValue::new(view.outline());
    let logs = RwSignal::new(Vec::<LogEntry>::new());
    if let Some(t) = tree.id.get_untracked().filter(|_| !tree.is_running(node)) {
        leptos::task::spawn_local(async move {
            if let Ok(l) = api::node_logs(t, node).await {
                logs.try_set(l);
            }
        });
    }
    let all = Memo::new(move |_| {
        let values = logs.with(|l| last_abm_values(l));
        // (The edges' ops arrive apart from the graph: read again when they do.)
        let sets = tree.graph.with(|g| logs.with(|l| abm_sets(&g.path_to(node), &g.ops, l)));
        outline.with_value(|o| abm_fields(o, &values, &sets))
    });
    let agent_type = RwSignal::new(String::new());
    let agent_id = RwSignal::new(String::new());
    Effect::new(move |_| {
        let types: Vec<String> = all.with(|a| a.agents.iter().map(|(k, _)| k.clone()).collect());
        if !types.contains(&agent_type.get_untracked()) {
            agent_type.set(types.first().cloned().unwrap_or_default());
        }
    });
    let fields = Signal::derive(move || {
        all.with(|a| match target {
            AbmTarget::Global => a.globals.clone(),
            AbmTarget::Environment => a.environment.clone(),
            AbmTarget::Agent => {
                let t = agent_type.get();
                a.agents.iter().find(|(k, _)| *k == t).map(|(_, f)| f.clone()).unwrap_or_default()
            }
        })
    });
    let picked = RwSignal::new(None::<Field>);
    let typed = RwSignal::new(String::new());
    // The node's agents of the chosen type, when their ids are certain (see `abm_agent_ids`).
    let agent_ids = Memo::new(move |_| {
        let attr = picked.with(|p| p.as_ref().map(|f| f.name.clone()).unwrap_or_default());
        let t = agent_type.get();
        outline.with_value(|o| logs.with(|l| abm_agent_ids(o, l, &t, &attr)))
    });
    Effect::new(move |_| {
        draft.set(match picked.get() {
            None => Err(ctx.tr("branch.noFields").to_string()),
            Some(f) => abm_op(target, &f, &typed.get(), &agent_type.get(), &agent_id.get()),
        });
    });
    view! {
        {(target == AbmTarget::Agent).then(|| view! {
            <div class="field">
                <label for="op-agent-type">{move || ctx.tr("branch.agentType")}</label>
                <select id="op-agent-type" on:change=move |ev| agent_type.set(event_target_value(&ev)) prop:value=move || agent_type.get()>
                    {move || all.with(|a| a.agents.iter().map(|(k, _)| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view())}
                </select>
            </div>
            {move || agent_ids.get().map(|ids| view! {
                <div class="field">
                    <label for="op-agent-pick">{move || ctx.tr("branch.agentPick")}</label>
                    <select id="op-agent-pick" on:change=move |ev| agent_id.set(event_target_value(&ev)) prop:value=move || agent_id.get()>
                        <option value="">{move || ctx.tr("branch.allAgents")}</option>
                        {ids.into_iter().map(|(id, now)| {
                            let value = id.to_string();
                            view! { <option value=value.clone() selected=move || agent_id.get() == value>{format!("#{id} · {now}")}</option> }
                        }).collect_view()}
                    </select>
                </div>
            })}
            {labelled("branch.agentId", "op-agent-id", text_input("op-agent-id", agent_id, "all"))}
        })}
        <FieldPicker fields picked typed />
    }
}

/// Trading: cash and positions, a dated information item, another agent, a new prompt; each
/// "now" and each start value is the node's (`view`).
#[component]
fn TradingForm(view: TradingView, kind: String, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let cash = RwSignal::new(String::new());
    // One input per ticker, made with the form (and owned by it): a re-read of the node cannot
    // dispose of what the inputs write to.
    // Held as the node holds it: a short position shows as negative, not as 0.
    let shares: Vec<(String, i64, RwSignal<String>)> =
        view.tickers.iter().map(|t| (t.clone(), view.portfolio.shares(t), RwSignal::new(String::new()))).collect();
    let item_kind = RwSignal::new("news".to_string());
    let date = RwSignal::new(view.next_date.clone().unwrap_or_default());
    let content = RwSignal::new(String::new());
    let agent = RwSignal::new("momentum".to_string());
    let lookback = RwSignal::new(String::new());
    let band = RwSignal::new(String::new());
    let history = RwSignal::new(String::new());
    let prompt = RwSignal::new(match &view.agent {
        AgentSpec::Llm { system_prompt: Some(p), .. } => p.clone(),
        _ => String::new(),
    });
    let k = kind.clone();
    let inputs = shares.clone();
    Effect::new(move |_| {
        draft.set(match k.as_str() {
            "portfolio_patch" => {
                let typed: Vec<(String, String)> = inputs.iter().map(|(t, _, s)| (t.clone(), s.get())).collect();
                portfolio_patch(&cash.get(), &typed)
            }
            "case_data_inject" => news_item(&item_kind.get(), &date.get(), &content.get()),
            "agent_swap" => agent_swap(&agent.get(), &lookback.get(), &band.get(), &history.get(), &prompt.get()),
            _ => prompt_replace(&prompt.get()),
        });
    });
    let now_cash = crate::ops::grouped(view.portfolio.cash);
    let cash_label = now_cash.clone();
    let prompt_box = move || {
        view! { <textarea id="op-prompt" prop:value=move || prompt.get() on:input=move |ev| prompt.set(event_target_value(&ev))></textarea> }
    };
    match kind.as_str() {
        "portfolio_patch" => view! {
            <div class="field">
                <label for="op-cash">{move || format!("{} ({}: {})", ctx.tr("branch.cash"), ctx.tr("branch.now"), cash_label)}</label>
                <input id="op-cash" inputmode="decimal" placeholder=now_cash prop:value=move || cash.get() on:input=move |ev| cash.set(event_target_value(&ev)) />
            </div>
            {shares.into_iter().map(|(t, now, sig)| {
                let id = format!("op-shares-{t}");
                view! {
                    <div class="row">
                        <label for=id.clone()>{move || format!("{t} ({}: {})", ctx.tr("branch.now"), crate::ops::grouped(now as f64))}</label>
                        <input id=id class="shares" inputmode="numeric" placeholder=now.to_string() prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev)) />
                    </div>
                }
            }).collect_view()}
            <p class="muted">{move || ctx.tr("branch.portfolioHelp")}</p>
        }
        .into_any(),
        "case_data_inject" => view! {
            <div class="row">
                <select id="op-item-kind" on:change=move |ev| item_kind.set(event_target_value(&ev)) prop:value=move || item_kind.get()>
                    <option value="news">"news"</option>
                    <option value="earnings">"earnings"</option>
                    <option value="other">"other"</option>
                </select>
                <input id="op-date" type="date" prop:value=move || date.get() on:input=move |ev| date.set(event_target_value(&ev)) />
            </div>
            {labelled("branch.content", "op-content", view! {
                <textarea id="op-content" prop:value=move || content.get() on:input=move |ev| content.set(event_target_value(&ev))></textarea>
            })}
        }
        .into_any(),
        "agent_swap" => view! {
            <div class="field">
                <label for="op-agent-kind">{move || ctx.tr("branch.agentKind")}</label>
                <select id="op-agent-kind" on:change=move |ev| agent.set(event_target_value(&ev)) prop:value=move || agent.get()>
                    {["buy_and_hold", "momentum", "mean_reversion", "llm"].map(|a| view! { <option value=a selected=move || agent.get() == a>{a}</option> }).collect_view()}
                </select>
            </div>
            <Show when=move || matches!(agent.get().as_str(), "momentum" | "mean_reversion")>
                {labelled("branch.lookback", "op-lookback", text_input("op-lookback", lookback, "10"))}
            </Show>
            <Show when=move || agent.get() == "mean_reversion">
                {labelled("branch.band", "op-band", text_input("op-band", band, "2.0"))}
            </Show>
            <Show when=move || agent.get() == "llm">
                {labelled("branch.history", "op-history", text_input("op-history", history, "4"))}
                {labelled("branch.prompt", "op-prompt", prompt_box())}
            </Show>
        }
        .into_any(),
        _ => labelled("branch.prompt", "op-prompt", prompt_box()).into_any(),
    }
}
