//! The tree browser on Home: every tree the server holds with its metadata (`GET /devui/simtree`
//! answers [`TreeInfo`]s: name, scenario, kind, node count, when it was made and last changed),
//! to open, rename in place (`PATCH`, the server's refusal shown under the field), or delete
//! after a confirmation; and the import of an export file.

use leptos::prelude::*;
use simtree_shared::{SimKind, TreeInfo};

use crate::api::{self, ApiError};
use crate::data::ImportButton;
use crate::route::Route;
use crate::state::{Link, ctx};
use crate::when::{ago, timestamp};

/// The i18n key of a kind's name.
fn kind_key(kind: SimKind) -> &'static str {
    match kind {
        SimKind::Social => "kind.social",
        SimKind::Trading => "kind.trading",
        SimKind::Abm => "kind.abm",
    }
}

fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

#[component]
pub fn TreeBrowser() -> impl IntoView {
    let ctx = ctx();
    let rows = RwSignal::new(None::<Vec<TreeInfo>>);
    let confirm = RwSignal::new(None::<u64>);
    // The tree whose name is being edited, the text typed, and the server's refusal.
    let editing = RwSignal::new(None::<u64>);
    let draft = RwSignal::new(String::new());
    let rename_error = RwSignal::new(None::<String>);
    // "5 min ago" ages while the page stays open.
    let now = RwSignal::new(now_ms());
    leptos::task::spawn_local(async move {
        loop {
            api::sleep(30_000).await;
            if now.try_set(now_ms()).is_some() {
                return;
            }
        }
    });
    leptos::task::spawn_local(async move {
        match api::trees().await {
            Ok(list) => rows.set(Some(list)),
            Err(e) => ctx.error(e),
        }
    });
    let replace = move |info: TreeInfo| {
        rows.update(|r| {
            if let Some(row) = r.iter_mut().flatten().find(|row| row.id == info.id) {
                *row = info;
            }
        })
    };
    let save = move |id: u64| {
        let name = draft.get_untracked();
        leptos::task::spawn_local(async move {
            match api::rename_tree(id, &name).await {
                Ok(info) => {
                    replace(info);
                    editing.set(None);
                    rename_error.set(None);
                }
                Err(ApiError::Http(_, body)) => rename_error.set(Some(body.detail)),
                Err(e) => ctx.error(e),
            }
        });
    };
    let delete = move |id: u64| {
        confirm.set(None);
        leptos::task::spawn_local(async move {
            match api::delete_tree(id).await {
                Ok(_) | Err(ApiError::NotFound(_)) => {
                    rows.update(|r| {
                        if let Some(r) = r {
                            r.retain(|row| row.id != id)
                        }
                    });
                    if api::storage_get("devui:lastTreeId").as_deref() == Some(&id.to_string()) {
                        api::storage_set("devui:lastTreeId", "");
                    }
                }
                Err(e) => ctx.error(e),
            }
        });
    };
    let name_cell = move |info: &TreeInfo| {
        let (id, name) = (info.id, info.name.clone());
        let start = move |_| {
            draft.set(name.clone());
            rename_error.set(None);
            editing.set(Some(id));
        };
        view! {
            <Show
                when=move || editing.get() == Some(id)
                fallback=move || {
                    let start = start.clone();
                    view! {
                        <span class="name">{move || rows.with(|r| r.iter().flatten().find(|t| t.id == id).map(|t| t.name.clone()))}</span>
                        " "
                        <button class="ghost rename-tree" title=move || ctx.tr("trees.rename") on:click=start>"✎"</button>
                    }
                }
            >
                <input
                    class="rename-input"
                    maxlength="200"
                    prop:value=move || draft.get()
                    on:input=move |ev| draft.set(event_target_value(&ev))
                    on:keydown=move |ev: web_sys::KeyboardEvent| match ev.key().as_str() {
                        "Enter" => save(id),
                        "Escape" => editing.set(None),
                        _ => {}
                    }
                />
                <button class="primary save-name" on:click=move |_| save(id)>{move || ctx.tr("trees.save")}</button>
                <button on:click=move |_| editing.set(None)>{move || ctx.tr("common.cancel")}</button>
                {move || rename_error.get().map(|e| view! { <p class="rename-error error">{e}</p> })}
            </Show>
        }
    };
    let row_view = move |info: TreeInfo| {
        let id = info.id;
        let (created, active) = (info.created, info.last_activity);
        view! {
            <tr class="tree-row" data-id=id.to_string()>
                <td class="tree-id">{format!("#{id}")}</td>
                <td class="tree-name">{name_cell(&info)}</td>
                <td class="scenario">
                    {info.scenario.clone()}
                    " "
                    <span class="chip kind">{move || ctx.tr(kind_key(info.kind))}</span>
                </td>
                <td class="nodes">{info.nodes}</td>
                <td class="created" title=timestamp(created)>{move || ago(now.get(), created, ctx.lang.get())}</td>
                <td class="activity" title=timestamp(active)>{move || ago(now.get(), active, ctx.lang.get())}</td>
                <td class="actions">
                    <Link route=Route::SimTree(Some(id))>{move || ctx.tr("trees.open")}</Link>
                    " "
                    <Link route=Route::Studio(Some(id))>{move || ctx.tr("nav.studio")}</Link>
                    " "
                    <Show when=move || confirm.get() == Some(id) fallback=move || view! {
                        <button class="delete-tree" on:click=move |_| confirm.set(Some(id))>{move || ctx.tr("common.delete")}</button>
                    }>
                        <span class="confirm">
                            {move || ctx.tr("trees.confirmDelete").replace("{{id}}", &id.to_string())}
                            <button class="danger confirm-delete-tree" on:click=move |_| delete(id)>{move || ctx.tr("common.delete")}</button>
                            <button on:click=move |_| confirm.set(None)>{move || ctx.tr("common.cancel")}</button>
                        </span>
                    </Show>
                </td>
            </tr>
        }
    };
    view! {
        <section id="tree-browser" class="panel trees">
            <div class="row">
                <h2>{move || ctx.tr("trees.title")}</h2>
                <span class="spacer"></span>
                <Link route=Route::New { kind: None, from: None } id="new-tree-link">{move || ctx.tr("trees.new")}</Link>
            </div>
            {move || match rows.get() {
                None => view! { <p class="muted">"…"</p> }.into_any(),
                Some(r) if r.is_empty() => view! { <p id="no-trees" class="muted">{move || ctx.tr("trees.none")}</p> }.into_any(),
                Some(r) => view! {
                    <table class="tree-list">
                        <tr>
                            <th>{move || ctx.tr("trees.tree")}</th>
                            <th>{move || ctx.tr("trees.name")}</th>
                            <th>{move || ctx.tr("create.scenario")}</th>
                            <th>{move || ctx.tr("trees.nodes")}</th>
                            <th>{move || ctx.tr("trees.created")}</th>
                            <th>{move || ctx.tr("trees.activity")}</th>
                            <th></th>
                        </tr>
                        <For each=move || r.clone() key=|t| t.id children=row_view />
                    </table>
                }
                .into_any(),
            }}
            <ImportButton />
        </section>
    }
}
