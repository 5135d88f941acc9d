//! The trading scenario's form: the market data (the shipped data, an uploaded dataset, or a CSV
//! to upload — previewed first: its first rows and each ticker's closes; the server's refusal is
//! shown at the line it names), the tickers and dates of the episode, the agent and its cash.

use leptos::html;
use leptos::prelude::*;
use simtree_shared::DatasetInfo;
use simtree_shared::trading::AgentSpec;

use super::{Doc, choice_field, number_field, text_field};
use crate::api::{self, ApiError};
use crate::chart::COLOURS;
use crate::draft::{
    CsvPreview, csv_preview, dataset_name, refusal_line, set_at, set_dataset, set_trading_agent, text_line, text_value,
    tickers_of, toggle_ticker,
};
use crate::plot::{Line, LineChart};
use crate::state::ctx;

/// Rows of a chosen file shown before it is uploaded.
const PREVIEW_ROWS: usize = 8;

#[component]
pub(super) fn TradingForm(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    let datasets = RwSignal::new(Vec::<DatasetInfo>::new());
    let load = move |select: Option<String>| {
        leptos::task::spawn_local(async move {
            match api::datasets().await {
                Ok(list) => {
                    datasets.try_set(list);
                    if let Some(name) = select {
                        choose(doc, datasets, &name);
                    }
                }
                Err(e) => ctx.error(e),
            }
        });
    };
    load(None);
    // The dataset the document trades on: its `episode.dataset`, else the shipped data.
    let current = move || {
        let named = doc.text("/episode/dataset");
        datasets.with(|l| l.iter().find(|d| if named.is_empty() { d.read_only } else { d.name == named }).cloned())
    };
    let tickers = move || current().map(|d| d.tickers).unwrap_or_default();
    let agent = move || doc.text("/episode/agent/kind");
    view! {
        <section id="trading-form" class="panel new-form">
            <h3>{move || ctx.tr("new.scenario")}</h3>
            {text_field(doc, "new-title".into(), "new.title", "/title".into(), false)}
            <h3>{move || ctx.tr("new.marketData")}</h3>
            <div class="row">
                <label for="dataset-select">{move || ctx.tr("new.dataset")}</label>
                <select id="dataset-select" on:change=move |ev| choose(doc, datasets, &event_target_value(&ev))>
                    <For
                        each=move || datasets.get()
                        key=|d| (d.name.clone(), d.rows)
                        children=move |d: DatasetInfo| {
                            let name = d.name.clone();
                            let label = move || {
                                let rows = ctx.tr("new.rows").replace("{{n}}", &d.rows.to_string());
                                format!("{} — {} ({} … {}, {rows})", d.name, d.tickers.join(" "), d.first, d.last)
                            };
                            view! { <option value=name.clone() selected=move || current().is_some_and(|c| c.name == name)>{label}</option> }
                        }
                    />
                </select>
            </div>
            <CsvUpload on_uploaded=Callback::new(move |name: String| load(Some(name))) />
            <h3>{move || ctx.tr("new.episode")}</h3>
            <div class="field">
                <label>{move || ctx.tr("new.tickers")}</label>
                <div id="tickers" class=move || format!("actions-grid {}", doc.field_class("/episode/tickers"))>
                    {move || {
                        let chosen = doc.value.with(tickers_of);
                        tickers()
                            .into_iter()
                            .map(|t| {
                                let on = chosen.contains(&t);
                                let name = t.clone();
                                view! {
                                    <label class="action-chip">
                                        <input type="checkbox" id=format!("ticker-{t}") prop:checked=on
                                            on:change=move |_| doc.edit(|d| toggle_ticker(d, &name)) />
                                        {t.clone()}
                                    </label>
                                }
                            })
                            .collect_view()
                    }}
                </div>
            </div>
            <div class="row">
                <label for="start-date">{move || ctx.tr("new.dates")}</label>
                {date_input(doc, "start-date", "/episode/start_date", current)}
                "–"
                {date_input(doc, "end-date", "/episode/end_date", current)}
            </div>
            {choice_field(doc, "agent-kind", "new.agentKind", AgentSpec::KINDS, agent, set_trading_agent)}
            <div class="row">
                {number_field(doc, "initial-cash", "new.cash", "/episode/initial_cash")}
                {number_field(doc, "default-turns", "new.defaultTurns", "/default_turns")}
            </div>
        </section>
    }
}

/// Trades on dataset `name` (the read-only shipped one is named by leaving `dataset` out).
fn choose(doc: Doc, datasets: RwSignal<Vec<DatasetInfo>>, name: &str) {
    let Some(d) = datasets.with_untracked(|l| l.iter().find(|d| d.name == name).cloned()) else {
        return;
    };
    let named = (!d.read_only).then_some(d.name.as_str());
    doc.edit(|v| set_dataset(v, named, &d.tickers, &d.first, &d.last));
}

fn date_input(
    doc: Doc,
    id: &'static str,
    ptr: &'static str,
    range: impl Fn() -> Option<DatasetInfo> + Copy + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <input id=id type="date"
            min=move || range().map(|d| d.first)
            max=move || range().map(|d| d.last)
            prop:value=move || doc.text(ptr)
            on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, ptr, text_value(&v))) } />
    }
}

/// Choose a CSV, look at it, name it and upload it; the server's refusal is shown with the line
/// it names. `on_uploaded` gets the new dataset's name.
#[component]
fn CsvUpload(on_uploaded: Callback<String>) -> impl IntoView {
    let ctx = ctx();
    let input = NodeRef::<html::Input>::new();
    let text = RwSignal::new(None::<String>);
    let preview = RwSignal::new(None::<CsvPreview>);
    let name = RwSignal::new(String::new());
    let error = RwSignal::new(None::<(String, Option<usize>)>);
    let uploading = RwSignal::new(false);
    let done = RwSignal::new(None::<String>);
    let chosen = move |_| {
        let Some(el) = input.get() else { return };
        error.set(None);
        done.set(None);
        if let Some(f) = el.files().and_then(|f| f.get(0)) {
            name.set(dataset_name(&f.name()));
        }
        leptos::task::spawn_local(async move {
            match api::read_chosen_file(&el).await {
                Ok(t) => {
                    preview.set(Some(csv_preview(&t, PREVIEW_ROWS)));
                    text.set(Some(t));
                }
                Err(e) => error.set(Some((e.to_string(), None))),
            }
        });
    };
    let upload = move |_| {
        let Some(csv) = text.get_untracked() else { return };
        let n = name.get_untracked().trim().to_string();
        uploading.set(true);
        error.set(None);
        done.set(None);
        leptos::task::spawn_local(async move {
            let r = api::upload_dataset(&n, csv).await;
            uploading.try_set(false);
            match r {
                Ok(info) => {
                    done.try_set(Some(ctx.tr("new.uploaded").replace("{{name}}", &info.name)));
                    on_uploaded.run(info.name);
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(ApiError::Http(_, body) | ApiError::NotFound(body)) => {
                    let line = refusal_line(&body.detail);
                    error.try_set(Some((body.detail, line)));
                }
                Err(e) => {
                    error.try_set(Some((e.to_string(), None)));
                }
            }
        });
    };
    let bad_line = move || error.with(|e| e.as_ref().and_then(|e| e.1));
    // The refused line itself, when the preview's first rows do not show it.
    let refused_text = move || {
        let line = bad_line()?;
        let shown = preview.with(|p| p.as_ref().is_some_and(|p| p.rows.iter().any(|r| r.0 == line)));
        if shown {
            return None;
        }
        text.with(|t| t.as_deref().and_then(|t| text_line(t, line)).map(|l| format!("{line}: {l}")))
    };
    view! {
        <div id="csv-upload" class="field">
            <label for="csv-file">{move || ctx.tr("new.uploadCsv")}</label>
            <input id="csv-file" type="file" accept=".csv,text/csv" node_ref=input on:change=chosen />
            <p class="hint muted">"date,ticker,open,high,low,close,volume[,adj_close]"</p>
            {move || preview.get().map(|p| preview_view(p, bad_line()))}
            <Show when=move || text.with(Option::is_some)>
                <div class="row">
                    <label for="csv-name">{move || ctx.tr("new.datasetName")}</label>
                    <input id="csv-name" maxlength="64" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev)) />
                    <button id="csv-upload-btn" class="primary" disabled=move || uploading.get() on:click=upload>{move || ctx.tr("new.upload")}</button>
                    <Show when=move || uploading.get()>
                        <span class="muted">{move || ctx.tr("new.uploading")}</span>
                    </Show>
                </div>
            </Show>
            {move || error.get().map(|(e, _)| view! {
                <div id="csv-error" class="reason">
                    {e}
                    {refused_text().map(|l| view! { <pre id="csv-error-line">{l}</pre> })}
                </div>
            })}
            {move || done.get().map(|d| view! { <p id="csv-done" class="ok">{d}</p> })}
        </div>
    }
}

/// The first rows of a chosen file (the refused line marked) and a chart of each ticker's closes.
fn preview_view(p: CsvPreview, bad: Option<usize>) -> impl IntoView {
    let ctx = ctx();
    let lines: Vec<Line> = p
        .closes
        .iter()
        .zip(COLOURS.iter().cycle())
        .map(|((ticker, _, closes), colour)| Line {
            class: "series",
            name: ticker.clone(),
            label: ticker.clone(),
            values: closes.clone(),
            colour,
            dash: "",
        })
        .collect();
    let dates = p.closes.first().map(|c| c.1.clone()).unwrap_or_default();
    let head = p.header.iter().map(|h| view! { <th>{h.clone()}</th> }).collect_view();
    let rows = p
        .rows
        .iter()
        .map(|(line, cells)| {
            let class = if Some(*line) == bad { "bad" } else { "" };
            view! {
                <tr data-line=line.to_string() class=class>
                    <td class="muted">{*line}</td>
                    {cells.iter().map(|c| view! { <td>{c.clone()}</td> }).collect_view()}
                </tr>
            }
        })
        .collect_view();
    let total = ctx.tr("new.rowsInFile").replace("{{n}}", &p.total.to_string());
    view! {
        <div id="csv-preview">
            <table class="csv-table">
                <tr><th>"#"</th>{head}</tr>
                {rows}
            </table>
            <p class="hint muted">{total}</p>
            <LineChart id="csv-chart" lines x_labels=dates />
        </div>
    }
}
