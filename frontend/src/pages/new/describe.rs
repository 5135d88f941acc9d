//! "Describe in words": a description, **Generate** (a document written anew) and **Refine**
//! (the document as it stands, edits included, changed as the words ask), with the seconds
//! spent while the request is out and the writer's explanation or refusal after. **Undo** puts
//! back the document as it was before the last Generate or Refine, while the document is still
//! what that wrote (an edit since is the user's own and is kept). One box serves
//! the agent-based model (`/api/abm/generate`) and the custom scene (`/api/documents/generate`);
//! each passes its own `write`.

use std::future::Future;
use std::pin::Pin;

use leptos::prelude::*;
use serde_json::Value;

use super::Doc;
use crate::api;
use crate::state::ctx;
use crate::wait::count_seconds;

/// What a writer answers: the new document and what it says of it, or why it wrote none.
pub(super) type Written = std::result::Result<(Value, String), String>;
/// A request to a writer: the words, and the document to build on when refining.
pub(super) type Write = fn(String, Option<Value>) -> Pin<Box<dyn Future<Output = api::Result<Written>>>>;

/// `prefix` names the elements (`{prefix}-prompt`, `-generate`, `-refine`, `-progress`,
/// `-gen-error`, `-explanation`); `hint` is the i18n key of the box's placeholder; `base` is the
/// part of the document a refinement builds on.
#[component]
pub(super) fn Describe(
    doc: Doc,
    prefix: &'static str,
    title: &'static str,
    hint: &'static str,
    base: fn(&Value) -> Value,
    write: Write,
) -> impl IntoView {
    let ctx = ctx();
    let prompt = RwSignal::new(String::new());
    let generating = RwSignal::new(false);
    let elapsed = RwSignal::new(0u32);
    let error = RwSignal::new(None::<String>);
    let explanation = RwSignal::new(None::<String>);
    let empty = move || doc.value.with(|d| d.as_object().is_none_or(|o| o.is_empty()));
    // The document before the last answer replaced it, and that answer.
    let replaced = RwSignal::new(None::<(Value, Value)>);
    let can_undo = move || replaced.with(|r| r.as_ref().is_some_and(|(_, after)| doc.value.with(|d| d == after)));
    let undo = move |_| {
        if let Some((before, _)) = replaced.get_untracked() {
            replaced.set(None);
            explanation.set(None);
            doc.replace(before);
        }
    };
    let generate = move |refine: bool| {
        let text = prompt.get_untracked();
        let last = refine.then(|| doc.value.with_untracked(base));
        generating.set(true);
        count_seconds(generating, elapsed);
        error.set(None);
        leptos::task::spawn_local(async move {
            let r = write(text, last).await;
            generating.try_set(false);
            match r {
                Ok(Ok((document, why))) => {
                    let before = doc.value.get_untracked();
                    replaced.try_set(Some((before, document.clone())));
                    doc.replace(document);
                    explanation.try_set(Some(why).filter(|w| !w.is_empty()));
                }
                Ok(Err(message)) => {
                    error.try_set(Some(message));
                }
                Err(e) => {
                    if let Some(m) = ctx.refusal(e) {
                        error.try_set(Some(m));
                    }
                }
            }
        });
    };
    let id = move |what: &str| format!("{prefix}-{what}");
    view! {
        <h3>{move || ctx.tr(title)}</h3>
        <textarea id=id("prompt") placeholder=move || ctx.tr(hint) prop:value=move || prompt.get()
            on:input=move |ev| prompt.set(event_target_value(&ev))></textarea>
        <div class="row">
            <button id=id("generate") class="primary" disabled=move || generating.get() || prompt.get().trim().is_empty()
                on:click=move |_| generate(false)>{move || ctx.tr("new.generate")}</button>
            <button id=id("refine") disabled=move || generating.get() || empty() || prompt.get().trim().is_empty()
                title=move || ctx.tr("new.refineHint")
                on:click=move |_| generate(true)>{move || ctx.tr("new.refine")}</button>
            <Show when=can_undo>
                <button id=id("undo") title=move || ctx.tr("new.undoHint") on:click=undo>{move || ctx.tr("new.undo")}</button>
            </Show>
            <Show when=move || generating.get()>
                <span id=id("progress") class="muted">
                    {move || ctx.tr("new.generating").replace("{{s}}", &elapsed.get().to_string())}
                </span>
            </Show>
        </div>
        {move || error.get().map(|e| view! { <p id=id("gen-error") class="reason">{e}</p> })}
        {move || explanation.get().map(|e| view! { <p id=id("explanation") class="hint muted">{e}</p> })}
    }
}
