//! An agent-based model node's details: its structure and tracked variables over the steps.

use leptos::prelude::*;
use simtree_shared::abm::AbmView;

use super::overlay::{OverlayChoice, OverlayOptions, mean_lines, overlays, pooled_and_apart, series_lines};
use crate::api::{self};
use crate::chart::{AbmStructure, Tracked, abm_series, abm_steps, abm_structure};
use crate::plot::LineChart;
use crate::state::{Tree, ctx};

/// An agent-based model's structure and its tracked variables over the steps of this node's path;
/// other nodes (the compare target, the siblings) overlaid dashed, or all of them drawn as a mean
/// with a band of ± sd.
#[component]
pub(super) fn AbmDetails(tree: Tree, view: AbmView, choice: OverlayChoice) -> impl IntoView {
    let ctx = ctx();
    let AbmStructure {
        topology,
        globals,
        agents,
    } = abm_structure(&view.outline());
    // (node, its series, its step numbers) of the selected node; the overlaid nodes' series.
    let own = RwSignal::new((0, Vec::<Tracked>::new(), Vec::<String>::new()));
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(l) = api::node_logs(t, n).await {
                own.set((n, abm_series(&l), abm_steps(&l)));
            }
        });
    });
    let OverlayChoice { band, .. } = choice;
    let others = overlays(tree, choice.siblings, |t, m| async move {
        api::node_logs(t, m).await.ok().map(|l| abm_series(&l))
    });
    let terminated = view.terminated.as_ref().map(|t| t.reason.clone());
    let status = move || {
        format!(
            "{} {} · {} {}{}",
            ctx.tr("inspector.step"),
            view.steps,
            ctx.tr("abm.seed"),
            view.seed,
            terminated
                .as_ref()
                .map(|r| format!(" · {} ({r})", ctx.tr("abm.terminated")))
                .unwrap_or_default()
        )
    };
    view! {
        <div id="abm-view">
            <p>{status}</p>
            <p class="structure">
                {move || format!("{}: {topology} · {}: {}", ctx.tr("abm.topology"), ctx.tr("abm.globals"), globals.join(", "))}
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
        </div>
    }
}
