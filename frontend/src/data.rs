//! Getting data out and in: the data panel downloads the open tree (the server's export), the
//! selected node's log (JSONL), its series (CSV) and its chart (SVG); the import button uploads
//! an export file and opens the tree the server makes of it. File contents come from
//! [`crate::export`]; the browser's download and file reading from `api`.

use leptos::html;
use leptos::prelude::*;
use simtree_shared::NodeView;

use crate::api::{self, ApiError};
use crate::export::{abm_series_csv, byte_size, equity_csv, file_name, logs_jsonl, svg_document};
use crate::route::Route;
use crate::state::{Tree, ctx};

/// The selected node's series as CSV: the equity curve of a trading node, the tracked
/// variables of an ABM node; `None` for a social node (it has no series).
async fn series_of(tree: u64, node: u64, view: &NodeView) -> Result<Option<String>, ApiError> {
    Ok(match view {
        NodeView::Trading(t) => Some(equity_csv(&t.equity_curve, &t.buy_and_hold_curve)),
        NodeView::Abm(_) => Some(abm_series_csv(&api::node_logs(tree, node).await?)),
        NodeView::Social(_) => None,
    })
}

/// The markup of the node's chart on the page, if one is drawn.
fn chart_markup() -> Option<String> {
    let doc = web_sys::window()?.document()?;
    let el = doc.query_selector("svg#equity-chart, svg#abm-chart").ok().flatten()?;
    Some(el.outer_html())
}

#[component]
pub fn DataPanel(tree: Tree, node_view: RwSignal<Option<NodeView>>) -> impl IntoView {
    let ctx = ctx();
    let ids = move || Some((tree.id.get_untracked()?, tree.selected.get_untracked()?));
    // An export on its way: (bytes, whole nodes) received so far; its failure, shown in place.
    let exporting = RwSignal::new(None::<(usize, u64)>);
    let export_error = RwSignal::new(None::<String>);
    let export = move |_| {
        let Some(t) = tree.id.get_untracked() else { return };
        // One download at a time: a second click while one is on its way does nothing.
        if exporting.get_untracked().is_some() {
            return;
        }
        exporting.set(Some((0, 0)));
        export_error.set(None);
        leptos::task::spawn_local(async move {
            let r = api::export(t, |bytes, nodes| {
                exporting.try_set(Some((bytes, nodes)));
            })
            .await;
            exporting.try_set(None);
            match r.and_then(|text| api::download(&file_name(t, None, "export", "json"), "application/json", &text)) {
                Ok(()) => {}
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(e) => {
                    export_error.try_set(Some(format!("{}: {e}", ctx.tr("data.exportFailed"))));
                }
            }
        });
    };
    let export_progress = move || {
        let (bytes, nodes) = exporting.get()?;
        let total = tree.graph.with(|g| g.nodes.len());
        Some(
            ctx.tr("data.exporting")
                .replace("{{n}}", &nodes.to_string())
                .replace("{{total}}", &total.to_string())
                .replace("{{size}}", &byte_size(bytes)),
        )
    };
    let log = move |_| {
        let Some((t, n)) = ids() else { return };
        leptos::task::spawn_local(async move {
            let r = api::node_logs(t, n).await;
            if let Err(e) = r.and_then(|l| {
                api::download(&file_name(t, Some(n), "log", "jsonl"), "application/x-ndjson", &logs_jsonl(&l))
            }) {
                ctx.error(e);
            }
        });
    };
    let series = move |_| {
        let (Some((t, n)), Some(v)) = (ids(), node_view.get_untracked()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            let r = match series_of(t, n, &v).await {
                Ok(Some(csv)) => api::download(&file_name(t, Some(n), "series", "csv"), "text/csv", &csv),
                Ok(None) => Err(ApiError::Client(ctx.tr("data.noSeries").into())),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                ctx.error(e);
            }
        });
    };
    let chart = move |_| {
        let Some((t, n)) = ids() else { return };
        let r = match chart_markup() {
            Some(svg) => api::download(&file_name(t, Some(n), "chart", "svg"), "image/svg+xml", &svg_document(&svg)),
            None => Err(ApiError::Client(ctx.tr("data.noChart").into())),
        };
        if let Err(e) = r {
            ctx.error(e);
        }
    };
    let has_series = move || node_view.with(|v| v.as_ref().is_some_and(|v| v.social().is_none()));
    let no_node = move || tree.selected.get().is_none();
    view! {
        <section id="data-panel" class="panel data">
            <h3>{move || ctx.tr("data.title")}</h3>
            <div class="row">
                <button id="download-tree" disabled=move || tree.id.get().is_none() || exporting.get().is_some() on:click=export>{move || ctx.tr("data.tree")}</button>
                <button id="download-log" disabled=no_node on:click=log>{move || ctx.tr("data.log")}</button>
                <button id="download-series" disabled=move || no_node() || !has_series() on:click=series>{move || ctx.tr("data.series")}</button>
                <button id="download-chart" disabled=move || no_node() || !has_series() on:click=chart>{move || ctx.tr("data.chart")}</button>
            </div>
            {move || export_progress().map(|p| view! { <p id="export-progress" class="muted">{p}</p> })}
            {move || export_error.get().map(|e| view! { <p id="export-error" class="reason">{e}</p> })}
            <ImportButton />
        </section>
    }
}

/// Uploads an export file; the new tree opens. The server's refusal is shown as it words it.
#[component]
pub fn ImportButton() -> impl IntoView {
    let ctx = ctx();
    let input = NodeRef::<html::Input>::new();
    let error = RwSignal::new(None::<String>);
    let chosen = move |_| {
        let Some(el) = input.get() else { return };
        error.set(None);
        leptos::task::spawn_local(async move {
            let r = async {
                let text = api::read_chosen_file(&el).await?;
                // Not JSON at all: say so here; anything else the server judges (in its words).
                serde_json::from_str::<serde::de::IgnoredAny>(&text)
                    .map_err(|e| ApiError::Client(format!("{}: {e}", ctx.tr("data.notJson"))))?;
                api::import_tree(text).await
            };
            match r.await {
                Ok(t) => ctx.navigate(Route::SimTree(Some(t.id))),
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(e) => error.set(Some(e.to_string())),
            }
            el.set_value("");
        });
    };
    view! {
        <div class="field">
            <label for="import-file">{move || ctx.tr("data.import")}</label>
            <input id="import-file" type="file" accept=".json,application/json" node_ref=input on:change=chosen />
            {move || error.get().map(|e| view! { <p id="import-error" class="error">{e}</p> })}
        </div>
    }
}
