//! The custom scene's form (`scene.type: custom`): the setting and rules, then each list of the
//! scene's `config` — roles, variables, actions (parameters, requirements, effects), phases
//! (actors, how they end, what comes next), tallies, outcomes, endings, metrics — as rows to
//! add, edit and remove. Every field is labelled with its JSON key, as docs/scenarios.md
//! describes it, and edits one place of the same document the JSON view shows; the one-of
//! values (an effect, `actors`, `ends`, `visibility`) get a kind picker. The pure part is
//! [`crate::scene_form`].

use leptos::prelude::*;
use serde_json::Value;

use super::Doc;
use super::describe::{Describe, Written};
use crate::api;
use crate::draft::{self, names_of, names_value, set_at, text_value};
use crate::scene_form::{
    ACTORS, EFFECTS, ENDS, Inner, ORDERS, PARAM_TYPES, TALLY_KINDS, VAR_TYPES, VISIBILITY, field_id, json_or_text,
    kind_at, len_at, new_item, push_at, set_kind, set_param_type,
};
use crate::state::ctx;

const CONFIG: &str = "/scene/config";

#[component]
pub(super) fn CustomForm(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    let at = |rest: &str| format!("{CONFIG}/{rest}");
    view! {
        <div id="custom-form" class="custom-form">
            <Describe doc prefix="custom" title="new.describeScene" hint="new.describeSceneHint" base=Value::clone write=write_scene />
            <p class="hint muted">{move || ctx.tr("new.customHint")}</p>
            {text(doc, at("setting"), true)}
            {text(doc, at("rules"), true)}
            {list(doc, at("roles"), "roles", "new.cRoles", |doc, p| view! {
                {text(doc, format!("{p}/name"), false)}
                {text(doc, format!("{p}/instructions"), true)}
                {flag(doc, format!("{p}/moderator"))}
            }.into_any())}
            {list(doc, at("variables"), "variables", "new.cVariables", |doc, p| view! {
                {text(doc, format!("{p}/name"), false)}
                {choice(doc, format!("{p}/type"), &VAR_TYPES)}
                {value(doc, format!("{p}/initial"))}
                {flag(doc, format!("{p}/per_agent"))}
                {flag(doc, format!("{p}/hidden"))}
            }.into_any())}
            {list(doc, at("actions"), "actions", "new.cActions", action)}
            {list(doc, at("phases"), "phases", "new.cPhases", phase)}
            {list(doc, at("tallies"), "tallies", "new.cTallies", |doc, p| view! {
                {text(doc, format!("{p}/name"), false)}
                {choice(doc, format!("{p}/kind"), &TALLY_KINDS)}
                {names(doc, format!("{p}/voters"))}
            }.into_any())}
            <h4>{move || ctx.tr("new.cOutcomes")}</h4>
            {names(doc, at("outcomes"))}
            {list(doc, at("endings"), "endings", "new.cEndings", |doc, p| view! {
                {text(doc, format!("{p}/when"), false)}
                {text(doc, format!("{p}/outcome"), false)}
            }.into_any())}
            {list(doc, at("metrics"), "metrics", "new.cMetrics", |doc, p| view! {
                {text(doc, format!("{p}/name"), false)}
                {text(doc, format!("{p}/value"), false)}
                {text(doc, format!("{p}/description"), false)}
            }.into_any())}
        </div>
    }
}

/// One action: who may use it and when, its parameters, requirements, visibility and effects.
fn action(doc: Doc, p: String) -> AnyView {
    view! {
        {text(doc, format!("{p}/name"), false)}
        {text(doc, format!("{p}/description"), false)}
        {names(doc, format!("{p}/roles"))}
        {names(doc, format!("{p}/phases"))}
        {text(doc, format!("{p}/when"), false)}
        {one_of(doc, format!("{p}/visibility"), VISIBILITY)}
        {list(doc, format!("{p}/params"), "params", "new.cParams", |doc, q| view! {
            {text(doc, format!("{q}/name"), false)}
            {param_type(doc, q.clone())}
            {text(doc, format!("{q}/description"), false)}
            {names(doc, format!("{q}/values"))}
            {number(doc, format!("{q}/min"))}
            {number(doc, format!("{q}/max"))}
            {number(doc, format!("{q}/max_length"))}
        }.into_any())}
        {list(doc, format!("{p}/require"), "require", "new.cRequire", |doc, q| view! {
            {text(doc, format!("{q}/check"), false)}
            {text(doc, format!("{q}/message"), false)}
        }.into_any())}
        {effects(doc, format!("{p}/effects"), "effects", "new.cEffects")}
    }
    .into_any()
}

/// One phase: who acts, in which order, how it ends, what it does on entry and exit, and where
/// the scene goes next.
fn phase(doc: Doc, p: String) -> AnyView {
    view! {
        {text(doc, format!("{p}/name"), false)}
        {text(doc, format!("{p}/description"), false)}
        {one_of(doc, format!("{p}/actors"), ACTORS)}
        {choice(doc, format!("{p}/order"), &ORDERS)}
        {one_of(doc, format!("{p}/ends"), ENDS)}
        {number(doc, format!("{p}/max_rounds"))}
        {effects(doc, format!("{p}/on_enter"), "on_enter", "new.cOnEnter")}
        {effects(doc, format!("{p}/on_exit"), "on_exit", "new.cOnExit")}
        {list(doc, format!("{p}/next"), "next", "new.cNext", |doc, q| view! {
            {text(doc, format!("{q}/when"), false)}
            {text(doc, format!("{q}/goto"), false)}
            {text(doc, format!("{q}/end"), false)}
        }.into_any())}
    }
    .into_any()
}

/// A list of effects, each with its kind picker.
fn effects(doc: Doc, ptr: String, list_name: &'static str, title: &'static str) -> AnyView {
    list(doc, ptr, list_name, title, |doc, q| one_of(doc, q, EFFECTS)).into_any()
}

/// The rows of the list at `ptr`, each drawn by `row` with a remove button, and an add button.
fn list<F>(doc: Doc, ptr: String, list_name: &'static str, title: &'static str, row: F) -> impl IntoView
where
    F: Fn(Doc, String) -> AnyView + Clone + Send + Sync + 'static,
{
    let ctx = ctx();
    let id = field_id(&ptr);
    let count = ptr.clone();
    let add = ptr.clone();
    view! {
        <div class="cfg-list" id=id.clone()>
            <h4>{move || ctx.tr(title)}</h4>
            <For
                each=move || 0..doc.value.with(|d| len_at(d, &count))
                key=|i| *i
                children=move |i| {
                    let item = format!("{ptr}/{i}");
                    let gone = item.clone();
                    let id = field_id(&item);
                    view! {
                        <div class="cfg-item" id=id.clone()>
                            <button class="ghost cfg-remove" id=format!("{id}-remove") title=move || ctx.tr("new.cRemove")
                                on:click=move |_| doc.edit(|d| set_at(d, &gone, None))>"×"</button>
                            {row(doc, item)}
                        </div>
                    }
                }
            />
            <button class="ghost" id=format!("{id}-add")
                on:click=move |_| doc.edit(|d| {
                    let name = format!("{}{}", list_name.trim_end_matches('s'), len_at(d, &add) + 1);
                    push_at(d, &add, new_item(list_name, &name));
                })>
                {move || format!("+ {}", ctx.tr(title))}
            </button>
        </div>
    }
}

/// The label of the field at `ptr`: its JSON key.
fn key_of(ptr: &str) -> String {
    ptr.rsplit('/').next().unwrap_or_default().to_string()
}

/// A field's label and control, side by side.
fn labelled(ptr: &str, control: AnyView) -> AnyView {
    view! {
        <div class="field cfg-field">
            <label for=field_id(ptr)><code>{key_of(ptr)}</code></label>
            {control}
        </div>
    }
    .into_any()
}

/// A text input (a text area when `multi`) bound to `ptr`; emptied, the key goes.
fn text(doc: Doc, ptr: String, multi: bool) -> AnyView {
    written(doc, ptr, multi, text_value)
}

/// A number input bound to `ptr`.
fn number(doc: Doc, ptr: String) -> AnyView {
    written(doc, ptr, false, draft::number_value)
}

/// A value input (JSON, else text) bound to `ptr`.
fn value(doc: Doc, ptr: String) -> AnyView {
    written(doc, ptr, false, json_or_text)
}

/// An input bound to `ptr` that writes what `parse` makes of its text.
fn written(doc: Doc, ptr: String, multi: bool, parse: fn(&str) -> Option<Value>) -> AnyView {
    let id = field_id(&ptr);
    let shown = ptr.clone();
    let marked = ptr.clone();
    let class = move || doc.field_class(&marked);
    let write = {
        let ptr = ptr.clone();
        move |ev: web_sys::Event| {
            let v = event_target_value(&ev);
            doc.edit(|d| set_at(d, &ptr, parse(&v)));
        }
    };
    let control = if multi {
        view! { <textarea id=id rows="3" class=class prop:value=move || doc.text(&shown) on:input=write></textarea> }
            .into_any()
    } else {
        view! { <input id=id class=class prop:value=move || doc.text(&shown) on:input=write /> }.into_any()
    };
    labelled(&ptr, control)
}

/// A comma-separated list of names bound to `ptr`; emptied, the key goes.
fn names(doc: Doc, ptr: String) -> AnyView {
    let id = field_id(&ptr);
    let shown = ptr.clone();
    let marked = ptr.clone();
    let target = ptr.clone();
    let control = view! {
        <input id=id class=move || doc.field_class(&marked) placeholder="a, b"
            prop:value=move || doc.value.with(|d| names_of(d, &shown))
            on:change=move |ev| {
                let v = names_value(&event_target_value(&ev));
                let empty = v.as_array().is_some_and(Vec::is_empty);
                doc.edit(|d| set_at(d, &target, (!empty).then_some(v)))
            } />
    }
    .into_any();
    labelled(&ptr, control)
}

/// A checkbox bound to a boolean at `ptr` (left out while false).
fn flag(doc: Doc, ptr: String) -> AnyView {
    let id = field_id(&ptr);
    let shown = ptr.clone();
    let target = ptr.clone();
    let control = view! {
        <input type="checkbox" id=id prop:checked=move || doc.value.with(|d| d.pointer(&shown) == Some(&Value::Bool(true)))
            on:change=move |ev| {
                let on = event_target_checked(&ev);
                doc.edit(|d| set_at(d, &target, on.then_some(Value::Bool(true))))
            } />
    }
    .into_any();
    labelled(&ptr, control)
}

/// A select of `options` bound to the string at `ptr`.
fn choice(doc: Doc, ptr: String, options: &'static [&'static str]) -> AnyView {
    let target = ptr.clone();
    picker(doc, ptr, options, move |d, v| set_at(d, &target, Some(v.into())))
}

/// A parameter's type (`{ptr}/type`): switching it reshapes the parameter for the new type.
fn param_type(doc: Doc, ptr: String) -> AnyView {
    let at = format!("{ptr}/type");
    picker(doc, at, &PARAM_TYPES, move |d, v| set_param_type(d, &ptr, v))
}

/// A select of `options` showing the string at `at`; a pick is written by `write`.
fn picker(
    doc: Doc,
    at: String,
    options: &'static [&'static str],
    write: impl Fn(&mut Value, &str) + Send + Sync + 'static,
) -> AnyView {
    let id = field_id(&at);
    let chosen = at.clone();
    let control = view! {
        <select id=id on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| write(d, &v)) }>
            {options
                .iter()
                .map(|o| {
                    let chosen = chosen.clone();
                    view! { <option value=*o selected=move || doc.text(&chosen) == *o>{*o}</option> }
                })
                .collect_view()}
        </select>
    }
    .into_any();
    labelled(&at, control)
}

/// A one-of value at `ptr`: its kind picker, then what that kind holds.
fn one_of(doc: Doc, ptr: String, table: &'static [(&'static str, Inner)]) -> AnyView {
    let id = format!("{}-kind", field_id(&ptr));
    let target = ptr.clone();
    let read = ptr.clone();
    let kind = Memo::new(move |_| doc.value.with(|d| kind_at(d, &read, table)));
    let inner = {
        let ptr = ptr.clone();
        move || {
            let k = kind.get();
            let inner = table.iter().find(|(n, _)| *n == k).map_or(Inner::Unit, |(_, i)| *i);
            let at = format!("{ptr}/{k}");
            match inner {
                Inner::Unit => ().into_any(),
                Inner::Text => text(doc, at, false),
                Inner::Names => names(doc, at),
                Inner::Number => number(doc, at),
                Inner::Fields(fields) => {
                    fields.iter().map(|f| text(doc, format!("{at}/{f}"), false)).collect_view().into_any()
                }
            }
        }
    };
    view! {
        <div class="cfg-one-of">
            <div class="field cfg-field">
                <label for=id.clone()><code>{key_of(&ptr)}</code></label>
                <select id=id on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_kind(d, &target, &v, table)) }>
                    {table.iter().map(|(k, _)| view! { <option value=*k selected=move || kind.get() == *k>{*k}</option> }).collect_view()}
                </select>
            </div>
            {inner}
        </div>
    }
    .into_any()
}

/// `/api/documents/generate`: the whole document, built on as it stands when refining.
fn write_scene(
    prompt: String,
    last: Option<Value>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = api::Result<Written>>>> {
    Box::pin(async move {
        let written = api::generate_document(prompt, last).await?;
        Ok(Ok((written.document, written.explanation)))
    })
}
