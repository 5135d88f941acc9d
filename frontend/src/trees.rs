//! The tree browser on Home: every tree the server holds, with what it simulates (from its
//! root's view) and its size (from its graph), to open or delete (after a confirmation), and
//! the import of an export file.

use leptos::prelude::*;

use crate::api::{self, ApiError};
use crate::app::{Link, ctx};
use crate::data::ImportButton;
use crate::ops::scenario_label;
use crate::route::Route;

/// One row: the tree, what it simulates and how many nodes it has (filled in as they arrive).
#[derive(Clone, Debug, PartialEq)]
struct Row {
    id: u64,
    scenario: RwSignal<String>,
    nodes: RwSignal<Option<usize>>,
}

#[component]
pub fn TreeBrowser() -> impl IntoView {
    let ctx = ctx();
    let rows = RwSignal::new(None::<Vec<Row>>);
    let confirm = RwSignal::new(None::<u64>);
    let load = move || {
        leptos::task::spawn_local(async move {
            match api::trees().await {
                Ok(list) => {
                    let made: Vec<Row> = list
                        .iter()
                        .map(|t| Row {
                            id: t.id,
                            scenario: RwSignal::new(String::new()),
                            nodes: RwSignal::new(None),
                        })
                        .collect();
                    rows.set(Some(made.clone()));
                    for (t, row) in list.into_iter().zip(made) {
                        leptos::task::spawn_local(async move {
                            if let Ok(v) = api::node_view(t.id, t.root).await {
                                row.scenario.try_set(scenario_label(&v));
                            }
                            if let Ok(g) = api::graph(t.id).await {
                                row.nodes.try_set(Some(g.nodes.len()));
                            }
                        });
                    }
                }
                Err(e) => ctx.error(e),
            }
        });
    };
    load();
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
    let row_view = move |row: Row| {
        let id = row.id;
        view! {
            <tr class="tree-row" data-id=id.to_string()>
                <td>{format!("#{id}")}</td>
                <td class="scenario">{move || row.scenario.get()}</td>
                <td class="nodes">{move || row.nodes.get().map_or_else(|| "…".into(), |n| n.to_string())}</td>
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
            <h2>{move || ctx.tr("trees.title")}</h2>
            {move || match rows.get() {
                None => view! { <p class="muted">"…"</p> }.into_any(),
                Some(r) if r.is_empty() => view! { <p id="no-trees" class="muted">{move || ctx.tr("trees.none")}</p> }.into_any(),
                Some(r) => view! {
                    <table class="tree-list">
                        <tr>
                            <th>{move || ctx.tr("trees.tree")}</th>
                            <th>{move || ctx.tr("create.scenario")}</th>
                            <th>{move || ctx.tr("trees.nodes")}</th>
                            <th></th>
                        </tr>
                        {r.into_iter().map(row_view).collect_view()}
                    </table>
                }
                .into_any(),
            }}
            <ImportButton />
        </section>
    }
}
