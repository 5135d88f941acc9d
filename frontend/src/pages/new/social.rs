//! The social scenario's form: title, the scene (type, name, opening event, the type's own
//! settings, its prose), the agents (name, profile, style, action space), who acts next, the
//! initial public events and the turn limits.
//!
//! The scene type decides which actions an agent may pick (`draft::actions_of`, the server's own
//! list) and what prose its prompts carry: the prose fields show the type's default text (from
//! `GET /api/scene-types`) until the author writes their own.

use leptos::prelude::*;

use super::{Doc, choice_field, list_field, number_field, text_field};
use simtree_shared::SceneTypeInfo;

use crate::draft::{
    ORDERINGS, actions_of, add_agent, agent_count, agent_names, has_action, roles_of, roles_value, scene_types, set_at,
    set_ordering, set_scene_type, text_value, toggle_action,
};
use crate::state::ctx;

/// The scene types as the server describes them (empty until they arrive).
type Types = RwSignal<Vec<SceneTypeInfo>>;

#[component]
pub(super) fn SocialForm(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    // A memo: the type's own form is drawn again only when the type changes, not on every edit
    // (which would take the focus from the field being typed in).
    let scene = Memo::new(move |_| doc.text("/scene/type"));
    let ordering = move || doc.text("/ordering/kind");
    let types: Types = RwSignal::new(Vec::new());
    leptos::task::spawn_local(async move {
        match crate::api::scene_types().await {
            Ok(t) => {
                types.try_set(t);
            }
            Err(e) => ctx.error(e),
        }
    });
    view! {
        <section id="social-form" class="panel new-form">
            <h3>{move || ctx.tr("new.scenario")}</h3>
            {text_field(doc, "new-title".into(), "new.title", "/title".into(), false)}
            {text_field(doc, "new-description".into(), "new.description", "/description".into(), true)}
            <h3>{move || ctx.tr("new.scene")}</h3>
            {choice_field(doc, "scene-type", "new.sceneType", scene_types(), move || scene.get(), set_scene_type)}
            {text_field(doc, "scene-name".into(), "new.sceneName", "/scene/name".into(), false)}
            {text_field(doc, "initial-event".into(), "new.initialEvent", "/scene/initial_event".into(), true)}
            <p id="scene-summary" class="hint muted">{move || {
                let s = scene.get();
                types.with(|t| t.iter().find(|t| t.kind.name() == s).map(|t| t.summary.clone()))
            }}</p>
            {move || scene_config(doc, &scene.get())}
            // A custom scene's prose is its own setting and rules (in its form above).
            <details id="scene-prose" class:hidden=move || scene.get() == "custom">
                <summary>{move || ctx.tr("new.prose")}</summary>
                <p class="hint muted">{move || ctx.tr("new.proseHint")}</p>
                {prose_field(doc, types, "description", "new.proseDescription", |t| &t.description)}
                {prose_field(doc, types, "rules", "new.proseRules", |t| &t.rules)}
                {prose_field(doc, types, "examples", "new.proseExamples", |t| &t.examples)}
            </details>
            <h3>{move || ctx.tr("new.agents")}</h3>
            <For each=move || 0..doc.value.with(agent_count) key=|i| *i children=move |i| agent_card(doc, i, types) />
            <button id="add-agent" on:click=move |_| doc.edit(add_agent)>{move || ctx.tr("new.addAgent")}</button>
            <h3>{move || ctx.tr("new.ordering")}</h3>
            {choice_field(doc, "ordering-kind", "new.orderingKind", ORDERINGS, ordering, set_ordering)}
            {move || match ordering().as_str() {
                "cycled" => list_field(doc, "ordering-names", "new.orderingNames", "/ordering/names", false).into_any(),
                "llm_moderated" => view! {
                    <div class="row">
                        <label for="ordering-moderator">{move || ctx.tr("new.moderator")}</label>
                        <select id="ordering-moderator" on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, "/ordering/moderator", Some(v.into()))) }>
                            {move || {
                                let chosen = doc.text("/ordering/moderator");
                                doc.value
                                    .with(agent_names)
                                    .into_iter()
                                    .map(|n| view! { <option value=n.clone() selected=chosen == n>{n.clone()}</option> })
                                    .collect_view()
                            }}
                        </select>
                    </div>
                }
                .into_any(),
                _ => ().into_any(),
            }}
            <h3>{move || ctx.tr("new.events")}</h3>
            {list_field(doc, "broadcasts", "new.broadcasts", "/broadcasts", true)}
            <div class="row">
                {number_field(doc, "max-steps", "new.maxSteps", "/max_steps_per_turn")}
                {number_field(doc, "default-turns", "new.defaultTurns", "/default_turns")}
            </div>
        </section>
    }
}

/// The scene type's own settings (the rest — a village's map — is edited in the JSON view).
fn scene_config(doc: Doc, scene: &str) -> AnyView {
    let ctx = ctx();
    match scene {
        "werewolf" => view! {
            {list_field(doc, "werewolf-moderators", "new.moderators", "/scene/config/moderators", false)}
            <div class="field">
                <label for="werewolf-roles">{move || ctx.tr("new.roles")}</label>
                <textarea id="werewolf-roles" placeholder="Ann: werewolf\nBen: seer" prop:value=move || doc.value.with(roles_of)
                    on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, "/scene/config/role_map", Some(roles_value(&v)))) }></textarea>
            </div>
        }
        .into_any(),
        "landlord" => view! {
            <div class="row">
                <label for="landlord-decks">{move || ctx.tr("new.decks")}</label>
                <select id="landlord-decks" on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, "/scene/config/num_decks", crate::draft::number_value(&v))) }>
                    {["1", "2"].map(|n| view! { <option value=n selected=move || doc.text("/scene/config/num_decks") == n>{n}</option> }).collect_view()}
                </select>
                <span class="hint muted">{move || ctx.tr("new.landlordHint")}</span>
            </div>
        }
        .into_any(),
        "village" => view! {
            <div class="row">
                {super::number_field(doc, "village-chat-range", "new.chatRange", "/scene/config/chat_range")}
                {super::number_field(doc, "village-movement-cost", "new.movementCost", "/scene/config/movement_cost")}
            </div>
            <p class="hint muted">{move || ctx.tr("new.villageHint")}</p>
        }
        .into_any(),
        "custom" => view! { <super::custom::CustomForm doc /> }.into_any(),
        _ => ().into_any(),
    }
}

/// A custom scene agent's role (`properties.role`), one of the scene's roles.
fn role_field(doc: Doc, i: usize) -> impl IntoView {
    let ctx = ctx();
    let ptr = format!("/agents/{i}/properties/role");
    let shown = ptr.clone();
    let marked = ptr.clone();
    view! {
        <div class="row">
            <label for=format!("agent-{i}-role")>{move || ctx.tr("new.agentRole")}</label>
            <select id=format!("agent-{i}-role") class=move || doc.field_class(&marked)
                on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, &ptr, Some(v.into()))) }>
                {move || {
                    let chosen = doc.text(&shown);
                    let mut roles = doc.value.with(crate::scene_form::role_names);
                    if !chosen.is_empty() && !roles.contains(&chosen) {
                        roles.push(chosen.clone());
                    }
                    roles
                        .into_iter()
                        .map(|r| view! { <option value=r.clone() selected=chosen == r>{r.clone()}</option> })
                        .collect_view()
                }}
            </select>
        </div>
    }
}

/// One part of the scene's prose (`scene.prose.{part}`): the document's own text, or, while it
/// has none, the scene type's default shown as the placeholder. Emptied, the default is back.
fn prose_field(
    doc: Doc,
    types: Types,
    part: &'static str,
    label: &'static str,
    default: fn(&SceneTypeInfo) -> &String,
) -> impl IntoView {
    let ctx = ctx();
    let ptr = format!("/scene/prose/{part}");
    let shown = ptr.clone();
    let marked = ptr.clone();
    let id = format!("scene-prose-{part}");
    let placeholder = move || {
        let scene = doc.text("/scene/type");
        types.with(|t| t.iter().find(|t| t.kind.name() == scene).map(|t| default(t).clone()))
    };
    let copy_to = ptr.clone();
    let copy = move |_| {
        if let Some(text) = placeholder().filter(|t| !t.is_empty()) {
            doc.edit(|d| set_at(d, &copy_to, Some(text.into())));
        }
    };
    let own = shown.clone();
    view! {
        <div class="field">
            <div class="row">
                <label for=id.clone()>{move || ctx.tr(label)}</label>
                <span class="spacer"></span>
                <button class="ghost" id=format!("{id}-default") on:click=copy
                    disabled=move || !doc.text(&own).is_empty() || placeholder().is_none_or(|t| t.is_empty())>
                    {move || ctx.tr("new.proseCopy")}
                </button>
            </div>
            <textarea id=id rows="4" class=move || doc.field_class(&marked) placeholder=placeholder
                prop:value=move || doc.text(&shown)
                on:input=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, &ptr, text_value(&v))) }></textarea>
        </div>
    }
}

/// The line an action has in the prompts of this document: its own prose, else the type's.
fn action_line(doc: Doc, types: Types, action: &str) -> String {
    let own = doc.text(&format!("/scene/prose/actions/{action}/description"));
    if !own.is_empty() {
        return own;
    }
    let scene = doc.text("/scene/type");
    types.with(|t| {
        t.iter()
            .find(|t| t.kind.name() == scene)
            .and_then(|t| t.actions.iter().find(|a| a.name.name() == action))
            .map(|a| a.description.clone())
            .unwrap_or_default()
    })
}

/// One agent: name, profile, style, its actions (the scene type's), and a button to remove it.
fn agent_card(doc: Doc, i: usize, types: Types) -> impl IntoView {
    let ctx = ctx();
    let at = move |field: &str| format!("/agents/{i}/{field}");
    let actions = move || {
        actions_of(&doc.text("/scene/type"))
            .into_iter()
            .map(|a| {
                view! {
                    <label class="action-chip" title=move || action_line(doc, types, a)>
                        <input type="checkbox" id=format!("agent-{i}-action-{a}")
                            prop:checked=move || doc.value.with(|d| has_action(d, i, a))
                            on:change=move |_| doc.edit(|d| toggle_action(d, i, a)) />
                        {a}
                    </label>
                }
            })
            .collect_view()
    };
    view! {
        <div class="agent-card" data-index=i.to_string()>
            <div class="row">
                <strong>{move || format!("#{} {}", i + 1, doc.text(&at("name")))}</strong>
                <span class="spacer"></span>
                <button class="ghost" id=format!("agent-{i}-remove") title=move || ctx.tr("new.removeAgent")
                    on:click=move |_| doc.edit(|d| set_at(d, &format!("/agents/{i}"), None))>"×"</button>
            </div>
            {text_field(doc, format!("agent-{i}-name"), "new.agentName", at("name"), false)}
            {text_field(doc, format!("agent-{i}-profile"), "new.profile", at("user_profile"), true)}
            {text_field(doc, format!("agent-{i}-style"), "new.style", at("style"), false)}
            <Show when=move || doc.text("/scene/type") == "custom">{role_field(doc, i)}</Show>
            <div class="field">
                <label>{move || ctx.tr("new.actions")}</label>
                <div class=move || format!("actions-grid {}", doc.field_class(&at("action_space")))>{actions}</div>
            </div>
        </div>
    }
}
