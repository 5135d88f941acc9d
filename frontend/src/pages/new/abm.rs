//! The agent-based model's form: describe the model in words, generate it (`/api/abm/generate`:
//! the offline generator, or the server's provider), and refine it (the description again, with
//! the model as it stands as `lastModel`); then its parameters as fields (the step limit, each
//! global's and each agent attribute's starting value, each agent type's count: see
//! [`crate::abm_form`]), beside the JSON view that changes its structure. The validator (`/api/abm/validate`) runs on every change of
//! the document, and each finding is listed with its JSON path and a button that marks its line
//! in the JSON view.

use leptos::prelude::*;
use serde_json::Value;

use super::Doc;
use super::describe::{Describe, Written};
use crate::api::{self, ApiError};
use crate::draft::{self, Validation, line_of_path, pretty};
use crate::state::ctx;
use crate::wait::debounced;
use crate::{abm_form, scene_form};

/// Wait after the last change before the validator runs (typing in the JSON view).
const VALIDATE_AFTER_MS: i32 = 300;

/// What the validator said of the document as it stands.
#[derive(Clone, Debug, PartialEq)]
enum Check {
    Report(Validation),
    /// The text is no abm-quant document at all (the server's 422, in its words).
    Refused(String),
}

#[component]
pub(super) fn AbmForm(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    let empty = move || doc.value.with(|d| d.as_object().is_none_or(|o| o.is_empty()));
    // The validator runs on the document a short while after it last changed.
    let check = debounced(
        VALIDATE_AFTER_MS,
        move || (!empty()).then(|| doc.value.with(pretty)),
        move |text| async move {
            match api::abm_validate(text).await {
                Ok(v) => Some(Check::Report(v)),
                Err(ApiError::Offline) => {
                    ctx.went_offline();
                    None
                }
                Err(ApiError::Http(_, body)) => Some(Check::Refused(body.detail)),
                Err(e) => Some(Check::Refused(e.to_string())),
            }
        },
    );
    let info = move || {
        doc.value.with(|d| {
            let title = d.pointer("/supportingInfo/title").and_then(Value::as_str)?.to_string();
            let why = d.pointer("/supportingInfo/explanation").and_then(Value::as_str).unwrap_or_default().to_string();
            Some(view! { <div id="abm-info" class="note-plain"><strong>{title}</strong><p>{why}</p></div> })
        })
    };
    let findings = move || {
        check.get().map(|c| match c {
            Check::Refused(e) => view! { <p id="abm-refused" class="reason">{e}</p> }.into_any(),
            Check::Report(v) if v.issues.is_empty() => {
                view! { <p id="abm-valid" class="ok">{move || ctx.tr("new.abmValid")}</p> }.into_any()
            }
            Check::Report(v) => {
                let items = v
                    .issues
                    .into_iter()
                    .map(|i| {
                        let line = doc.value.with_untracked(|d| line_of_path(d, &i.path));
                        let path = i.path.clone();
                        view! {
                            <li class=format!("issue {}", i.severity) data-path=i.path.clone()>
                                <span class="severity">{i.severity.clone()}</span>
                                " "
                                <code class="path">{i.path.clone()}</code>
                                " "
                                <button class="ghost show-path" on:click=move |_| doc.show_path(&path)>
                                    {move || ctx.tr("new.line").replace("{{n}}", &line.to_string())}
                                </button>
                                <div class="message">{i.message}</div>
                            </li>
                        }
                    })
                    .collect_view();
                view! {
                    <ul id="abm-issues" class=if v.ok { "issues warnings" } else { "issues" }>{items}</ul>
                }
                .into_any()
            }
        })
    };
    view! {
        <section id="abm-form" class="panel new-form">
            <Describe doc prefix="abm" title="new.describe" hint="new.describeHint" base=model_of write=write_model />
            {info}
            <Show when=move || !empty()>
                <Params doc />
            </Show>
            <h3>{move || ctx.tr("new.validator")}</h3>
            <Show when=move || !empty() fallback=move || view! { <p class="hint muted">{move || ctx.tr("new.abmEmpty")}</p> }>
                {findings}
            </Show>
        </section>
    }
}

/// The model's parameters as fields, a section per agent type; each writes its place of the
/// document (the JSON view and the validator follow).
#[component]
fn Params(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    // The fields change only with the document's structure, not with each value typed.
    let sections = Memo::new(move |_| doc.value.with(abm_form::fields));
    view! {
        <div id="abm-params">
            <h3>{move || ctx.tr("new.abmParams")}</h3>
            <p class="hint muted">{move || ctx.tr("new.abmParamsHint")}</p>
            {move || {
                sections
                    .get()
                    .into_iter()
                    .map(|(heading, fields)| {
                        view! {
                            {heading.map(|h| view! { <h4 class="abm-agent">{h}</h4> })}
                            <div class="abm-fields">{fields.into_iter().map(|f| param(doc, f)).collect_view()}</div>
                        }
                    })
                    .collect_view()
            }}
        </div>
    }
}

/// One parameter: its name, an input bound to its place, its description as the hint.
fn param(doc: Doc, f: abm_form::Field) -> impl IntoView {
    let id = abm_form::field_id(&f.ptr);
    let parse = match f.parse {
        abm_form::Parse::Count => draft::number_value,
        abm_form::Parse::Text => draft::text_value,
        abm_form::Parse::Value => scene_form::json_or_text,
    };
    let (shown, marked, ptr) = (f.ptr.clone(), f.ptr.clone(), f.ptr);
    view! {
        <div class="field" title=f.hint>
            <label for=id.clone()><code>{f.label}</code></label>
            <input
                id=id
                class=move || doc.field_class(&marked)
                prop:value=move || doc.text(&shown)
                on:input=move |ev| {
                    let v = event_target_value(&ev);
                    doc.edit(|d| draft::set_at(d, &ptr, parse(&v)));
                }
            />
        </div>
    }
}

/// What a refinement builds on: the model (inside its envelope, if it has one).
fn model_of(d: &Value) -> Value {
    d.get("model").unwrap_or(d).clone()
}

/// `/api/abm/generate`: the envelope as the document (its explanation is shown from it).
fn write_model(
    prompt: String,
    last: Option<Value>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = api::Result<Written>>>> {
    Box::pin(
        async move { Ok(api::abm_generate(&prompt, last.as_ref()).await?.map(|envelope| (envelope, String::new()))) },
    )
}
