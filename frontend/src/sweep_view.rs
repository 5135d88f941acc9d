//! The sweep panel of the SimTree page: the tree's sweeps, the chosen one's table (cells ×
//! metrics, each metric's paired effect against the baseline cell as `Δ` with its 95% interval,
//! where its runs stand; downloadable as CSV or JSON), a chart per metric and a forest plot of
//! the effects, kept live by the tree socket's
//! `sweep_progress`; a click on a cell selects its node in the graph. Below, the form that starts
//! a sweep from the selected node, with the server's refusal shown in place.
//!
//! The words and numbers come from [`crate::sweep`] (pure); the charts are [`crate::plot`]'s.

use leptos::prelude::*;
use serde_json::Value;
use simtree_shared::{SweepTable, TreeMsg};

use crate::api::{self, ApiError};
use crate::job_view::{Job, JobNames, job_form, job_panel, text_input};
use crate::plot::SweepChart;
use crate::state::{Ctx, Tree, ctx};
use crate::sweep::{
    ForestPlot, MetricPlot, SweepForm, cell_label, effect_text, effect_title, merge_table, summary_text, with_parent,
};

impl Job for SweepTable {
    const NAMES: JobNames =
        JobNames { name: "sweep", title: "sweep.title", none: "sweep.none", new: "sweep.new", start: "sweep.start" };
    fn id(&self) -> u64 {
        self.sweep
    }
    fn parent(&self) -> u64 {
        self.parent
    }
    fn standing(&self, _: Ctx) -> String {
        format!("{}/{}", self.done + self.failed, self.total)
    }
    async fn all(tree: u64) -> Result<Vec<Self>, ApiError> {
        api::sweeps(tree).await
    }
    async fn one(tree: u64, id: u64) -> Result<Self, ApiError> {
        api::sweep(tree, id).await
    }
    async fn start(tree: u64, body: Value) -> Result<u64, ApiError> {
        Ok(api::start_sweep(tree, &body).await?.sweep)
    }
    fn progress(msg: &TreeMsg) -> Option<u64> {
        match msg {
            TreeMsg::SweepProgress { sweep, .. } => Some(*sweep),
            _ => None,
        }
    }
    fn merge(list: &mut Vec<Self>, table: Self) {
        merge_table(list, table)
    }
}

#[component]
pub fn SweepPanel(tree: Tree) -> impl IntoView {
    job_panel(
        tree,
        move |table: SweepTable| view! { <SweepResult tree table /> },
        move |started| view! { <NewSweep tree started /> },
    )
}

/// One sweep: where its runs stand, its table and a chart per metric.
#[component]
fn SweepResult(tree: Tree, table: SweepTable) -> impl IntoView {
    let ctx = ctx();
    let progress = ctx
        .tr("sweep.progress")
        .replace("{{done}}", &table.done.to_string())
        .replace("{{total}}", &table.total.to_string())
        .replace("{{pending}}", &table.pending.to_string())
        .replace("{{failed}}", &table.failed.to_string());
    // The metrics in the file's order (an older server sent none: the first cell's then).
    let metrics: Vec<(String, String)> = if table.metrics.is_empty() {
        let first: Vec<String> = table.cells.first().map(|c| c.metrics.keys().cloned().collect()).unwrap_or_default();
        first.into_iter().map(|m| (m, String::new())).collect()
    } else {
        table.metrics.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let nodes: Vec<u64> = table.cells.iter().map(|c| c.node).collect();
    let baseline_label = table.cells.get(table.baseline).map(cell_label).unwrap_or_default();
    let pick = Callback::new(move |i: usize| {
        if let Some(&n) = nodes.get(i) {
            tree.selected.set(Some(n));
        }
    });
    let head = metrics
        .iter()
        .map(|(name, def)| {
            let method = if table.interval.is_t() { "t" } else { ctx.tr("sweep.bootstrap") };
            let title = ctx
                .tr("sweep.effectTitle")
                .replace("{{name}}", name)
                .replace("{{baseline}}", &baseline_label)
                .replace("{{method}}", method);
            view! { <th title=def.clone()>{name.clone()}</th><th class="effect" title=title>{format!("Δ {name}")}</th> }
        })
        .collect_view();
    let rows = table
        .cells
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let node = c.node;
            let is_baseline = i == table.baseline;
            let cells = metrics
                .iter()
                .map(|(name, _)| {
                    let effect = c.effects.get(name);
                    // The baseline's own column stays empty: it is what the others are measured against.
                    let text = if is_baseline { "·".to_string() } else { effect.map_or_else(|| "–".into(), effect_text) };
                    let title = effect.map(effect_title).unwrap_or_default();
                    view! {
                        <td>{c.metrics.get(name).map_or_else(|| "–".into(), summary_text)}</td>
                        <td class="effect" title=title data-metric=name.clone()>{text}</td>
                    }
                })
                .collect_view();
            // Replicates measured of all, then those still running or failed.
            let measured = c.children.len().saturating_sub(c.pending + c.failed.len());
            let mut runs = format!("{measured}/{}", c.children.len());
            for (count, key) in [(c.pending, "sweep.running"), (c.failed.len(), "sweep.failed")] {
                if count > 0 {
                    runs.push_str(&format!(" · {count} {}", ctx.tr(key)));
                }
            }
            // What the cell's provider calls cost, when the server could price them.
            if let Some(m) = c.money {
                runs.push_str(&format!(" · ${m:.4}"));
            }
            view! {
                <tr data-cell=i data-node=node class:baseline=is_baseline class:selected=move || tree.selected.get() == Some(node)>
                    <td><button class="link cell-pick" title=ctx.tr("sweep.pickCell") on:click=move |_| pick.run(i)>{cell_label(c)}</button></td>
                    {cells}
                    <td class="runs">{runs}</td>
                </tr>
            }
        })
        .collect_view();
    let failures = table
        .cells
        .iter()
        .flat_map(|c| c.failed.iter())
        .map(|f| view! { <li>{format!("#{}: {}", f.node, f.error)}</li> })
        .collect_view();
    let charts = metrics
        .iter()
        .enumerate()
        .filter_map(|(k, (name, def))| {
            let plot = MetricPlot::of(&table, name)?;
            let forest = ForestPlot::of(&table, name).map(|plot| {
                view! {
                    <h4 class="chart-title">{format!("Δ {name} − {} (95%)", plot.baseline)}</h4>
                    <Forest id=format!("sweep-forest-{k}") plot on_pick=pick />
                }
            });
            Some(view! {
                <h4 class="chart-title">{format!("{name} ({def})")}</h4>
                <SweepChart id=format!("sweep-chart-{k}") plot on_pick=pick />
                {forest}
            })
        })
        .collect_view();
    let (csv, json) = (table.to_csv(), serde_json::to_string_pretty(&table).unwrap_or_default());
    let (t_id, s_id) = (tree.id.get_untracked().unwrap_or(0), table.sweep);
    let save = move |ext: &'static str, mime: &'static str, text: String| {
        move |_| {
            let _ = api::download(&format!("simtree-tree{t_id}-sweep{s_id}.{ext}"), mime, &text);
        }
    };
    view! {
        <div id="sweep-result" data-sweep=table.sweep>
            <p id="sweep-progress" class="muted">{progress}</p>
            <p class="sweep-downloads">
                <button id="sweep-csv" on:click=save("csv", "text/csv", csv)>"CSV"</button>
                " "
                <button id="sweep-json-download" on:click=save("json", "application/json", json)>"JSON"</button>
            </p>
            <table id="sweep-table" class="sweep-table">
                <tr><th>{ctx.tr("sweep.cell")}</th>{head}<th>{ctx.tr("sweep.runs")}</th></tr>
                {rows}
            </table>
            <ul id="sweep-failures" class="reason-list">{failures}</ul>
            {charts}
        </div>
    }
}

/// The forest plot of one metric's effects: a row per cell but the baseline, its mean paired
/// difference as a dot and its 95% interval as a whisker, the dashed line at 0 (no effect).
/// Colours come from the chart palette, so no style sheet is needed; a click on a row's label or
/// dot selects the cell's node.
#[component]
fn Forest(id: String, plot: ForestPlot, on_pick: Callback<usize>) -> impl IntoView {
    const ROW: f64 = 22.0;
    const TOP: f64 = 8.0;
    const BOTTOM: f64 = 26.0;
    const LEFT: f64 = 150.0;
    const WIDTH: f64 = 560.0;
    const RIGHT: f64 = WIDTH - 20.0;
    let height = TOP + BOTTOM + ROW * plot.rows.len() as f64;
    let colour = crate::chart::COLOURS[0];
    let zero = plot.x(0.0, LEFT, RIGHT);
    let y = move |i: usize| TOP + ROW * (i as f64 + 0.5);
    let ticks = plot
        .axis
        .ticks
        .iter()
        .map(|&v| {
            let x = plot.x(v, LEFT, RIGHT);
            view! {
                <line x1=x x2=x y1=TOP y2=height - BOTTOM stroke="currentColor" stroke-opacity="0.12"></line>
                <text class="tick" x=x y=height - BOTTOM + 15.0 text-anchor="middle" font-size="10" fill="currentColor">
                    {crate::chart::tick_label(v, plot.axis.step)}
                </text>
            }
        })
        .collect_view();
    let rows = plot
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let cell = r.cell;
            let whisker = (r.lo.is_finite() && r.hi.is_finite()).then(|| {
                let (x1, x2) = (plot.x(r.lo, LEFT, RIGHT), plot.x(r.hi, LEFT, RIGHT));
                view! {
                    <line class="ci" x1=x1 x2=x2 y1=y(i) y2=y(i) stroke=colour stroke-width="2"></line>
                    <line x1=x1 x2=x1 y1=y(i) - 4.0 y2=y(i) + 4.0 stroke=colour></line>
                    <line x1=x2 x2=x2 y1=y(i) - 4.0 y2=y(i) + 4.0 stroke=colour></line>
                }
            });
            let dot = r.diff.is_finite().then(|| {
                view! {
                    <circle class="diff" data-cell=cell cx=plot.x(r.diff, LEFT, RIGHT) cy=y(i) r="4" fill=colour
                        on:click=move |_| on_pick.run(cell)></circle>
                }
            });
            view! {
                <g class="forest-row" data-cell=cell>
                    <text x=LEFT - 8.0 y=y(i) + 4.0 text-anchor="end" font-size="11" fill="currentColor"
                        style="cursor: pointer" on:click=move |_| on_pick.run(cell)>
                        <title>{r.label.clone()}</title>
                        {crate::ops::ellipsis(&r.label, 24)}
                    </text>
                    {whisker}
                    {dot}
                </g>
            }
        })
        .collect_view();
    view! {
        <svg id=id class="chart sweep-forest" width=WIDTH height=height viewBox=format!("0 0 {WIDTH} {height}")>
            {ticks}
            <line class="zero" x1=zero x2=zero y1=TOP y2=height - BOTTOM stroke="currentColor" stroke-dasharray="4 3"></line>
            {rows}
        </svg>
    }
}

/// The form that starts a sweep from the selected node: one axis and the sweep's settings, or
/// the whole file as JSON (expert mode, for several axes).
#[component]
fn NewSweep(tree: Tree, started: Callback<u64>) -> impl IntoView {
    let ctx = ctx();
    let form = RwSignal::new(SweepForm::example(tree.kind.get_untracked()));
    let json_mode = RwSignal::new(false);
    let json_text = RwSignal::new(String::new());
    // A working example for what the tree simulates.
    Effect::new(move |_| form.set(SweepForm::example(tree.kind.get())));
    let body = move |parent| {
        let text = if json_mode.get() {
            json_text.get()
        } else {
            let file = form.with(SweepForm::to_file).map_err(|key| ctx.tr(key).to_string())?;
            serde_json::to_string(&file).unwrap_or_default()
        };
        with_parent(&text, parent).ok_or_else(|| ctx.tr("sweep.errJson").to_string())
    };
    let toggle_json = move |ev| {
        let on = event_target_checked(&ev);
        if on && let Ok(text) = form.with_untracked(SweepForm::to_file) {
            json_text.set(serde_json::to_string_pretty(&text).unwrap_or_default());
        }
        json_mode.set(on);
    };
    let input = move |id, key, field| text_input(form, id, key, field);
    let fields = view! {
        <label class="check">
            <input id="sweep-json-mode" type="checkbox" prop:checked=move || json_mode.get() on:change=toggle_json />
            {move || ctx.tr("sweep.json")}
        </label>
        <Show
            when=move || json_mode.get()
            fallback=move || view! {
                <div class="sweep-form">
                    {input("sweep-label", "sweep.axis", |f| &mut f.label)}
                    {input("sweep-op", "sweep.op", |f| &mut f.op)}
                    {input("sweep-field", "sweep.field", |f| &mut f.field)}
                    {input("sweep-values", "sweep.values", |f| &mut f.values)}
                    <div class="row">
                        {input("sweep-replicates", "sweep.replicates", |f| &mut f.replicates)}
                        {input("sweep-turns", "sweep.turns", |f| &mut f.turns)}
                        {input("sweep-seed", "sweep.seed", |f| &mut f.seed)}
                    </div>
                    <div class="field">
                        <label for="sweep-metrics">{move || ctx.tr("sweep.metrics")}</label>
                        <textarea id="sweep-metrics" prop:value=move || form.with(|f| f.metrics.clone())
                            on:input=move |ev| form.update(|f| f.metrics = event_target_value(&ev))></textarea>
                    </div>
                </div>
            }
        >
            <textarea id="sweep-json" class="sweep-json" prop:value=move || json_text.get()
                on:input=move |ev| json_text.set(event_target_value(&ev))></textarea>
        </Show>
    };
    job_form::<SweepTable>(tree, started, body, fields)
}
