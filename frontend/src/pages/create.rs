//! The create panel: scenario, seed, token budget, LLM player; Create and Refresh.

use leptos::prelude::*;
use simtree_shared::{CreateRequest, ScenarioSummary, SimKind};

use crate::api;
use crate::field::labelled;
use crate::route::Route;
use crate::state::{Tree, ctx};
use crate::wait::count_seconds;

/// The LLM choices of the create form: the offline mock (the default), and the server's own LLM
/// settings, which the form sends as no `llm` at all (the server does not say which provider it
/// is configured with, so the form cannot name it).
pub(super) const MOCK: &str = "mock";
pub(super) const SERVER_LLM: &str = "server";

/// The player picker of a social tree (the mock, the scripted player, or the server's own LLM
/// settings), bound to `llm`; what it holds becomes [`create_llm`]'s answer.
pub(super) fn player_field(id: &'static str, note: &'static str, llm: RwSignal<String>) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div class="field">
            <label for=id>{move || ctx.tr("create.llm")}</label>
            <select id=id on:change=move |ev| llm.set(event_target_value(&ev)) prop:value=move || llm.get()>
                <option value=MOCK selected=move || llm.get() == MOCK>{move || ctx.tr("create.llmMock")}</option>
                <option value="scripted" selected=move || llm.get() == "scripted">{move || ctx.tr("create.llmScripted")}</option>
                <option value=SERVER_LLM selected=move || llm.get() == SERVER_LLM>{move || ctx.tr("create.llmServer")}</option>
            </select>
            <p id=note class="hint muted">{move || ctx.tr("create.llmNote")}</p>
        </div>
    }
}

/// A create request's `llm` for the picker's choice: an offline player by name, or none (the
/// server's own settings).
pub(super) fn create_llm(choice: String) -> Option<String> {
    Some(choice).filter(|l| l != SERVER_LLM)
}

/// Scenario picker, seed, token budget, the LLM player (social scenes), and Create / Refresh.
#[component]
pub(super) fn CreatePanel(studio: bool, #[prop(optional)] tree: Option<Tree>) -> impl IntoView {
    let ctx = ctx();
    let scenarios = RwSignal::new(Vec::<ScenarioSummary>::new());
    let choice = RwSignal::new("simple_chat".to_string());
    let seed = RwSignal::new(String::new());
    let budget = RwSignal::new(String::new());
    let llm = RwSignal::new(MOCK.to_string());
    // A create in flight (the first agent-based tree starts the Python worker: seconds), the
    // seconds it has waited, and the server's refusal.
    let creating = RwSignal::new(false);
    let waited = RwSignal::new(0u32);
    let error = RwSignal::new(None::<String>);
    // The player matters to social scenes only (trading and ABM trees ignore it).
    let social = move || {
        let id = choice.get();
        scenarios.with(|l| l.iter().find(|s| s.id == id).is_none_or(|s| s.kind == SimKind::Social))
    };
    // What the chosen scenario is, in its own words.
    let description = move || {
        let id = choice.get();
        scenarios.with(|l| l.iter().find(|s| s.id == id).map(|s| s.description.clone()))
    };
    leptos::task::spawn_local(async move {
        match api::scenarios().await {
            Ok(list) => scenarios.set(list),
            Err(e) => ctx.error(e),
        }
    });
    let create = move |_| {
        let body = CreateRequest {
            scenario: choice.get().into(),
            name: None,
            seed: seed.get().trim().parse::<u64>().ok(),
            token_budget: budget.get().trim().parse::<u64>().ok(),
            money_budget: None,
            llm: create_llm(llm.get()).filter(|_| social()),
            prompt_layout: None,
        };
        if creating.get_untracked() {
            return;
        }
        creating.set(true);
        count_seconds(creating, waited);
        error.set(None);
        leptos::task::spawn_local(async move {
            let reply = api::create_tree(&body).await;
            creating.try_set(false);
            match reply {
                Ok(r) => {
                    api::storage_set("devui:lastTreeId", &r.id.to_string());
                    ctx.navigate(if studio { Route::Studio(Some(r.id)) } else { Route::SimTree(Some(r.id)) });
                }
                Err(e) => {
                    if let Some(m) = ctx.refusal(e) {
                        error.try_set(Some(m));
                    }
                }
            }
        });
    };
    let scenario = view! {
        <select id="scenario-select" on:change=move |ev| choice.set(event_target_value(&ev)) prop:value=move || choice.get()>
            <For
                each=move || scenarios.get()
                key=|s| s.id.clone()
                children=move |ScenarioSummary { id, title, .. }| view! { <option value=id.clone() selected=move || choice.get() == id>{format!("{id} — {title}")}</option> }
            />
        </select>
        <p id="scenario-desc" class="hint muted">{description}</p>
    };
    view! {
        <section class="panel">
            <h3>{move || ctx.tr("simtree.createNew")}</h3>
            {labelled("create.scenario", "scenario-select", scenario)}
            <div class="row">
                <label>{move || ctx.tr("create.seed")}</label>
                <input id="seed-input" type="number" min="0" placeholder="0" prop:value=move || seed.get() on:input=move |ev| seed.set(event_target_value(&ev)) />
                <label>{move || ctx.tr("create.budget")}</label>
                <input id="budget-input" type="number" min="1" placeholder="∞" prop:value=move || budget.get() on:input=move |ev| budget.set(event_target_value(&ev)) />
            </div>
            <Show when=social>{player_field("llm-select", "llm-note", llm)}</Show>
            <div class="row">
                <button id="create-btn" class="primary" disabled=move || creating.get() on:click=create>{move || ctx.tr("common.create")}</button>
                <button id="refresh-btn" disabled=move || tree.is_none() on:click=move |_| if let Some(t) = tree { t.refresh() }>
                    {move || ctx.tr("common.refresh")}
                </button>
                <Show when=move || creating.get()>
                    <span id="create-busy" class="muted">
                        {move || ctx.tr("create.working").replace("{{s}}", &waited.get().to_string())}
                    </span>
                </Show>
            </div>
            {move || error.get().map(|e| view! { <p id="create-error" class="reason">{e}</p> })}
        </section>
    }
}
