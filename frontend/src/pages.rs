//! The pages (spec §4.1–4.5) and their panels: home, SimTree (graph pane | inspector, ops,
//! branch editor, compare, node details), Studio (graph + ops | events | agents, live over the
//! node socket) and the read-only simulation viewer. Requests of a tree go through
//! [`Tree::run`], so a button cannot fire twice while its request is in flight.

use leptos::html;
use leptos::prelude::*;
use simtree_shared::abm::AbmView;
use simtree_shared::trading::{EpisodeMetrics, EquityPoint, ExecutedTrade, Performance, Side, TradingView};
// The wire's kind-specific view; `NodeView` here is the model's event/agent view of a node.
use simtree_shared::{CreateRequest, NodeInfo, NodeStatus, NodeView as KindView, ScenarioSummary, SimKind, TreeMsg};

use crate::api::{self, ApiError, Socket};
use crate::app::{Conn, Link, Tree, ctx, set_title};
use crate::branch::BranchEditor;
use crate::chart::{
    AbmStructure, COLOURS, Tracked, Trade, abm_series, abm_steps, abm_structure, mean_bands, pct, short_name,
    trade_marks,
};
use crate::compare::{Comparison, compare};
use crate::graph::{GraphView, Legend, Stats, UsageLine, node_summary, status_key, status_name};
use crate::model::{EventLine, NodeView, event_line, parse_count, viewer_line};
use crate::ops::finished_reason;
use crate::plot::{Band, Line, LineChart};
use crate::route::Route;

#[component]
pub fn Home() -> impl IntoView {
    let ctx = ctx();
    let card = move |route: Route, title: &'static str, desc: &'static str| {
        view! {
            <div class="card">
                <h2><Link route=route>{move || ctx.tr(title)}</Link></h2>
                <p>{move || ctx.tr(desc)}</p>
            </div>
        }
    };
    view! {
        <div class="home">
            {card(Route::SimTree(None), "home.tree", "home.treeDesc")}
            {card(Route::Studio(None), "home.studio", "home.studioDesc")}
            {card(Route::Sim { tree: None, node: 0 }, "home.sim", "home.simDesc")}
        </div>
        <crate::trees::TreeBrowser />
    }
}

/// The tree to open: the route's, else the last one used.
fn initial_tree(route_id: Option<u64>) -> Option<u64> {
    route_id.or_else(|| api::storage_get("devui:lastTreeId").and_then(|s| s.parse().ok()))
}

/// The page title names the tree and what it simulates.
fn title_effect(tree: Tree, page: &'static str) {
    Effect::new(move |_| {
        let title = match tree.id.get() {
            Some(id) => {
                let sc = tree.scenario.get();
                if sc.is_empty() {
                    format!("{page} · tree {id} · simtree")
                } else {
                    format!("{sc} · tree {id} · {page} · simtree")
                }
            }
            None => format!("{page} · simtree"),
        };
        set_title(&title);
    });
}

/// "Tree N not found", instead of an empty canvas.
#[component]
fn NotFound(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div id="not-found" class="empty-state">
            <h2>{move || ctx.tr("notFound.title")} " " {move || tree.id.get().map(|i| format!("#{i}"))}</h2>
            <p>{move || ctx.tr("notFound.body")}</p>
            <Link route=Route::Home>{move || ctx.tr("nav.home")}</Link>
        </div>
    }
}

/// A vertical splitter: dragging it resizes the side pane (remembered in localStorage).
#[component]
fn Splitter(width: RwSignal<f64>) -> impl IntoView {
    let drag = StoredValue::new(false);
    let moves = window_event_listener(leptos::ev::mousemove, move |ev| {
        if drag.get_value() {
            let vw = web_sys::window()
                .and_then(|w| w.inner_width().ok())
                .and_then(|v| v.as_f64())
                .unwrap_or(1400.0);
            let w = (vw - f64::from(ev.client_x())).clamp(300.0, vw * 0.7);
            width.set(w);
        }
    });
    let ups = window_event_listener(leptos::ev::mouseup, move |_| {
        if drag.get_value() {
            drag.set_value(false);
            api::storage_set("devui:sideWidth", &format!("{:.0}", width.get_untracked()));
        }
    });
    on_cleanup(move || {
        moves.remove();
        ups.remove();
    });
    view! { <div class="splitter" title="Drag to resize" on:mousedown=move |ev| { ev.prevent_default(); drag.set_value(true) }></div> }
}

fn side_width() -> RwSignal<f64> {
    RwSignal::new(
        api::storage_get("devui:sideWidth")
            .and_then(|s| s.parse().ok())
            .unwrap_or(440.0),
    )
}

#[component]
pub fn SimTreePage(tree_id: Option<u64>) -> impl IntoView {
    let tree = Tree::new();
    if let Some(id) = initial_tree(tree_id) {
        tree.connect(id);
    }
    title_effect(tree, "SimTree");
    let node_view = node_view_signal(tree);
    let width = side_width();
    view! {
        <Show when=move || tree.conn.get() != Conn::NotFound fallback=move || view! { <NotFound tree /> }>
            // The side pane's width is the splitter's live value: the one style set inline.
            <div class="page simtree workspace" style=move || format!("--side:{:.0}px", width.get())>
                <div class="graph-pane">
                    <TreeBar tree />
                    <GraphView tree />
                    <div class="graph-foot">
                        <Stats tree />
                        <Legend tree />
                    </div>
                </div>
                <Splitter width />
                <div class="side">
                    // Made once the tree is drawn: on a first load they cost as much as the graph.
                    <Show when=move || tree.shown.get()>
                        <Inspector tree node_view />
                        <OpsPanel tree node_view details=true />
                        <BranchEditor tree node_view />
                        <ComparePanel tree />
                        <crate::sweep_view::SweepPanel tree />
                        <NodeDetails tree view_state=node_view />
                        <crate::data::DataPanel tree node_view />
                        <CreatePanel studio=false tree=tree />
                    </Show>
                </div>
            </div>
        </Show>
    }
}

/// The bar above the graph: which tree is open, its scenario, the connection.
#[component]
fn TreeBar(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let conn = move || match tree.conn.get() {
        Conn::Live => ("live", ctx.tr("conn.live")),
        Conn::Connecting => ("connecting", ctx.tr("conn.connecting")),
        Conn::Lost => ("lost", ctx.tr("conn.lost")),
        Conn::NotFound => ("lost", ctx.tr("notFound.title")),
    };
    view! {
        <div class="tree-bar">
            <span id="tree-name" class="tree-name">
                {move || tree.id.get().map_or_else(|| ctx.tr("tree.none").to_string(), |i| format!("{} {i}", ctx.tr("tree.label")))}
                <Show when=move || !tree.scenario.get().is_empty()>
                    <span class="chip">{move || tree.scenario.get()}</span>
                </Show>
            </span>
            <span class="spacer"></span>
            <UsageLine tree />
            <span id="conn" class=move || format!("conn {}", conn().0)>{move || conn().1}</span>
        </div>
    }
}

/// The LLM choices of the create form: the offline mock (the default), and the server's own LLM
/// settings, which the form sends as no `llm` at all (the server does not say which provider it
/// is configured with, so the form cannot name it).
const MOCK: &str = "mock";
const SERVER_LLM: &str = "server";

/// Scenario picker, seed, token budget, the LLM player (social scenes), and Create / Refresh.
#[component]
fn CreatePanel(studio: bool, #[prop(optional)] tree: Option<Tree>) -> impl IntoView {
    let ctx = ctx();
    let scenarios = RwSignal::new(Vec::<ScenarioSummary>::new());
    let choice = RwSignal::new("simple_chat".to_string());
    let seed = RwSignal::new(String::new());
    let budget = RwSignal::new(String::new());
    let llm = RwSignal::new(MOCK.to_string());
    // The player matters to social scenes only (trading and ABM trees ignore it).
    let social = move || {
        let id = choice.get();
        scenarios.with(|l| l.iter().find(|s| s.id == id).is_none_or(|s| s.kind == SimKind::Social))
    };
    leptos::task::spawn_local(async move {
        match api::scenarios().await {
            Ok(list) => scenarios.set(list),
            Err(e) => ctx.error(e),
        }
    });
    let create = move |_| {
        let body = CreateRequest {
            scenario: choice.get().into(),
            name: None,
            seed: seed.get().trim().parse::<u64>().ok(),
            token_budget: budget.get().trim().parse::<u64>().ok(),
            llm: Some(llm.get()).filter(|l| social() && l != SERVER_LLM),
        };
        leptos::task::spawn_local(async move {
            match api::create_tree(&body).await {
                Ok(r) => {
                    api::storage_set("devui:lastTreeId", &r.id.to_string());
                    ctx.navigate(if studio {
                        Route::Studio(Some(r.id))
                    } else {
                        Route::SimTree(Some(r.id))
                    });
                }
                Err(e) => ctx.error(e),
            }
        });
    };
    view! {
        <section class="panel">
            <h3>{move || ctx.tr("simtree.createNew")}</h3>
            <div class="field">
                <label for="scenario-select">{move || ctx.tr("create.scenario")}</label>
                <select id="scenario-select" on:change=move |ev| choice.set(event_target_value(&ev)) prop:value=move || choice.get()>
                    <For
                        each=move || scenarios.get()
                        key=|s| s.id.clone()
                        children=move |ScenarioSummary { id, title, .. }| view! { <option value=id.clone() selected=move || choice.get() == id>{format!("{id} — {title}")}</option> }
                    />
                </select>
            </div>
            <div class="row">
                <label>{move || ctx.tr("create.seed")}</label>
                <input id="seed-input" type="number" min="0" placeholder="0" prop:value=move || seed.get() on:input=move |ev| seed.set(event_target_value(&ev)) />
                <label>{move || ctx.tr("create.budget")}</label>
                <input id="budget-input" type="number" min="1" placeholder="∞" prop:value=move || budget.get() on:input=move |ev| budget.set(event_target_value(&ev)) />
            </div>
            <Show when=social>
                <div class="field">
                    <label for="llm-select">{move || ctx.tr("create.llm")}</label>
                    <select id="llm-select" on:change=move |ev| llm.set(event_target_value(&ev)) prop:value=move || llm.get()>
                        <option value=MOCK>{move || ctx.tr("create.llmMock")}</option>
                        <option value="scripted">{move || ctx.tr("create.llmScripted")}</option>
                        <option value=SERVER_LLM>{move || ctx.tr("create.llmServer")}</option>
                    </select>
                    <p id="llm-note" class="hint muted">{move || ctx.tr("create.llmNote")}</p>
                </div>
            </Show>
            <div class="row">
                <button id="create-btn" class="primary" on:click=create>{move || ctx.tr("common.create")}</button>
                <button id="refresh-btn" disabled=move || tree.is_none() on:click=move |_| if let Some(t) = tree { t.refresh() }>
                    {move || ctx.tr("common.refresh")}
                </button>
            </div>
        </section>
    }
}

/// What the selected node is: what made it, its status and failure reason, and a key figure.
#[component]
fn Inspector(tree: Tree, node_view: RwSignal<Option<KindView>>) -> impl IntoView {
    let ctx = ctx();
    let info = RwSignal::new(None::<NodeInfo>);
    Effect::new(move |_| {
        tree.last_msg.track();
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            let v = api::node_info(t, n).await.ok();
            if tree.selected.get_untracked() == Some(n) {
                info.set(v);
            }
        });
    });
    let status = move || {
        let n = tree.selected.get()?;
        Some(tree.graph.with(|g| g.status_of(n)))
    };
    let reason = move || {
        let n = tree.selected.get()?;
        tree.graph
            .with(|g| g.errors.get(&n).cloned())
            .or_else(|| info.with(|i| i.as_ref()?.error.clone()))
    };
    let figure = move || {
        node_view.with(|v| {
            Some(match v.as_ref()? {
                KindView::Trading(v) => format!(
                    "{}{} {}/{} · {} {}",
                    // The last decision's date; before the first, the date it will be made.
                    match (&v.current_date, &v.next_date) {
                        (Some(d), _) => format!("{d} · "),
                        (None, Some(d)) => format!("{} {d} · ", ctx.tr("inspector.starts")),
                        (None, None) => String::new(),
                    },
                    ctx.tr("inspector.decisions"),
                    v.next_decision_point,
                    v.decision_points,
                    ctx.tr("inspector.equity"),
                    crate::ops::grouped(v.portfolio_value)
                ),
                KindView::Abm(v) => format!("{} {}", ctx.tr("inspector.step"), v.steps),
                KindView::Social(v) => format!("{}: {}", ctx.tr("inspector.scene"), v.scene),
            })
        })
    };
    let tokens = move || {
        info.with(|i| {
            let u = &i.as_ref()?.usage;
            let calls = Some(u.calls).filter(|c| *c > 0)?;
            Some(format!(
                "{calls} {} · {} {}",
                ctx.tr("usage.calls"),
                u.prompt_tokens + u.completion_tokens,
                ctx.tr("usage.tokens")
            ))
        })
    };
    view! {
        <section id="inspector" class="panel inspector">
            <Show when=move || tree.selected.get().is_some() fallback=move || view! { <p class="muted">{move || ctx.tr("inspector.none")}</p> }>
                <h3>
                    {move || format!("{} #{}", ctx.tr("inspector.node"), tree.selected.get().unwrap_or(0))}
                    <span id="node-status" class=move || format!("badge {}", status_name(status().unwrap_or_default()))>
                        {move || ctx.tr(status_key(status().unwrap_or_default()))}
                    </span>
                </h3>
                <p id="node-made" class="made">
                    {move || tree.selected.get().map(|n| tree.graph.with(|g| node_summary(g, n, ctx.lang.get())))}
                </p>
                {move || {
                    let (label, t) = tree.progress_of(tree.selected.get()?)?;
                    Some(view! {
                        <p id="node-progress" class="progress-line">
                            <span>{label}</span>
                            " "
                            <progress max=t.total value=t.done></progress>
                        </p>
                    })
                }}
                {move || reason().map(|r| view! { <p id="node-reason" class="reason">{r}</p> })}
                {move || figure().map(|f| view! { <p class="figure">{f}</p> })}
                {move || tokens().map(|t| view! { <p class="muted">{t}</p> })}
            </Show>
        </section>
    }
}

/// The runs the ops panel starts from the selected node.
#[derive(Clone, Copy)]
enum Advance {
    /// One child, run this many turns.
    One(u64),
    /// This many one-turn children, each under the last.
    Chain(u64),
    /// (turns, count): that many children side by side.
    Multi(u64, u64),
}

/// Run leaves, advance, parallel run, chain run, stop, details, delete (with confirmation).
#[component]
fn OpsPanel(tree: Tree, node_view: RwSignal<Option<KindView>>, details: bool) -> impl IntoView {
    let ctx = ctx();
    let leaves = RwSignal::new("1".to_string());
    let steps = RwSignal::new("1".to_string());
    let size = RwSignal::new("2".to_string());
    let chain = RwSignal::new("5".to_string());
    let confirm_delete = RwSignal::new(false);
    Effect::new(move |_| {
        tree.selected.track();
        confirm_delete.set(false);
    });
    let sel_status = move || tree.selected.get().map(|n| tree.graph.with(|g| g.status_of(n)));
    let running = move || sel_status() == Some(NodeStatus::Running);
    let no_tree = move || tree.id.get().is_none() || tree.busy.get();
    let finished = move || node_view.with(|v| v.as_ref().and_then(finished_reason));
    let no_sel = move || tree.id.get().is_none() || tree.selected.get().is_none() || tree.busy.get() || running();
    let no_advance = move || no_sel() || finished().is_some();
    let sel = move || tree.selected.get_untracked().unwrap_or(0);
    let input = move |id: &'static str, sig: RwSignal<String>| {
        view! { <input id=id type="number" min="1" prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev)) /> }
    };
    // Advance-like requests: the view follows the first child attached under the parent (a
    // single run's reply names its child; a parallel run's children are followed by the socket).
    let advance = move |run: Advance| {
        let (Some(t), parent) = (tree.id.get_untracked(), sel()) else {
            return;
        };
        tree.follow.set(Some(parent));
        tree.run(async move {
            let child = match run {
                Advance::One(turns) => Some(api::advance(t, parent, turns).await?.child),
                Advance::Chain(turns) => Some(api::advance_chain(t, parent, turns).await?.child),
                Advance::Multi(turns, count) => {
                    api::advance_multi(t, parent, turns, count).await?;
                    None
                }
            };
            if let Some(child) = child {
                tree.follow.set(None);
                tree.selected.set(Some(child));
            }
            Ok(())
        });
    };
    view! {
        <section class="panel ops">
            <h3>{move || ctx.tr("ops.title")}</h3>
            {move || finished().map(|r| view! { <p id="finished-note" class="note">{format!("{}: {r}", ctx.tr("ops.cannotAdvance"))}</p> })}
            <div class="row">
                <label>{move || ctx.tr("simtree.stepCount")}</label>
                {input("steps-input", steps)}
                <button id="advance-btn" class="primary" disabled=no_advance on:click=move |_| {
                    let turns = parse_count(&steps.get(), 1);
                    advance(Advance::One(turns));
                }>{move || ctx.tr("ops.advance")}</button>
            </div>
            <div class="row">
                <label>{move || ctx.tr("simtree.parallelSize")}</label>
                {input("parallel-input", size)}
                <button id="parallel-btn" disabled=no_advance on:click=move |_| {
                    let turns = parse_count(&steps.get(), 1);
                    let count = parse_count(&size.get(), 2);
                    advance(Advance::Multi(turns, count));
                }>{move || ctx.tr("simtree.parallelRun")}</button>
            </div>
            <div class="row">
                <label>{move || ctx.tr("simtree.chainLength")}</label>
                {input("chain-input", chain)}
                <button id="chain-btn" disabled=no_advance on:click=move |_| {
                    let turns = parse_count(&chain.get(), 5);
                    advance(Advance::Chain(turns));
                }>{move || ctx.tr("simtree.chainRun")}</button>
            </div>
            <div class="row">
                <label>{move || ctx.tr("simtree.runLeaves")}</label>
                {input("leaves-input", leaves)}
                <button id="run-leaves-btn" disabled=no_tree on:click=move |_| {
                    let turns = parse_count(&leaves.get(), 1);
                    let Some(t) = tree.id.get_untracked() else { return };
                    tree.run(async move {
                        api::advance_frontier(t, turns, false).await?;
                        Ok(())
                    })
                }>{move || ctx.tr("simtree.run")}</button>
            </div>
            <div class="row">
                <Show when=running>
                    <button id="stop-btn" class="danger" on:click=move |_| {
                        let (Some(t), node) = (tree.id.get_untracked(), sel()) else { return };
                        leptos::task::spawn_local(async move {
                            if let Err(e) = api::cancel(t, node).await {
                                ctx.error(e);
                            }
                        });
                    }>{move || ctx.tr("ops.stop")}</button>
                </Show>
                <Show when=move || details>
                    <button id="details-btn" disabled=no_sel on:click=move |_| {
                        if let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) {
                            ctx.navigate(Route::Sim { tree: Some(t), node: n });
                        }
                    }>{move || ctx.tr("common.viewDetails")}</button>
                </Show>
                <button
                    id="delete-btn"
                    class="danger-outline"
                    disabled=move || no_sel() || tree.selected.get() == Some(tree.graph.with(|g| g.root))
                    on:click=move |_| confirm_delete.set(true)
                >{move || ctx.tr("simtree.deleteSubtree")}</button>
            </div>
            <Show when=move || confirm_delete.get()>
                <div id="confirm-delete" class="confirm">
                    <span>{move || {
                        let n = sel();
                        let count = tree.graph.with(|g| g.descendants(n).len());
                        ctx.tr("confirm.delete").replace("{{id}}", &n.to_string()).replace("{{n}}", &count.to_string())
                    }}</span>
                    <button id="confirm-delete-yes" class="danger" on:click=move |_| {
                        confirm_delete.set(false);
                        let (Some(t), node) = (tree.id.get_untracked(), sel()) else { return };
                        tree.run(async move {
                            api::delete_node(t, node).await?;
                            tree.refresh();
                            Ok(())
                        });
                    }>{move || ctx.tr("common.delete")}</button>
                    <button id="confirm-delete-no" on:click=move |_| confirm_delete.set(false)>{move || ctx.tr("common.cancel")}</button>
                </div>
            </Show>
        </section>
    }
}

/// Root path of a node from the graph model (root first).
fn path_of(tree: Tree, node: u64) -> Vec<u64> {
    tree.graph.with_untracked(|g| {
        let mut path = vec![node];
        while let Some(p) = path.last().and_then(|&n| g.parent_of(n)) {
            if path.contains(&p) {
                break;
            }
            path.push(p);
        }
        path.reverse();
        path
    })
}

/// Compare the selected node with another: LCA, events since it side by side, first divergence.
#[component]
fn ComparePanel(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let other = RwSignal::new(String::new());
    let result = RwSignal::new(None::<(u64, u64, Comparison)>);
    let views = RwSignal::new(None::<(KindView, KindView)>);
    Effect::new(move |_| {
        if let Some(n) = tree.compare_with.get() {
            other.set(n.to_string());
        }
    });
    // A new selection makes the last comparison stale.
    Effect::new(move |_| {
        tree.selected.track();
        result.set(None);
        views.set(None);
    });
    let run = move |_| {
        let (Some(t), Some(a)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        let Ok(b) = other.get().trim().parse::<u64>() else {
            ctx.error(ApiError::Client(ctx.tr("compare.enterId").into()));
            return;
        };
        tree.compare_with.set(Some(b));
        let ctx2 = ctx;
        leptos::task::spawn_local(async move {
            let r: Result<(), ApiError> = async {
                let la = api::node_logs(t, a).await?;
                let lb = api::node_logs(t, b).await?;
                let c = compare(&path_of(tree, a), &la, &path_of(tree, b), &lb);
                result.set(Some((a, b, c)));
                let va = api::node_view(t, a).await?;
                let vb = api::node_view(t, b).await?;
                views.set(Some((va, vb)));
                Ok(())
            }
            .await;
            if let Err(e) = r {
                ctx2.error(e);
            }
        });
    };
    let column = move |side: usize| {
        move || {
            result.with(|r| {
                let Some((_, _, c)) = r else {
                    return Vec::new();
                };
                let entries = if side == 0 { &c.left } else { &c.right };
                entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let diverge = c.first_divergence == Some(i);
                        // Bookkeeping entries (context deltas, process starts) stay in the
                        // comparison but read as such, muted.
                        let internal = event_line(e).is_none();
                        let text = event_line(e).map_or_else(
                            || e.kind.clone(),
                            |l| {
                                format!(
                                    "{} {}{}",
                                    l.label,
                                    l.agent.map(|a| a + ": ").unwrap_or_default(),
                                    l.text
                                )
                            },
                        );
                        view! { <li class:diverge=diverge class:internal=internal data-index=i.to_string()>{text}</li> }
                    })
                    .collect::<Vec<_>>()
            })
        }
    };
    view! {
        <section class="panel compare">
            <h3>{move || ctx.tr("simtree.compare")}</h3>
            <div class="row">
                <label>{move || ctx.tr("simtree.compareWith")}</label>
                <input id="compare-input" prop:value=move || other.get() on:input=move |ev| other.set(event_target_value(&ev)) />
                <button id="compare-btn" disabled=move || tree.selected.get().is_none() on:click=run>{move || ctx.tr("simtree.compare")}</button>
            </div>
            <Show when=move || result.with(Option::is_some)>
                <div id="compare-view">
                    <p id="compare-summary">
                        {move || result.with(|r| r.as_ref().map(|(a, b, c)| {
                            let div = match c.first_divergence {
                                Some(i) => format!("{}: #{i}", ctx.tr("simtree.divergence")),
                                None => ctx.tr("simtree.noDivergence").to_string(),
                            };
                            format!("{a} ↔ {b} · {}: {} · {div}", ctx.tr("simtree.lca"), c.lca)
                        }))}
                    </p>
                    {move || views.with(|v| match v {
                        Some((KindView::Trading(a), KindView::Trading(b))) => Some(view! {
                            <div id="compare-metrics" class="columns">
                                <div>{metrics_table(&a.metrics)}</div>
                                <div>{metrics_table(&b.metrics)}</div>
                            </div>
                        }),
                        _ => None,
                    })}
                    <div class="columns">
                        <div>
                            <h4 id="compare-left-title">{move || result.with(|r| r.as_ref().map(|(a, _, _)| format!("{} #{a}", ctx.tr("inspector.node"))))}</h4>
                            <ol id="compare-left">{column(0)}</ol>
                        </div>
                        <div>
                            <h4 id="compare-right-title">{move || result.with(|r| r.as_ref().map(|(_, b, _)| format!("{} #{b}", ctx.tr("inspector.node"))))}</h4>
                            <ol id="compare-right">{column(1)}</ol>
                        </div>
                    </div>
                </div>
            </Show>
        </section>
    }
}

fn event_view(line: EventLine) -> impl IntoView {
    view! {
        <div class=format!("ev ev-{}", line.kind)>
            <span class="label">{line.label}</span>
            " "
            {line.agent.map(|a| view! { <b>{a}": "</b> })}
            {line.text}
        </div>
    }
}

/// Scrolls an element to its bottom after a change, while `stick` is on. The scroll waits for
/// the next frame: the effect runs before the new lines are in the DOM (on the first load the
/// whole log arrives at once, and scrolling then would stop short).
fn stick_to_bottom<T>(stick: RwSignal<bool>, el: NodeRef<html::Div>, track: impl Fn() -> T + 'static) {
    Effect::new(move |_| {
        track();
        if stick.get() {
            request_animation_frame(move || {
                if let Some(el) = el.get_untracked() {
                    el.set_scroll_top(el.scroll_height());
                }
            });
        }
    });
}

/// The events list of a node.
#[component]
fn EventsPanel(view_state: RwSignal<NodeView>, stick: RwSignal<bool>, viewer: bool) -> impl IntoView {
    let ctx = ctx();
    let el = NodeRef::<html::Div>::new();
    stick_to_bottom(stick, el, move || view_state.with(|v| v.events.len()));
    let lines = move || {
        view_state.with(|v| {
            v.events
                .iter()
                .filter_map(|e| if viewer { viewer_line(e) } else { event_line(e) })
                .collect::<Vec<_>>()
        })
    };
    view! {
        <div id="events" class="events scroll" node_ref=el>
            {move || {
                let ls = lines();
                if ls.is_empty() {
                    view! { <p class="muted">{ctx.tr("common.noEvents")}</p> }.into_any()
                } else {
                    ls.into_iter().map(event_view).collect_view().into_any()
                }
            }}
        </div>
    }
}

/// The agent dropdown and the chosen agent's memory.
#[component]
fn AgentsPanel(view_state: RwSignal<NodeView>, stick: RwSignal<bool>) -> impl IntoView {
    let ctx = ctx();
    let chosen = RwSignal::new(String::new());
    Effect::new(move |_| {
        let names: Vec<String> = view_state.with(|v| v.agents.iter().map(|a| a.name.clone()).collect());
        if !names.contains(&chosen.get_untracked()) {
            chosen.set(names.first().cloned().unwrap_or_default());
        }
    });
    let el = NodeRef::<html::Div>::new();
    stick_to_bottom(stick, el, move || {
        chosen.track();
        view_state.with(|v| v.agents.iter().map(|a| a.memory.len()).sum::<usize>())
    });
    let memory = move || {
        view_state.with(|v| {
            v.agents
                .iter()
                .find(|a| a.name == chosen.get())
                .map(|a| a.memory.clone())
                .unwrap_or_default()
        })
    };
    // An agent-based model's node: steps and no agents (a node still loading has neither).
    let no_agents = move || {
        view_state.with(|v| {
            v.agents.is_empty()
                && v.events
                    .iter()
                    .any(|e| e.event_type() == Some(simtree_shared::EventType::AbmStep))
        })
    };
    view! {
        <div class="agents">
            <Show when=no_agents>
                <p id="no-agents" class="muted">{move || ctx.tr("common.noAgents")}</p>
            </Show>
            <select id="agent-select" hidden=no_agents on:change=move |ev| chosen.set(event_target_value(&ev)) prop:value=move || chosen.get()>
                <For
                    each=move || view_state.with(|v| v.agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>())
                    key=|n| n.clone()
                    children=move |n| view! { <option value=n.clone() selected=move || chosen.get() == n>{n.clone()}</option> }
                />
            </select>
            <div class="scroll memory" node_ref=el hidden=no_agents>
                <ul id="agent-memory">
                    {move || {
                        let m = memory();
                        if m.is_empty() {
                            view! { <li class="muted">{ctx.tr("common.empty")}</li> }.into_any()
                        } else {
                            m.into_iter()
                                .map(|(role, content)| {
                                    let label = format!("[{role}]");
                                    // A trader's exchanges in words; the JSON as sent stays on hover.
                                    let (text, raw) = match crate::model::memory_text(&role, &content) {
                                        Some(text) => (text, Some(content)),
                                        None => (content, None),
                                    };
                                    view! { <li data-role=role title=raw><span class="role">{label}</span> " " <span class="content">{text}</span></li> }
                                })
                                .collect_view()
                                .into_any()
                        }
                    }}
                </ul>
            </div>
        </div>
    }
}

async fn fetch_node(tree: u64, node: u64) -> Result<NodeView, ApiError> {
    let events = api::sim_events(tree, node).await?;
    let state = api::sim_state(tree, node).await?;
    Ok(NodeView::from_rest(node, events, &state))
}

/// The tree picker of the studio.
#[component]
fn TreeSelect(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let trees = RwSignal::new(Vec::<u64>::new());
    let reload = move || {
        leptos::task::spawn_local(async move {
            if let Ok(list) = api::trees().await {
                trees.set(list.into_iter().map(|t| t.id).collect());
            }
        })
    };
    reload();
    view! {
        <section class="panel">
            <h3>{move || ctx.tr("studio.selectTree")}</h3>
            <select
                id="tree-select"
                on:focus=move |_| reload()
                on:change=move |ev| {
                    if let Ok(id) = event_target_value(&ev).parse::<u64>() {
                        ctx.navigate(Route::Studio(Some(id)));
                    }
                }
                prop:value=move || tree.id.get().map(|i| i.to_string()).unwrap_or_default()
            >
                <option value="">"-"</option>
                <For
                    each=move || trees.get()
                    key=|t| *t
                    children=move |t| view! { <option value=t.to_string() selected=move || tree.id.get() == Some(t)>{format!("tree {t}")}</option> }
                />
            </select>
        </section>
    }
}

#[component]
pub fn StudioPage(tree_id: Option<u64>) -> impl IntoView {
    let ctx = ctx();
    let tree = Tree::new();
    if let Some(id) = initial_tree(tree_id) {
        tree.connect(id);
    }
    title_effect(tree, "Studio");
    let kind_view = node_view_signal(tree);
    let node_view = RwSignal::new(NodeView::default());
    let stick = RwSignal::new(true);
    let socket = StoredValue::new_local(None::<Socket>);
    on_cleanup(move || socket.set_value(None));
    let refetch = move |t: u64, n: u64| {
        leptos::task::spawn_local(async move {
            if let Ok(v) = fetch_node(t, n).await
                && tree.selected.get_untracked() == Some(n)
            {
                node_view.set(v);
            }
        });
    };
    // Selection changed: REST truth, then live deltas over the node socket.
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        socket.set_value(None);
        node_view.set(NodeView {
            node: n,
            ..Default::default()
        });
        refetch(t, n);
        if let Ok(s) = api::watch_node(t, n, move |entry| node_view.update(|v| v.apply(entry))) {
            socket.set_value(Some(s));
        }
    });
    // attached / run_finish of the selected node: re-read it; deleted: clear.
    Effect::new(move |_| {
        let Some(msg) = tree.last_msg.get() else {
            return;
        };
        let (Some(t), Some(sel)) = (tree.id.get_untracked(), tree.selected.get_untracked()) else {
            return;
        };
        match msg {
            TreeMsg::Attached(a) if a.node == sel => refetch(t, sel),
            TreeMsg::RunFinish { node, .. } if node == sel => refetch(t, sel),
            TreeMsg::Deleted { node } if node == sel => node_view.set(NodeView::default()),
            _ => {}
        }
    });
    view! {
        <Show when=move || tree.conn.get() != Conn::NotFound fallback=move || view! { <NotFound tree /> }>
        <div class="page studio">
            <div class="col">
                <TreeBar tree />
                <div class="studio-graph"><GraphView tree /></div>
                <Stats tree />
                <Legend tree />
                <Inspector tree node_view=kind_view />
                <OpsPanel tree node_view=kind_view details=false />
                <BranchEditor tree node_view=kind_view />
                <TreeSelect tree />
                <CreatePanel studio=true tree=tree />
            </div>
            <div class="col">
                <h3>{move || ctx.tr("studio.events")}</h3>
                <EventsPanel view_state=node_view stick viewer=false />
                <NodeDetails tree view_state=kind_view />
            </div>
            <div class="col">
                <h3>
                    {move || ctx.tr("studio.agents")}
                    <label class="stick">
                        <input id="stick-bottom" type="checkbox" prop:checked=move || stick.get() on:change=move |ev| stick.set(event_target_checked(&ev)) />
                        {move || ctx.tr("common.stickBottom")}
                    </label>
                </h3>
                <AgentsPanel view_state=node_view stick />
            </div>
        </div>
        </Show>
    }
}

/// The read-only viewer of one node (`/sim/:tree?node=N`): REST once, no sockets.
#[component]
pub fn SimViewer(tree_id: Option<u64>, node: u64) -> impl IntoView {
    let ctx = ctx();
    let node_view = RwSignal::new(NodeView::default());
    let error = RwSignal::new(None::<String>);
    let stick = RwSignal::new(true);
    set_title(&tree_id.map_or_else(
        || "Simulation · simtree".into(),
        |t| format!("node {node} · tree {t} · simtree"),
    ));
    if let Some(t) = tree_id {
        leptos::task::spawn_local(async move {
            match fetch_node(t, node).await {
                Ok(v) => node_view.set(v),
                Err(ApiError::NotFound(_)) => {
                    error.set(Some(ctx.tr("notFound.node").replace("{{id}}", &node.to_string())))
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(e) => error.set(Some(e.to_string())),
            }
        });
    }
    view! {
        <div class="page viewer">
            <h2 id="viewer-title">
                {move || ctx.tr("sim.title")} " " {tree_id.map(|t| format!("{t} · node {node}"))}
            </h2>
            <p>
                {tree_id.map(|t| view! { <Link route=Route::SimTree(Some(t)) id="viewer-tree-link">{move || ctx.tr("nav.tree")}</Link> })}
            </p>
            {move || error.get().map(|e| view! { <p id="viewer-error" class="error">{e}</p> })}
            <div class="viewer-cols">
                <div id="viewer-events">
                    <h3>{move || ctx.tr("sim.events")}</h3>
                    <EventsPanel view_state=node_view stick viewer=true />
                </div>
                <div>
                    <h3>{move || ctx.tr("sim.agent")}</h3>
                    <AgentsPanel view_state=node_view stick />
                </div>
            </div>
        </div>
    }
}

/// The kind-specific view of the selected node, re-read when it changes or its run finishes.
fn node_view_signal(tree: Tree) -> RwSignal<Option<KindView>> {
    let view = RwSignal::new(None::<KindView>);
    Effect::new(move |_| {
        tree.last_msg.track();
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        leptos::task::spawn_local(async move {
            let v = api::node_view(t, n).await.ok();
            if tree.selected.get_untracked() == Some(n) {
                view.set(v);
            }
        });
    });
    view
}

/// The metrics table of a trading view (strategy against buy-and-hold).
fn metrics_table(m: &EpisodeMetrics) -> impl IntoView + use<> {
    let ctx = ctx();
    let row = |label: &'static str, figure: fn(&Performance) -> Option<f64>, pct_value: bool| {
        let cell = |p: &Performance| {
            let x = figure(p);
            if pct_value {
                pct(x)
            } else {
                x.map_or_else(|| "–".into(), |x| format!("{x:.2}"))
            }
        };
        view! { <tr><td>{move || ctx.tr(label)}</td><td>{cell(&m.strategy)}</td><td>{cell(&m.buy_and_hold)}</td></tr> }
    };
    view! {
        <table class="metrics">
            <tr><th></th><th>{move || ctx.tr("trading.strategy")}</th><th>{move || ctx.tr("trading.buyHold")}</th></tr>
            {row("trading.totalReturn", |p| Some(p.total_return), true)}
            {row("trading.annualised", |p| Some(p.annualised_return), true)}
            {row("trading.volatility", |p| Some(p.volatility), true)}
            {row("trading.sharpe", |p| p.sharpe, false)}
            {row("trading.maxDrawdown", |p| Some(p.max_drawdown), true)}
            <tr><td>{move || ctx.tr("trading.tradesRejected")}</td><td colspan="2">{m.num_trades.to_string()} " / " {m.rejected_decisions.to_string()}</td></tr>
        </table>
    }
}

/// The fills of a trading node's view, for the equity chart's markers.
fn view_trades(trades: &[ExecutedTrade]) -> Vec<Trade> {
    trades
        .iter()
        .map(|t| Trade {
            date: t.timestamp.clone(),
            buy: t.side == Side::Buy,
            ticker: t.ticker.clone(),
            quantity: t.quantity,
            price: t.price,
        })
        .collect()
}

/// Equity curve (strategy and buy-and-hold), metrics and trades of a trading node; the scene
/// state of a social node.
#[component]
fn NodeDetails(tree: Tree, view_state: RwSignal<Option<KindView>>) -> impl IntoView {
    let ctx = ctx();
    // The overlay choices outlive the kind views, which are drawn anew with each re-read view.
    let choice = OverlayChoice {
        siblings: RwSignal::new(false),
        band: RwSignal::new(false),
    };
    let body = move || match view_state.get()? {
        KindView::Abm(v) => Some(view! { <AbmDetails tree view=v choice /> }.into_any()),
        KindView::Social(v) => {
            let state = serde_json::to_string_pretty(&v.state).unwrap_or_default();
            Some(view! { <pre id="scene-state" class="json">{state}</pre> }.into_any())
        }
        KindView::Trading(v) => Some(view! { <TradingDetails tree view=*v choice /> }.into_any()),
    };
    view! { <section class="panel details"><h3>{move || ctx.tr("details.title")}</h3>{body}</section> }
}

/// The values of an equity curve.
fn curve(points: &[EquityPoint]) -> Vec<f64> {
    points.iter().map(|p| p.value).collect()
}

/// A trading node: its equity curve against buy-and-hold with its trades marked (other nodes'
/// equity overlaid dashed, or all of them as a mean with a ± sd band), metrics and last trades.
#[component]
fn TradingDetails(tree: Tree, view: TradingView, choice: OverlayChoice) -> impl IntoView {
    let ctx = ctx();
    let v = view;
    let dates: Vec<String> = v.equity_curve.iter().map(|p| p.date.clone()).collect();
    let marks = trade_marks(&dates, &view_trades(&v.trades));
    let own: Vec<Tracked> = vec![("equity_curve".into(), curve(&v.equity_curve))];
    let benchmark = Line {
        class: "benchmark",
        name: "buy_and_hold_curve".into(),
        // Named in the chart's closure, in the page's language of the moment.
        label: String::new(),
        values: curve(&v.buy_and_hold_curve),
        colour: COLOURS[1],
        dash: "4 3",
    };
    let OverlayChoice { band, .. } = choice;
    let others = overlays(tree, choice.siblings, |t, m| async move {
        match api::node_view(t, m).await.ok()? {
            KindView::Trading(v) => Some(vec![("equity_curve".to_string(), curve(&v.equity_curve))]),
            _ => None,
        }
    });
    let node = tree.selected.get_untracked().unwrap_or(0);
    let chart = move || {
        others.with(|o| {
            let (dates, mut benchmark) = (dates.clone(), benchmark.clone());
            benchmark.label = ctx.tr("trading.buyHold").into();
            if band.get() && !o.is_empty() {
                let runs: Vec<&[Tracked]> = std::iter::once(own.as_slice())
                    .chain(o.iter().map(|(_, s)| s.as_slice()))
                    .collect();
                let (mut lines, bands) = mean_lines(&runs, ctx.tr("overlay.mean"));
                lines.push(benchmark);
                view! { <LineChart id="equity-chart" lines bands x_labels=dates /> }
            } else {
                let strategy = Line {
                    class: "equity",
                    name: "equity_curve".into(),
                    label: ctx.tr("trading.strategy").into(),
                    values: own[0].1.clone(),
                    colour: COLOURS[0],
                    dash: "",
                };
                let mut lines = vec![strategy, benchmark];
                lines.extend(series_lines((node, &[]), o));
                view! { <LineChart id="equity-chart" lines x_labels=dates marks=marks.clone() /> }
            }
        })
    };
    let shown: Vec<ExecutedTrade> = v.trades.iter().rev().take(30).cloned().collect();
    view! {
        <div id="trading-view">
            <p>
                {move || format!("{} · {} · {} {}/{} · {} {}",
                    v.episode_id, v.agent.kind(), ctx.tr("inspector.decisions"),
                    v.next_decision_point, v.decision_points,
                    ctx.tr("inspector.equity"), crate::ops::grouped(v.portfolio_value))}
            </p>
            {chart}
            <OverlayOptions choice />
            {metrics_table(&v.metrics)}
            <table id="trades" class="trades">
                <tr>
                    {["trading.date", "trading.side", "trading.ticker", "trading.qty", "trading.price"]
                        .map(|k| view! { <th>{move || ctx.tr(k)}</th> })}
                </tr>
                {shown.into_iter().map(|t| view! {
                    <tr>
                        <td>{t.timestamp}</td>
                        <td>{t.side.as_str()}</td>
                        <td>{t.ticker}</td>
                        <td>{t.quantity.to_string()}</td>
                        <td>{format!("{:.2}", t.price)}</td>
                    </tr>
                }).collect_view()}
            </table>
        </div>
    }
}

/// Nodes overlaid on a chart, each with its series.
type Overlaid = RwSignal<Vec<(u64, Vec<Tracked>)>>;

/// What a node's chart overlays: its siblings too, and the runs as a mean with a band.
#[derive(Clone, Copy)]
struct OverlayChoice {
    siblings: RwSignal<bool>,
    band: RwSignal<bool>,
}

/// The overlaid nodes' series, re-read by `read` (from their logs or views) when the selection,
/// the compare target or the `siblings` choice changes.
fn overlays<F, Fut>(tree: Tree, siblings: RwSignal<bool>, read: F) -> Overlaid
where
    F: Fn(u64, u64) -> Fut + Copy + 'static,
    Fut: std::future::Future<Output = Option<Vec<Tracked>>> + 'static,
{
    let others = RwSignal::new(Vec::new());
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        let overlay = overlaid(tree, n, siblings.get());
        leptos::task::spawn_local(async move {
            let mut got = Vec::new();
            for m in overlay {
                if let Some(series) = read(t, m).await {
                    got.push((m, series));
                }
            }
            if tree.selected.get_untracked() == Some(n) {
                others.set(got);
            }
        });
    });
    others
}

/// The overlay choices under a chart.
#[component]
fn OverlayOptions(choice: OverlayChoice) -> impl IntoView {
    let ctx = ctx();
    let OverlayChoice { siblings, band } = choice;
    view! {
        <div class="row overlay-options">
            <label class="check">
                <input id="overlay-siblings" type="checkbox" prop:checked=move || siblings.get() on:change=move |ev| siblings.set(event_target_checked(&ev)) />
                {move || ctx.tr("overlay.siblings")}
            </label>
            <label class="check">
                <input id="overlay-band" type="checkbox" prop:checked=move || band.get() on:change=move |ev| band.set(event_target_checked(&ev)) />
                {move || ctx.tr("overlay.band")}
            </label>
        </div>
        <p class="muted">{move || ctx.tr("overlay.hint")}</p>
    }
}

/// Tracked variables as chart lines: the selected node's (`own`, solid) and overlaid nodes'
/// (dashed); a variable keeps its colour in all, and the legend names the node of each line.
fn series_lines(own: (u64, &[Tracked]), others: &[(u64, Vec<Tracked>)]) -> Vec<Line> {
    let (n, solid) = own;
    let names: &Vec<&str> = &solid
        .iter()
        .chain(others.iter().flat_map(|(_, d)| d))
        .map(|(v, _)| v.as_str())
        .collect();
    let line = |node: u64, dash: &'static str| {
        move |(name, values): &Tracked| Line {
            class: "series",
            name: name.clone(),
            label: format!("{} (#{node})", short_name(name)),
            values: values.clone(),
            colour: variable_colour(names, name),
            dash,
        }
    };
    let mut lines: Vec<Line> = solid.iter().map(line(n, "")).collect();
    for (m, d) in others {
        lines.extend(d.iter().map(line(*m, "5 3")));
    }
    lines
}

/// A variable's colour: by its first place among `names`, so it matches across nodes.
fn variable_colour(names: &[&str], name: &str) -> &'static str {
    COLOURS[names.iter().position(|v| *v == name).unwrap_or(0) % COLOURS.len()]
}

/// The overlaid runs as one mean line per variable over a band of ± sd (`mean_word` names the
/// line in the UI's language).
fn mean_lines(runs: &[&[Tracked]], mean_word: &str) -> (Vec<Line>, Vec<Band>) {
    let bands = mean_bands(runs);
    let names: Vec<&str> = bands.iter().map(|b| b.name.as_str()).collect();
    let lines = bands
        .iter()
        .map(|b| Line {
            class: "mean",
            name: b.name.clone(),
            label: format!("{} {mean_word} ± sd (n={})", short_name(&b.name), b.runs),
            values: b.mean.clone(),
            colour: variable_colour(&names, &b.name),
            dash: "",
        })
        .collect();
    let shaded = bands
        .iter()
        .map(|b| Band {
            name: b.name.clone(),
            lo: b.lo.clone(),
            hi: b.hi.clone(),
            colour: variable_colour(&names, &b.name),
        })
        .collect();
    (lines, shaded)
}

/// The nodes overlaid on the selected one's chart: the compare target and, when asked, the
/// selected node's siblings (a sweep cell's other replicates).
fn overlaid(tree: Tree, node: u64, siblings: bool) -> Vec<u64> {
    let mut out: Vec<u64> = tree.compare_with.get().into_iter().filter(|c| *c != node).collect();
    if siblings {
        let parent = tree.graph.with(|g| g.parent_of(node));
        let kin = tree.graph.with(|g| {
            g.edges
                .iter()
                .filter(|e| Some(e.from) == parent && e.to != node)
                .map(|e| e.to)
                .collect::<Vec<_>>()
        });
        for k in kin {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// An agent-based model's structure and its tracked variables over the steps of this node's path;
/// other nodes (the compare target, the siblings) overlaid dashed, or all of them drawn as a mean
/// with a band of ± sd.
#[component]
fn AbmDetails(tree: Tree, view: AbmView, choice: OverlayChoice) -> impl IntoView {
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
                    if band.get() && !o.is_empty() {
                        let runs: Vec<&[Tracked]> = std::iter::once(series.as_slice()).chain(o.iter().map(|(_, s)| s.as_slice())).collect();
                        let (lines, bands) = mean_lines(&runs, ctx.tr("overlay.mean"));
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
