//! The saved scenario the editor holds, under the New page's library heading: its versions (the
//! one shown, each other a link that starts from it) and Delete, which asks once more and then
//! removes every version (trees made from it keep their copy; the editor keeps the document).

use leptos::prelude::*;
use serde_json::Value;
use simtree_shared::SavedRef;

use super::Origin;
use crate::api::{self, ApiError};
use crate::route::{Route, Start};
use crate::state::ctx;

impl Origin {
    /// The scenario as just saved under `saved`: `document` is that version, and the versions
    /// kept are the earlier ones known of the same name with it.
    pub(super) fn saved(earlier: Option<Origin>, saved: &SavedRef, document: Value) -> Origin {
        let mut versions = earlier.filter(|o| o.id == saved.id).map(|o| o.versions).unwrap_or_default();
        if !versions.contains(&saved.version) {
            versions.push(saved.version);
            versions.sort_unstable();
        }
        Origin { reference: saved.to_string(), id: saved.id.clone(), version: saved.version, versions, document }
    }
}

/// The saved scenario's versions and Delete; nothing while the editor holds no saved scenario.
#[component]
pub(super) fn SavedEntry(origin: RwSignal<Option<Origin>>, on_deleted: Callback<()>) -> impl IntoView {
    let ctx = ctx();
    let confirming = RwSignal::new(false);
    let deleting = RwSignal::new(false);
    let deleted = RwSignal::new(None::<String>);
    let error = RwSignal::new(None::<String>);
    let saved = move || origin.get().filter(|o| !o.versions.is_empty());
    let delete = move |_| {
        let Some(id) = origin.with_untracked(|o| o.as_ref().map(|o| o.id.clone())) else {
            return;
        };
        deleting.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            let r = api::delete_scenario(&id).await;
            deleting.try_set(false);
            confirming.try_set(false);
            match r {
                Ok(()) => {
                    origin.try_set(None);
                    deleted.try_set(Some(ctx.tr("new.deleted").replace("{{id}}", &id)));
                    on_deleted.run(());
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(e) => {
                    error.try_set(ctx.refusal(e));
                }
            }
        });
    };
    view! {
        {move || saved().map(|o| {
            let shown = o.version;
            let count = o.versions.len();
            let links = o
                .versions
                .iter()
                .map(|&v| {
                    let label = format!("v{v}");
                    if v == shown {
                        view! { <strong class="version current" data-version=v>{label}</strong> }.into_any()
                    } else {
                        let route = Route::New { kind: None, from: Some(Start::Library(format!("{}@{v}", o.id))) };
                        let href = route.href();
                        view! {
                            <a class="version" data-version=v href=href on:click=move |ev: web_sys::MouseEvent| {
                                ev.prevent_default();
                                ctx.navigate(route.clone());
                            }>{label}</a>
                        }
                        .into_any()
                    }
                })
                .collect_view();
            let id = o.id.clone();
            view! {
                <div id="library-entry" class="row">
                    <span id="library-versions">
                        {move || ctx.tr("new.versionsOf").replace("{{id}}", &id)} " " {links}
                    </span>
                    <span class="spacer"></span>
                    <button id="library-delete" class="ghost" disabled=move || confirming.get() on:click=move |_| confirming.set(true)>
                        {move || ctx.tr("new.delete")}
                    </button>
                </div>
                <Show when=move || confirming.get()>
                    <p id="library-delete-confirm" class="reason">
                        {
                            let id = o.id.clone();
                            move || ctx.tr("new.deleteConfirm").replace("{{id}}", &id).replace("{{n}}", &count.to_string())
                        }
                        " "
                        <button id="library-delete-yes" disabled=move || deleting.get() on:click=delete>{move || ctx.tr("new.deleteYes")}</button>
                        " "
                        <button id="library-delete-no" class="ghost" on:click=move |_| confirming.set(false)>{move || ctx.tr("new.deleteNo")}</button>
                    </p>
                </Show>
            }
        })}
        {move || deleted.get().filter(|_| origin.with(Option::is_none)).map(|d| view! { <p id="library-deleted" class="ok">{d}</p> })}
        {move || error.get().map(|e| view! { <p id="library-delete-error" class="error">{e}</p> })}
    }
}
