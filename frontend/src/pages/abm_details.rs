//! An agent-based model node's details: its step and seed, its structure with each global's value
//! at the node, its tracked variables
//! over the steps, and the variables tracked per agent at its last step, agent by agent.

use leptos::prelude::*;
use simtree_shared::abm::AbmView;

use super::overlay::{OverlayChoice, OverlayOptions, mean_lines, overlays, pooled_and_apart, series_lines};
use crate::api::{self};
use crate::chart::{AbmStructure, AgentTable, Tracked, abm_series, abm_steps, abm_structure, agent_table, short_name};
use crate::editors::{abm_fields, abm_sets, last_abm_values};
use crate::plot::LineChart;
use crate::state::{Tree, ctx};

/// An agent-based model's structure and its tracked variables over the steps of this node's path;
/// other nodes (the compare target, the siblings) overlaid dashed, or all of them drawn as a mean
/// with a band of ± sd.
#[component]
pub(super) fn AbmDetails(tree: Tree, view: AbmView, choice: OverlayChoice) -> impl IntoView {
    let ctx = ctx();
    let AbmStructure { topology, globals, agents } = abm_structure(&view.outline());
    // (node, its series, its step numbers) of the selected node; the overlaid nodes' series.
    let own = RwSignal::new((0, Vec::<Tracked>::new(), Vec::<String>::new()));
    let per_agent = RwSignal::new(None::<AgentTable>);
    // Each global's value at the node ("infectionRate = 0.3"), as the branch editor reads it:
    // set by a branch op since the last step, else tracked, else its initial value.
    let outline = StoredValue::new(view.outline());
    let values = RwSignal::new(None::<Vec<String>>);
    // The node's own seed, from its info: the view's is the seed the model was built with, which
    // a fan-out's or a sweep's replicates each replaced with their own.
    let seed = RwSignal::new(None::<u64>);
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(l) = api::node_logs(t, n).await {
                own.try_set((n, abm_series(&l), abm_steps(&l)));
                per_agent.try_set(agent_table(&l));
                // (The panel may be drawn anew meanwhile, for another node: `try_`.)
                let sets = tree.graph.try_with_untracked(|g| abm_sets(&g.path_to(n), &g.ops, &l));
                let fields =
                    sets.and_then(|sets| outline.try_with_value(|o| abm_fields(o, &last_abm_values(&l), &sets)));
                if let Some(f) = fields {
                    values.try_set(Some(f.globals.iter().map(|f| format!("{} = {}", f.name, f.now)).collect()));
                }
            }
            if let Ok(i) = api::node_info(t, n).await
                && tree.selected.get_untracked() == Some(n)
            {
                seed.try_set(i.seed);
            }
        });
    });
    let OverlayChoice { band, .. } = choice;
    let others =
        overlays(tree, choice.siblings, |t, m| async move { api::node_logs(t, m).await.ok().map(|l| abm_series(&l)) });
    let terminated = view.terminated.as_ref().map(|t| t.reason.clone());
    let status = move || {
        format!(
            "{} {}{}{}",
            ctx.tr("inspector.step"),
            view.steps,
            seed.get().map(|s| format!(" · {} {s}", ctx.tr("abm.seed"))).unwrap_or_default(),
            terminated.as_ref().map(|r| format!(" · {} ({r})", ctx.tr("abm.terminated"))).unwrap_or_default()
        )
    };
    view! {
        <div id="abm-view">
            <p>{status}</p>
            <p class="structure">
                {move || format!("{}: {topology} · {}: ", ctx.tr("abm.topology"), ctx.tr("abm.globals"))}
                <span id="abm-globals">{move || values.get().unwrap_or_else(|| globals.clone()).join(", ")}</span>
                {agents.into_iter().map(|(k, attrs)| {
                    let attrs = attrs.join(", ");
                    view! { <span class="agent-type">{move || format!(" · {} {k}: {attrs}", ctx.tr("abm.agent"))}</span> }
                }).collect_view()}
            </p>
            {move || {
                let (n, series, steps) = own.get();
                others.with(|o| {
                    let (pooled, apart) = pooled_and_apart(tree, o);
                    if band.get() && !pooled.is_empty() {
                        let runs: Vec<&[Tracked]> = std::iter::once(series.as_slice()).chain(pooled.iter().map(|(_, s)| s.as_slice())).collect();
                        let (mut lines, bands) = mean_lines(&runs, ctx.tr("overlay.mean"));
                        lines.extend(series_lines((n, &[]), &apart));
                        view! { <LineChart id="abm-chart" lines bands x_labels=steps x_unit=ctx.tr("inspector.step") /> }
                    } else {
                        let lines = series_lines((n, &series), o);
                        view! { <LineChart id="abm-chart" lines x_labels=steps x_unit=ctx.tr("inspector.step") /> }
                    }
                })
            }}
            <OverlayOptions choice />
            {move || per_agent.get().map(agents_view)}
        </div>
    }
}

/// The variables tracked per agent at the node's last step: one row per agent (the k-th by id),
/// with each variable's sum over the agents in the summary and the last row.
fn agents_view(table: AgentTable) -> impl IntoView {
    let ctx = ctx();
    let sums: Vec<String> = table.sums.iter().map(|s| s.map(crate::chart::value_label).unwrap_or_default()).collect();
    let summary = table
        .names
        .iter()
        .zip(&sums)
        .filter(|(_, s)| !s.is_empty())
        .map(|(n, s)| format!("{} {} {s}", short_name(n), ctx.tr("abm.sum")))
        .collect::<Vec<_>>()
        .join(" · ");
    let head = format!(
        "{} ({} {}, {} {})",
        ctx.tr("abm.perAgent"),
        ctx.tr("inspector.step"),
        table.step,
        table.rows.len(),
        ctx.tr("abm.agents")
    );
    view! {
        <details id="abm-agents" class="agents-table">
            <summary>{head}{(!summary.is_empty()).then(|| format!(" · {summary}"))}</summary>
            <table class="metrics">
                <tr>
                    <th>{ctx.tr("abm.agent")}</th>
                    {table.names.iter().map(|n| view! { <th title=n.clone()>{short_name(n).to_string()}</th> }).collect_view()}
                </tr>
                {table.rows.into_iter().enumerate().map(|(i, row)| view! {
                    <tr><td>{(i + 1).to_string()}</td>{row.into_iter().map(|v| view! { <td>{v}</td> }).collect_view()}</tr>
                }).collect_view()}
                <tr class="sum">
                    <td>{ctx.tr("abm.sum")}</td>
                    {sums.into_iter().map(|s| view! { <td>{s}</td> }).collect_view()}
                </tr>
            </table>
        </details>
    }
}
