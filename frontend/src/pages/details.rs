//! The node details panel: a trading node's equity and metrics, an ABM node's chart, a social
//! node's scene state as a table.

use leptos::prelude::*;
use simtree_shared::NodeView as KindView;
use simtree_shared::trading::{EpisodeMetrics, Performance};

use super::abm_details::AbmDetails;
use super::overlay::OverlayChoice;
use super::trading_details::TradingDetails;
use crate::chart::pct;
use crate::state::{Tree, ctx};

/// Equity curve (strategy and buy-and-hold), metrics and trades of a trading node; the scene
/// state of a social node.
#[component]
pub(super) fn NodeDetails(tree: Tree, view_state: RwSignal<Option<KindView>>) -> impl IntoView {
    let ctx = ctx();
    // The overlay choices outlive the kind views, which are drawn anew with each re-read view.
    let choice = OverlayChoice { siblings: RwSignal::new(false), band: RwSignal::new(false) };
    let body = move || match view_state.get()? {
        KindView::Abm(v) => Some(view! { <AbmDetails tree view=v choice /> }.into_any()),
        KindView::Social(v) => Some(scene_state(&v.state).into_any()),
        KindView::Trading(v) => Some(view! { <TradingDetails tree view=*v choice /> }.into_any()),
    };
    view! { <section class="panel details"><h3>{move || ctx.tr("details.title")}</h3>{body}</section> }
}

/// A social scene's state as a table, a key a row (its value as text; a list or a map as its
/// compact JSON); a state that is not a map, as its JSON.
fn scene_state(state: &serde_json::Value) -> impl IntoView + use<> {
    let Some(map) = state.as_object() else {
        let text = serde_json::to_string_pretty(state).unwrap_or_default();
        return view! { <pre id="scene-state" class="json">{text}</pre> }.into_any();
    };
    let rows = map
        .iter()
        .map(|(k, v)| {
            view! {
                <tr data-key=k.clone()>
                    <th>{k.clone()}</th>
                    <td>{crate::editors::value_text(v)}</td>
                </tr>
            }
        })
        .collect_view();
    view! { <table id="scene-state" class="metrics scene-state">{rows}</table> }.into_any()
}

/// The metrics table of a trading view (strategy against buy-and-hold).
pub(super) fn metrics_table(m: &EpisodeMetrics) -> impl IntoView + use<> {
    let ctx = ctx();
    let row = |label: &'static str, figure: fn(&Performance) -> Option<f64>, pct_value: bool| {
        let cell = |p: &Performance| {
            let x = figure(p);
            if pct_value { pct(x) } else { x.map_or_else(|| "–".into(), |x| format!("{x:.2}")) }
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
