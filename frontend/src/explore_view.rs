//! The exploration panel of the SimTree page: the tree's explorations, the chosen one's race (a
//! row per candidate: its values, replicates, mean with its 95% interval, in or out of the race;
//! kept live by the tree socket's `explore_progress`), its best with a button that opens its
//! branch, and a cancel button while it runs. Below, the form that starts one from the selected
//! node (objective, one axis, budget), with its worst-case cost and the server's refusal shown in
//! place. The words come from [`crate::explore`] (pure).

use leptos::prelude::*;
use simtree_shared::{ExploreStatus, ExploreTable, TreeMsg};

use crate::api;
use crate::estimate::{EstimateLine, debounced_estimate};
use crate::explore::{ExploreForm, mean_text, merge, point_label, race_order, status_key};
use crate::job_view::{JobKind, JobList, job_list, send_start, text_input};
use crate::state::{Tree, ctx};

#[component]
pub fn ExplorePanel(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let list = job_list(
        tree,
        JobKind {
            all: api::explores,
            one: api::explore,
            id_of: |e: &ExploreTable| e.explore,
            progress: |m| match m {
                TreeMsg::ExploreProgress { explore, .. } => Some(*explore),
                _ => None,
            },
            merge,
        },
    );
    let JobList {
        tables,
        chosen,
        started,
    } = list;
    let table = move || list.table(|e| e.explore);
    view! {
        <section id="explores" class="panel explores">
            <h3>{move || ctx.tr("explore.title")}</h3>
            <div id="explore-list" class="sweep-list">
                {move || {
                    let list = tables.get();
                    if list.is_empty() {
                        return view! { <p class="muted">{ctx.tr("explore.none")}</p> }.into_any();
                    }
                    list.into_iter()
                        .map(|e| {
                            let id = e.explore;
                            let text = format!("#{id} · {} #{} · {}", ctx.tr("sweep.from"), e.parent, ctx.tr(status_key(e.status)));
                            view! {
                                <button class="sweep-pick" class:active=move || chosen.get() == Some(id) data-explore=id
                                    on:click=move |_| chosen.set(Some(id))>{text}</button>
                            }
                        })
                        .collect_view()
                        .into_any()
                }}
            </div>
            {move || {
                // Its words are fixed when drawn: another language draws it again.
                ctx.lang.track();
                table().map(|t| view! { <ExploreRace tree table=t /> })
            }}
            <NewExplore tree started />
        </section>
    }
}

/// One exploration: where it stands, its candidates in the order the race left them, its best.
#[component]
fn ExploreRace(tree: Tree, table: ExploreTable) -> impl IntoView {
    let ctx = ctx();
    let budget = match (table.budget.runs, table.budget.money) {
        (Some(r), _) => format!("{}/{r}", table.runs_used),
        (None, _) => table.runs_used.to_string(),
    };
    let mut head = format!(
        "{} · {} {} · {} {budget}",
        ctx.tr(status_key(table.status)),
        ctx.tr("explore.round"),
        table.round,
        ctx.tr("explore.runs"),
    );
    if let Some(m) = table.money_used {
        head.push_str(&format!(" · ${m:.4}"));
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
                    <td><button class="link cell-pick" title=ctx.tr("sweep.pickCell") on:click=move |_| tree.selected.set(Some(node))>{point_label(&c)}</button></td>
                    <td class="mean">{mean_text(c.mean, c.ci95)}</td>
                    <td class="runs">{runs}</td>
                    <td class="state">{state}</td>
                </tr>
            }
        })
        .collect_view();
    let best = table.best.clone().map(|b| {
        let node = b.node;
        let label = b
            .point
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" · ");
        let margin = b
            .margin
            .as_ref()
            .and_then(|m| m.mean_diff.map(|d| mean_text(Some(d), m.ci95)));
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
    let (t_id, e_id, running) = (
        tree.id.get_untracked().unwrap_or(0),
        table.explore,
        table.status == ExploreStatus::Running,
    );
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
    let error = RwSignal::new(None::<String>);
    let sending = RwSignal::new(false);
    Effect::new(move |_| form.set(ExploreForm::example(tree.kind.get())));
    // The worst case: every run the budget (or the whole schedule) allows.
    let estimate = debounced_estimate(move || {
        let (t, parent) = (tree.id.get()?, tree.selected.get()?);
        if tree.graph.with(|g| g.status_of(parent)) == simtree_shared::NodeStatus::Running {
            return None;
        }
        Some((t, "explore", form.with(|f| f.to_body(parent)).ok()?))
    });
    let start = move |_| {
        let (Some(t), Some(parent)) = (tree.id.get_untracked(), tree.selected.get_untracked()) else {
            return;
        };
        let body = match form.with_untracked(|f| f.to_body(parent)) {
            Ok(b) => b,
            Err(key) => {
                error.set(Some(ctx.tr(key).to_string()));
                return;
            }
        };
        send_start(
            async move { api::start_explore(t, &body).await },
            error,
            sending,
            move |s| started.run(s.explore),
        );
    };
    let input = move |id, key, field| text_input(form, id, key, field);
    view! {
        <details id="explore-new" class="sweep-new">
            <summary>{move || ctx.tr("explore.new")} " " {move || tree.selected.get().map(|n| format!("#{n}"))}</summary>
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
            <EstimateLine id="explore-estimate" estimate=estimate />
            {move || error.get().map(|e| view! { <p id="explore-error" class="reason">{e}</p> })}
            <button id="explore-start" class="primary" disabled=move || sending.get() || tree.selected.get().is_none() on:click=start>
                {move || ctx.tr("explore.start")}
            </button>
        </details>
    }
}
