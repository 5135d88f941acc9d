//! A trading node's details: equity curve against buy-and-hold with its trades, metrics, fills.

use leptos::prelude::*;
use simtree_shared::NodeView as KindView;
use simtree_shared::trading::{EquityPoint, ExecutedTrade, Side, TradingView};

use super::details::metrics_table;
use super::overlay::{OverlayChoice, OverlayOptions, mean_lines, overlays, pooled_and_apart, series_lines};
use crate::api::{self};
use crate::chart::{COLOURS, Tracked, Trade, trade_marks};
use crate::plot::{Line, LineChart};
use crate::state::{Tree, ctx};

/// The fills of a trading node's view, for the equity chart's markers.
pub(super) fn view_trades(trades: &[ExecutedTrade]) -> Vec<Trade> {
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

/// The values of an equity curve.
pub(super) fn curve(points: &[EquityPoint]) -> Vec<f64> {
    points.iter().map(|p| p.value).collect()
}

/// A trading node: its equity curve against buy-and-hold with its trades marked (other nodes'
/// equity overlaid dashed, or all of them as a mean with a ± sd band), metrics and last trades.
#[component]
pub(super) fn TradingDetails(tree: Tree, view: TradingView, choice: OverlayChoice) -> impl IntoView {
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
            let (pooled, apart) = pooled_and_apart(tree, o);
            if band.get() && !pooled.is_empty() {
                let runs: Vec<&[Tracked]> =
                    std::iter::once(own.as_slice()).chain(pooled.iter().map(|(_, s)| s.as_slice())).collect();
                let (mut lines, bands) = mean_lines(&runs, ctx.tr("overlay.mean"));
                lines.push(benchmark);
                lines.extend(series_lines((node, &[]), &apart));
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
