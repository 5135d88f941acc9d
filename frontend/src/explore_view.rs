//! The exploration panel of the SimTree page: the tree's explorations, the chosen one's race (a
//! row per candidate: its values, replicates, mean with its 95% interval, in or out of the race;
//! kept live by the tree socket's `explore_progress`), its best with a button that opens its
//! branch, and a cancel button while it runs. Below, the form that starts one from the selected
//! node (objective, one axis, budget), with its worst-case cost and the server's refusal shown in
//! place. The words come from [`crate::explore`] (pure).

use leptos::prelude::*;
use serde_json::Value;
use simtree_shared::{ExploreStatus, ExploreTable, TreeMsg};

use crate::api::{self, ApiError};
use crate::explore::{ExploreForm, mean_text, merge, point_text, race_order, status_key};
use crate::job_view::{Job, JobNames, job_form, job_panel, text_input};
use crate::state::{Ctx, Tree, ctx};

impl Job for ExploreTable {
    const NAMES: JobNames = JobNames {
        name: "explore",
        title: "explore.title",
        none: "explore.none",
        new: "explore.new",
        start: "explore.start",
    };
    fn id(&self) -> u64 {
        self.explore
    }
    fn parent(&self) -> u64 {
        self.parent
    }
    fn standing(&self, ctx: Ctx) -> String {
        ctx.tr(status_key(self.status)).to_string()
    }
    async fn all(tree: u64) -> Result<Vec<Self>, ApiError> {
        api::explores(tree).await
    }
    async fn one(tree: u64, id: u64) -> Result<Self, ApiError> {
        api::explore(tree, id).await
    }
    async fn start(tree: u64, body: Value) -> Result<u64, ApiError> {
        Ok(api::start_explore(tree, &body).await?.explore)
    }
    fn progress(msg: &TreeMsg) -> Option<u64> {
        match msg {
            TreeMsg::ExploreProgress { explore, .. } => Some(*explore),
            _ => None,
        }
    }
    fn merge(list: &mut Vec<Self>, table: Self) {
        merge(list, table)
    }
}

#[component]
pub fn ExplorePanel(tree: Tree) -> impl IntoView {
    job_panel(
        tree,
        move |table: ExploreTable| view! { <ExploreRace tree table /> },
        move |started| view! { <NewExplore tree started /> },
    )
}

/// One exploration: where it stands, its candidates in the order the race left them, its best.
#[component]
fn ExploreRace(tree: Tree, table: ExploreTable) -> impl IntoView {
    let ctx = ctx();
    let budget = match table.budget.runs {
        Some(r) => format!("{}/{r}", table.runs_used),
        None => table.runs_used.to_string(),
    };
    let mut head = format!(
        "{} · {} {} · {} {budget}",
        ctx.tr(status_key(table.status)),
        ctx.tr("explore.round"),
        table.round,
        ctx.tr("explore.runs"),
    );
    // The money spent, and of how much when the exploration has a money cap.
    match (table.money_used, table.budget.money) {
        (Some(m), Some(cap)) => head.push_str(&format!(" · ${m:.4} / ${cap:.4}")),
        (Some(m), None) => head.push_str(&format!(" · ${m:.4}")),
        (None, Some(cap)) => head.push_str(&format!(" · – / ${cap:.4}")),
        (None, None) => {}
    }
    let reason = table.reason.clone();
    let goal_key = match table.objective.goal {
        simtree_shared::ExploreGoal::Min => "explore.min",
        simtree_shared::ExploreGoal::Max => "explore.max",
    };
    let rows = race_order(&table)
        .into_iter()
        .map(|i| {
            let c = table.candidates[i].clone();
            let node = c.node;
            let state = match c.dropped_after {
                None => ctx.tr("explore.alive").to_string(),
                Some(r) => format!("{} {r}", ctx.tr("explore.droppedAfter")),
            };
            let mut runs = format!("{}/{}", c.n, c.children.len());
            if c.pending > 0 {
                runs.push_str(&format!(" · {} {}", c.pending, ctx.tr("sweep.running")));
            }
            if c.failed > 0 {
                runs.push_str(&format!(" · {} {}", c.failed, ctx.tr("sweep.failed")));
            }
            view! {
                <tr data-candidate=i data-node=node class:dropped=!c.alive class:selected=move || tree.selected.get() == Some(node)>
                    <td><button class="link cell-pick" title=ctx.tr("sweep.pickCell") on:click=move |_| tree.selected.set(Some(node))>{point_text(&c.point)}</button></td>
                    <td class="mean">{mean_text(c.mean, c.ci95)}</td>
                    <td class="runs">{runs}</td>
                    <td class="state">{state}</td>
                </tr>
            }
        })
        .collect_view();
    let best = table.best.clone().map(|b| {
        let node = b.node;
        let label = point_text(&b.point);
        let margin = b.margin.as_ref().and_then(|m| m.mean_diff.map(|d| mean_text(Some(d), m.ci95)));
        view! {
            <p id="explore-best" class="explore-best" data-node=node>
                {format!("{}: {label} · {} (n={})", ctx.tr("explore.best"), mean_text(Some(b.mean), b.ci95), b.n)}
                {margin.map(|m| format!(" · {} {m}", ctx.tr("explore.margin")))}
                " "
                <button id="explore-open-best" class="primary" on:click=move |_| tree.selected.set(Some(node))>
                    {ctx.tr("explore.openBest")}
                </button>
            </p>
        }
    });
    let (t_id, e_id, running) =
        (tree.id.get_untracked().unwrap_or(0), table.explore, table.status == ExploreStatus::Running);
    let cancel = move |_| {
        leptos::task::spawn_local(async move {
            let _ = api::cancel_explore(t_id, e_id).await;
        });
    };
    view! {
        <div id="explore-race" class="explore-race" data-status=format!("{:?}", table.status).to_lowercase()>
            <p id="explore-head" class="muted">{head}</p>
            {reason.map(|r| view! { <p class="muted">{r}</p> })}
            {best}
            <table class="sweep-table">
                <thead><tr>
                    <th>{ctx.tr("explore.candidate")}</th>
                    <th title=table.objective.metric.clone()>{format!("{} ({})", table.objective.metric, ctx.tr(goal_key))}</th>
                    <th>{ctx.tr("sweep.runs")}</th>
                    <th></th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table>
            <Show when=move || running>
                <button id="explore-cancel" on:click=cancel>{ctx.tr("explore.cancel")}</button>
            </Show>
        </div>
    }
}

/// The form that starts an exploration from the selected node.
#[component]
fn NewExplore(tree: Tree, started: Callback<u64>) -> impl IntoView {
    let ctx = ctx();
    let form = RwSignal::new(ExploreForm::example(tree.kind.get_untracked()));
    Effect::new(move |_| form.set(ExploreForm::example(tree.kind.get())));
    // Its estimate is the worst case: every run the budget (or the whole schedule) allows.
    let body = move |parent| form.with(|f| f.to_body(parent)).map_err(|key| ctx.tr(key).to_string());
    let input = move |id, key, field| text_input(form, id, key, field);
    let fields = view! {
        <div class="sweep-form">
            {input("explore-metric", "explore.metric", |f| &mut f.metric)}
            <div class="field">
                <label for="explore-goal">{move || ctx.tr("explore.goal")}</label>
                <select id="explore-goal" prop:value=move || form.with(|f| f.goal.clone())
                    on:change=move |ev| form.update(|f| f.goal = event_target_value(&ev))>
                    <option value="min">{move || ctx.tr("explore.min")}</option>
                    <option value="max">{move || ctx.tr("explore.max")}</option>
                </select>
            </div>
            {input("explore-label", "sweep.axis", |f| &mut f.axis.label)}
            {input("explore-op", "sweep.op", |f| &mut f.axis.op)}
            {input("explore-field", "sweep.field", |f| &mut f.axis.field)}
            {input("explore-values", "sweep.values", |f| &mut f.axis.values)}
            <div class="row">
                {input("explore-replicates", "explore.replicates", |f| &mut f.axis.replicates)}
                {input("explore-turns", "sweep.turns", |f| &mut f.axis.turns)}
                {input("explore-seed", "sweep.seed", |f| &mut f.axis.seed)}
            </div>
            <div class="row">
                {input("explore-runs", "explore.budgetRuns", |f| &mut f.runs)}
                {input("explore-money", "explore.budgetMoney", |f| &mut f.money)}
            </div>
        </div>
    };
    job_form::<ExploreTable>(tree, started, body, fields)
}
