//! The branch editor: one form per op kind of the open tree's kind, pre-filled from the selected
//! node and validated as the user types, plus custom JSON as the expert mode.
//!
//! Each form keeps its inputs in local signals and writes the op it would send (or the reason it
//! cannot) into one `draft` signal; the editor's Apply button sends the draft, asking first when
//! [`needs_confirm`] says the op destroys something. Turning inputs into ops is
//! [`crate::editors`]'s job (pure, tested natively); this file only wires it to the DOM.

use leptos::prelude::*;
use serde_json::{Map, Value};
use simtree_shared::trading::AgentSpec;
use simtree_shared::{LogEntry, NodeView, Op};

use crate::api::{self, ApiError};
use crate::editors::{
    AbmTarget, Field, abm_agent_ids, abm_fields, abm_op, agent_swap, last_abm_values, news_item, op_kinds, parse_value,
    portfolio_patch, prompt_replace, scene_patch, social_fields, value_text,
};
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
fn labelled(label: &'static str, for_id: &'static str, body: impl IntoView) -> impl IntoView {
    let ctx = ctx();
    view! { <div class="field"><label for=for_id>{move || ctx.tr(label)}</label>{body}</div> }
}

/// Agent names of the selected node (for the social forms' agent list).
fn agents_of(tree: Tree) -> RwSignal<Vec<String>> {
    let agents = RwSignal::new(Vec::new());
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(state) = api::node_state(t, n).await {
                agents.set(state.agents.into_iter().map(|a| a.name).collect());
            }
        });
    });
    agents
}

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
        Err(e) => ctx.error(ApiError::Client(if e.is_empty() {
            "nothing to apply".into()
        } else {
            e
        })),
        Ok(op) => match needs_confirm(&op) {
            Some(q) => pending.set(Some((op, q))),
            None => send(op),
        },
    };
    let form = move || {
        let k = kind.get();
        match k.as_str() {
            "custom" => view! { <CustomForm tree draft /> }.into_any(),
            "public_broadcast" | "agent_ctx_append" | "agent_plan_replace" | "agent_props_patch" => {
                view! { <SocialForm tree kind=k draft /> }.into_any()
            }
            "scene_state_patch" => view! { <ScenePatchForm node_view draft /> }.into_any(),
            "abm_set_global" | "abm_set_environment" | "abm_set_agent" => {
                view! { <AbmForm tree node_view kind=k draft /> }.into_any()
            }
            _ => view! { <TradingForm node_view kind=k draft /> }.into_any(),
        }
    };
    view! {
        <section class="panel branch">
            <h3>{move || ctx.tr("simtree.branch")}</h3>
            <div class="field">
                <label for="op-kind">{move || ctx.tr("simtree.opKind")}</label>
                <select id="op-kind" on:change=move |ev| kind.set(event_target_value(&ev)) prop:value=move || kind.get()>
                    {move || op_kinds(tree.kind.get()).iter().map(|k| {
                        let label = if *k == "custom" { ctx.tr("branch.custom").to_string() } else { k.to_string() };
                        view! { <option value=*k selected=move || kind.get() == *k>{label}</option> }
                    }).collect_view()}
                </select>
            </div>
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

/// Broadcast, context append, plan replace and props patch: an agent and a text or JSON value.
#[component]
fn SocialForm(tree: Tree, kind: String, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let agents = agents_of(tree);
    let agent = RwSignal::new(String::new());
    let role = RwSignal::new("user".to_string());
    let content = RwSignal::new(String::new());
    let text = RwSignal::new("(announcement)".to_string());
    let json_text = RwSignal::new("{}".to_string());
    Effect::new(move |_| {
        let list = agents.get();
        if !list.contains(&agent.get_untracked()) {
            agent.set(list.first().cloned().unwrap_or_default());
        }
    });
    let k = kind.clone();
    Effect::new(move |_| {
        let op = match k.as_str() {
            "public_broadcast" => Ok(Op::PublicBroadcast { text: text.get() }),
            "agent_ctx_append" => Ok(Op::AgentCtxAppend {
                name: agent.get(),
                role: role.get(),
                content: content.get(),
            }),
            "agent_plan_replace" => parse_json::<Value>(&json_text.get()).map(|plan_state| Op::AgentPlanReplace {
                name: agent.get(),
                plan_state,
            }),
            _ => parse_json::<Map<String, Value>>(&json_text.get()).map(|updates| Op::AgentPropsPatch {
                name: agent.get(),
                updates,
            }),
        };
        draft.set(op);
    });
    let agent_select = view! {
        <div class="field">
            <label for="op-agent">{move || ctx.tr("sim.agent")}</label>
            <select id="op-agent" on:change=move |ev| agent.set(event_target_value(&ev)) prop:value=move || agent.get()>
                <For each=move || agents.get() key=|a| a.clone() children=move |a| view! { <option value=a.clone()>{a.clone()}</option> } />
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
                <label for="op-json">{move || ctx.tr("branch.jsonHelp")}</label>
                <textarea id="op-json" class="json" prop:value=move || json_text.get() on:input=move |ev| json_text.set(event_target_value(&ev))></textarea>
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
fn ScenePatchForm(node_view: RwSignal<Option<NodeView>>, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let fields = Signal::derive(move || {
        node_view.with(|v| {
            v.as_ref()
                .and_then(NodeView::social)
                .map(|v| social_fields(&v.state))
                .unwrap_or_default()
        })
    });
    let picked = RwSignal::new(None::<Field>);
    let typed = RwSignal::new(String::new());
    let json_text = RwSignal::new("{}".to_string());
    Effect::new(move |_| {
        let p = picked.get();
        draft.set(scene_patch(
            &json_text.get(),
            p.as_ref()
                .map(|f| (f, typed.get()))
                .as_ref()
                .map(|(f, t)| (*f, t.as_str())),
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

/// ABM globals, environment and agent attributes from the model's declarations, with the values
/// of the node's last step.
#[component]
fn AbmForm(tree: Tree, node_view: RwSignal<Option<NodeView>>, kind: String, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let target = match kind.as_str() {
        "abm_set_global" => AbmTarget::Global,
        "abm_set_environment" => AbmTarget::Environment,
        _ => AbmTarget::Agent,
    };
    let logs = RwSignal::new(Vec::<LogEntry>::new());
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(l) = api::node_logs(t, n).await {
                logs.set(l);
            }
        });
    });
    let all = Memo::new(move |_| {
        let values = logs.with(|l| last_abm_values(l));
        node_view.with(|v| {
            v.as_ref()
                .and_then(NodeView::abm)
                .map(|v| abm_fields(&v.outline(), &values))
                .unwrap_or_default()
        })
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
                a.agents
                    .iter()
                    .find(|(k, _)| *k == t)
                    .map(|(_, f)| f.clone())
                    .unwrap_or_default()
            }
        })
    });
    let picked = RwSignal::new(None::<Field>);
    let typed = RwSignal::new(String::new());
    // The node's agents of the chosen type, when their ids are certain (see `abm_agent_ids`).
    let agent_ids = Memo::new(move |_| {
        let attr = picked.with(|p| p.as_ref().map(|f| f.name.clone()).unwrap_or_default());
        let t = agent_type.get();
        node_view.with(|v| logs.with(|l| abm_agent_ids(&v.as_ref()?.abm()?.outline(), l, &t, &attr)))
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

/// Trading: cash and positions, a dated information item, another agent, a new prompt.
#[component]
fn TradingForm(node_view: RwSignal<Option<NodeView>>, kind: String, draft: Draft) -> impl IntoView {
    let ctx = ctx();
    let cash = RwSignal::new(String::new());
    let shares = RwSignal::new(Vec::<(String, RwSignal<String>)>::new());
    let item_kind = RwSignal::new("news".to_string());
    let date = RwSignal::new(String::new());
    let content = RwSignal::new(String::new());
    let agent = RwSignal::new("momentum".to_string());
    let lookback = RwSignal::new(String::new());
    let band = RwSignal::new(String::new());
    let history = RwSignal::new(String::new());
    let prompt = RwSignal::new(String::new());
    // Pre-fill from the node: its tickers, its next decision date, its prompt. The view is
    // re-read on every tree message; the memo changes only when these do, so typing survives.
    let start = Memo::new(move |_| {
        node_view.with(|v| {
            let v = v.as_ref()?.trading()?;
            let system = match &v.agent {
                AgentSpec::Llm {
                    system_prompt: Some(p), ..
                } => p.clone(),
                _ => String::new(),
            };
            Some((v.tickers.clone(), v.next_date.clone().unwrap_or_default(), system))
        })
    });
    Effect::new(move |_| {
        let Some((tickers, next, system)) = start.get() else {
            return;
        };
        if shares.with_untracked(|s| s.iter().map(|(t, _)| t).ne(tickers.iter())) {
            shares.set(tickers.into_iter().map(|t| (t, RwSignal::new(String::new()))).collect());
        }
        date.set(next);
        prompt.set(system);
    });
    let holding = move |t: &str| {
        node_view.with(|v| {
            v.as_ref()
                .and_then(NodeView::trading)
                .map_or(0, |v| u64::try_from(v.portfolio.shares(t)).unwrap_or(0))
        })
    };
    let k = kind.clone();
    Effect::new(move |_| {
        draft.set(match k.as_str() {
            "portfolio_patch" => {
                let typed: Vec<(String, String)> = shares.get().iter().map(|(t, s)| (t.clone(), s.get())).collect();
                portfolio_patch(&cash.get(), &typed)
            }
            "case_data_inject" => news_item(&item_kind.get(), &date.get(), &content.get()),
            "agent_swap" => agent_swap(
                &agent.get(),
                &lookback.get(),
                &band.get(),
                &history.get(),
                &prompt.get(),
            ),
            _ => prompt_replace(&prompt.get()),
        });
    });
    let now_cash = move || {
        node_view.with(|v| {
            v.as_ref()
                .map(|v| crate::ops::grouped(v.trading().map_or(0.0, |t| t.portfolio.cash)))
                .unwrap_or_default()
        })
    };
    let prompt_box = move || {
        view! { <textarea id="op-prompt" prop:value=move || prompt.get() on:input=move |ev| prompt.set(event_target_value(&ev))></textarea> }
    };
    match kind.as_str() {
        "portfolio_patch" => view! {
            <div class="field">
                <label for="op-cash">{move || format!("{} ({}: {})", ctx.tr("branch.cash"), ctx.tr("branch.now"), now_cash())}</label>
                <input id="op-cash" inputmode="decimal" placeholder=now_cash prop:value=move || cash.get() on:input=move |ev| cash.set(event_target_value(&ev)) />
            </div>
            <For each=move || shares.get() key=|(t, _)| t.clone() children=move |(t, sig)| {
                let id = format!("op-shares-{t}");
                let now = holding(&t);
                view! {
                    <div class="row">
                        <label for=id.clone()>{format!("{t} ({}: {now})", ctx.tr("branch.now"))}</label>
                        <input id=id class="shares" inputmode="numeric" placeholder=now.to_string() prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev)) />
                    </div>
                }
            } />
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
