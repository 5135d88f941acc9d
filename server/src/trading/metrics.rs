//! Evaluation: returns and risk of an episode, next to buy-and-hold over the same window.
//!
//! The equity curve is valued at every trading day's close. Daily returns are time-weighted: the
//! return of day `d` is that of the portfolio held at the end of day `d-1` (after its trades and
//! after any branch-op patch made before day `d`), so injecting cash by a branch op does not show
//! up as a gain. Trades fill at the close without fees, so they do not move the value on their day.
//!
//! * total return `Π(1+r) − 1`; annualised `(1+total)^(252/n) − 1` over `n` daily returns;
//! * volatility: sample standard deviation of daily returns × √252;
//! * Sharpe: mean / sample standard deviation of daily returns × √252, risk-free rate 0 (`None`
//!   with fewer than two returns or no variation);
//! * max drawdown: the largest fall from a running peak of the cumulative return index, as a
//!   fraction of that peak (0.25 = 25%).
//!
//! Buy-and-hold spends the initial cash equally on every ticker (whole shares) at the first day's
//! close and holds; it is the same allocation as the buy-and-hold agent's.

use serde::{Deserialize, Serialize};

pub use simtree_shared::trading::{EpisodeMetrics, EquityPoint, Performance};

use super::TradingError;
use super::agents::equal_split;
use super::data::{MarketData, Schedule};
use super::models::{DecisionStatus, EpisodeConfig, EpisodeLog, ExecutedTrade, PortfolioSnapshot, Side};

pub(crate) const TRADING_DAYS_PER_YEAR: f64 = 252.0;

/// The figures of a series of daily returns.
pub(crate) fn performance(returns: &[f64]) -> Performance {
    let n = returns.len();
    if n == 0 {
        return Performance::default();
    }
    let mut index = 1.0f64;
    let mut peak = 1.0f64;
    let mut max_drawdown = 0.0f64;
    for r in returns {
        index *= 1.0 + r;
        peak = peak.max(index);
        max_drawdown = max_drawdown.max((peak - index) / peak);
    }
    let total_return = index - 1.0;
    let annualised_return = if index > 0.0 { index.powf(TRADING_DAYS_PER_YEAR / n as f64) - 1.0 } else { -1.0 };
    let (volatility, sharpe) = if n >= 2 {
        let mean = returns.iter().sum::<f64>() / n as f64;
        let var = returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let sd = var.sqrt();
        let sharpe = (sd > 1e-12).then(|| mean / sd * TRADING_DAYS_PER_YEAR.sqrt());
        (sd * TRADING_DAYS_PER_YEAR.sqrt(), sharpe)
    } else {
        (0.0, None)
    };
    Performance { total_return, annualised_return, volatility, sharpe, max_drawdown }
}

/// Day-over-day simple returns of a value series.
#[cfg(test)]
pub(crate) fn simple_returns(values: &[f64]) -> Vec<f64> {
    values.windows(2).map(|w| if w[0] > 0.0 { w[1] / w[0] - 1.0 } else { 0.0 }).collect()
}

/// The portfolio in force from the close of `date` on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Holding {
    pub(crate) date: String,
    pub(crate) portfolio: PortfolioSnapshot,
}

/// An equity curve with its time-weighted daily returns (`returns[i]` is the return into
/// `points[i + 1]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Equity {
    pub(crate) points: Vec<EquityPoint>,
    returns: Vec<f64>,
}

/// Values `holdings` (sorted by date; on equal dates the later entry wins) at every day of `days`.
/// Days before the first holding use it anyway (the initial portfolio).
pub(crate) fn equity(market: &MarketData, days: &[String], holdings: &[Holding]) -> Equity {
    let value = |p: &PortfolioSnapshot, day: &str| p.value(|t| market.close(t, day));
    let mut out = Equity::default();
    let Some(first) = holdings.first() else {
        return out;
    };
    let mut current = &first.portfolio;
    let mut next = 0;
    for (i, day) in days.iter().enumerate() {
        if i > 0 {
            // `current` is still the portfolio held at the end of the previous day.
            let before = value(current, &days[i - 1]);
            let after = value(current, day);
            out.returns.push(if before > 0.0 { after / before - 1.0 } else { 0.0 });
        }
        while next < holdings.len() && holdings[next].date.as_str() <= day.as_str() {
            current = &holdings[next].portfolio;
            next += 1;
        }
        out.points.push(EquityPoint { date: day.clone(), value: value(current, day) });
    }
    out
}

/// The buy-and-hold benchmark's holdings: `cash` split equally over `tickers` at `day`'s close.
pub(crate) fn buy_and_hold_holdings(market: &MarketData, tickers: &[String], day: &str, cash: f64) -> Vec<Holding> {
    let prices: Vec<(&str, f64)> =
        tickers.iter().filter_map(|t| market.close(t, day).map(|p| (t.as_str(), p))).collect();
    let mut portfolio = PortfolioSnapshot::cash_only(cash);
    for (t, n) in equal_split(cash, &prices) {
        let p = market.close(&t, day).unwrap_or(0.0);
        portfolio.cash -= n as f64 * p;
        portfolio.positions.insert(t, n);
    }
    vec![Holding { date: day.to_owned(), portfolio }]
}

/// The evaluation of a strategy curve against buy-and-hold on the same days.
#[allow(clippy::too_many_arguments)]
pub(crate) fn episode_metrics(
    market: &MarketData,
    config: &EpisodeConfig,
    days: &[String],
    holdings: &[Holding],
    decision_points: usize,
    num_trades: usize,
    rejected_decisions: usize,
) -> EpisodeMetrics {
    let strategy = equity(market, days, holdings);
    let bench = days
        .first()
        .map(|d| equity(market, days, &buy_and_hold_holdings(market, &config.tickers, d, config.initial_cash)))
        .unwrap_or_default();
    let last_value = |e: &Equity| e.points.last().map_or(config.initial_cash, |p| p.value);
    EpisodeMetrics {
        episode_id: config.episode_id.clone(),
        agent_id: config.agent_id.clone(),
        start_date: days.first().cloned(),
        end_date: days.last().cloned(),
        days: days.len(),
        initial_value: config.initial_cash,
        final_value: last_value(&strategy),
        strategy: performance(&strategy.returns),
        buy_and_hold: performance(&bench.returns),
        buy_and_hold_final_value: last_value(&bench),
        decision_points,
        num_trades,
        rejected_decisions,
    }
}

/// Evaluates a stored episode log: the holdings are rebuilt from the initial cash and the executed
/// trades (branch-op patches are not part of a log), the window from the config's resolved
/// settings. An unfinished episode is evaluated up to its last logged decision point.
pub fn evaluate_log(log: &EpisodeLog, market: &MarketData) -> Result<EpisodeMetrics, TradingError> {
    let c = &log.config;
    let missing = |f: &str| TradingError::Config(format!("{f} is not set in the stored config"));
    let schedule = Schedule::new(
        market,
        &c.tickers,
        c.start_date.as_deref().ok_or_else(|| missing("start_date"))?,
        c.end_date.as_deref().ok_or_else(|| missing("end_date"))?,
        c.decision_interval.unwrap_or(1) as usize,
    )?;
    let done = log.episode_result.is_some();
    let logged = log.decision_point_logs.len().min(schedule.points.len());
    let horizon = if done {
        schedule.days.len()
    } else if logged == 0 {
        0
    } else {
        schedule.points[logged - 1] + 1
    };
    let trades: Vec<&ExecutedTrade> =
        log.decision_point_logs.iter().flat_map(|d| d.execution_result.executed_trades.iter()).collect();
    let mut portfolio = PortfolioSnapshot::cash_only(c.initial_cash);
    let mut holdings = vec![Holding { date: schedule.days[0].clone(), portfolio: portfolio.clone() }];
    for t in &trades {
        let shares = portfolio.positions.entry(t.ticker.clone()).or_default();
        match t.side {
            Side::Buy => {
                *shares += t.quantity;
                portfolio.cash -= t.quantity as f64 * t.price;
            }
            Side::Sell => {
                *shares -= t.quantity;
                portfolio.cash += t.quantity as f64 * t.price;
            }
        }
        portfolio.positions.retain(|_, n| *n != 0);
        holdings.push(Holding { date: t.timestamp.clone(), portfolio: portfolio.clone() });
    }
    let rejected =
        log.decision_point_logs.iter().filter(|d| d.execution_result.status == DecisionStatus::Rejected).count();
    Ok(episode_metrics(
        market,
        c,
        &schedule.days[..horizon],
        &holdings,
        log.decision_point_logs.len(),
        trades.len(),
        rejected,
    ))
}

/// Run-level evaluation: the mean of each figure over the episodes (Sharpe over those that have
/// one) and the totals of trades and rejections.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    episodes: usize,
    mean_strategy: Performance,
    mean_buy_and_hold: Performance,
    num_trades: usize,
    rejected_decisions: usize,
}

#[cfg(test)]
pub(crate) fn run_metrics(episodes: &[EpisodeMetrics]) -> RunMetrics {
    let mean = |pick: fn(&EpisodeMetrics) -> &Performance| {
        let n = episodes.len().max(1) as f64;
        let avg = |f: fn(&Performance) -> f64| episodes.iter().map(|e| f(pick(e))).sum::<f64>() / n;
        let sharpes: Vec<f64> = episodes.iter().filter_map(|e| pick(e).sharpe).collect();
        Performance {
            total_return: avg(|p| p.total_return),
            annualised_return: avg(|p| p.annualised_return),
            volatility: avg(|p| p.volatility),
            sharpe: (!sharpes.is_empty()).then(|| sharpes.iter().sum::<f64>() / sharpes.len() as f64),
            max_drawdown: avg(|p| p.max_drawdown),
        }
    };
    RunMetrics {
        episodes: episodes.len(),
        mean_strategy: mean(|e| &e.strategy),
        mean_buy_and_hold: mean(|e| &e.buy_and_hold),
        num_trades: episodes.iter().map(|e| e.num_trades).sum(),
        rejected_decisions: episodes.iter().map(|e| e.rejected_decisions).sum(),
    }
}

/// A plain-text table of episode metrics (the CLI's output).
pub(crate) fn format_metrics(m: &EpisodeMetrics) -> String {
    let pct = |x: f64| format!("{:+.2}%", x * 100.0);
    let sharpe = |s: Option<f64>| s.map_or("n/a".to_owned(), |v| format!("{v:.2}"));
    let row = |name: &str, a: String, b: String| format!("  {name:<20} {a:>14} {b:>14}\n");
    let (s, b) = (&m.strategy, &m.buy_and_hold);
    let mut out = format!(
        "episode {} (agent {}): {} to {}, {} trading days, {} decision points\n",
        m.episode_id,
        m.agent_id,
        m.start_date.as_deref().unwrap_or("-"),
        m.end_date.as_deref().unwrap_or("-"),
        m.days,
        m.decision_points
    );
    out += &row("", "strategy".into(), "buy & hold".into());
    out += &row("final value", format!("{:.2}", m.final_value), format!("{:.2}", m.buy_and_hold_final_value));
    out += &row("total return", pct(s.total_return), pct(b.total_return));
    out += &row("annualised return", pct(s.annualised_return), pct(b.annualised_return));
    let plain = |x: f64| format!("{:.2}%", x * 100.0);
    out += &row("volatility (ann.)", plain(s.volatility), plain(b.volatility));
    out += &row("sharpe", sharpe(s.sharpe), sharpe(b.sharpe));
    out += &row("max drawdown", pct(-s.max_drawdown), pct(-b.max_drawdown));
    out += &format!("  trades: {}   rejected decisions: {}\n", m.num_trades, m.rejected_decisions);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trading::models::PricePoint;
    use std::collections::BTreeMap;

    fn close_enough(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn hand_computed_figures_of_a_tiny_series() {
        // 100 → 110 → 99 → 118.8: returns +10%, −10%, +20%.
        let r = simple_returns(&[100.0, 110.0, 99.0, 118.8]);
        assert_eq!(r.len(), 3);
        let p = performance(&r);
        assert!(close_enough(p.total_return, 0.188), "{p:?}");
        // mean 1/15, sample sd sqrt(0.0233…) = 0.1527525…
        assert!(close_enough(p.volatility, 0.152_752_523_165_194_7 * 252f64.sqrt()), "{p:?}");
        assert!(close_enough(p.volatility, 2.424_871_130_596_428), "{p:?}");
        assert!(close_enough(p.sharpe.unwrap(), 4.0 * 3f64.sqrt()), "{p:?}"); // 6.9282…
        assert!(close_enough(p.annualised_return, 1.188f64.powi(84) - 1.0), "{p:?}");
        assert!(close_enough(p.max_drawdown, 0.1), "110 → 99 is the worst fall: {p:?}");
    }

    #[test]
    fn a_year_of_constant_returns_annualises_to_its_total() {
        let r = vec![0.001; 252];
        let p = performance(&r);
        assert!(close_enough(p.annualised_return, p.total_return));
        assert!(close_enough(p.total_return, 1.001f64.powi(252) - 1.0));
        assert_eq!(p.sharpe, None, "no variation, no Sharpe");
        assert!(p.volatility.abs() < 1e-12);
        assert_eq!(p.max_drawdown, 0.0);
    }

    #[test]
    fn drawdown_is_measured_from_the_running_peak() {
        // 100 → 120 → 90 → 130 → 65: falls of 25% then 50%.
        let p = performance(&simple_returns(&[100.0, 120.0, 90.0, 130.0, 65.0]));
        assert!(close_enough(p.max_drawdown, 0.5), "{p:?}");
        assert!(close_enough(p.total_return, -0.35));
        assert_eq!(performance(&[]), Performance::default());
        assert_eq!(performance(&[0.05]).sharpe, None);
    }

    fn market() -> MarketData {
        let bars = |closes: &[f64]| -> Vec<PricePoint> {
            closes
                .iter()
                .enumerate()
                .map(|(i, &c)| PricePoint::daily(&format!("2020-01-0{}", i + 1), c, c, c, c, 1))
                .collect()
        };
        let mut m = BTreeMap::new();
        m.insert("A".to_string(), bars(&[10.0, 11.0, 9.9, 11.88]));
        m.insert("B".to_string(), bars(&[20.0, 20.0, 20.0, 20.0]));
        MarketData::from_bars(m, vec![]).unwrap()
    }

    fn days() -> Vec<String> {
        (1..=4).map(|i| format!("2020-01-0{i}")).collect()
    }

    #[test]
    fn equity_values_holdings_and_ignores_cash_injections() {
        let m = market();
        let all_a = PortfolioSnapshot { cash: 0.0, positions: [("A".to_string(), 10)].into() };
        let holdings = vec![
            Holding { date: "2020-01-01".into(), portfolio: all_a.clone() },
            // A cash injection after day 2: value jumps but the return does not.
            Holding { date: "2020-01-02".into(), portfolio: PortfolioSnapshot { cash: 1000.0, ..all_a.clone() } },
        ];
        let e = equity(&m, &days(), &holdings);
        let values: Vec<f64> = e.points.iter().map(|p| p.value).collect();
        assert!(close_enough(values[0], 100.0) && close_enough(values[1], 1110.0));
        assert!(close_enough(values[3], 1118.8));
        // No +900% on the injection day: day 2 is A's own +10%; after it the portfolio holds
        // 1000 cash beside A, which dampens A's moves.
        let want = [0.1, 1099.0 / 1110.0 - 1.0, 1118.8 / 1099.0 - 1.0];
        for (got, want) in e.returns.iter().zip(want) {
            assert!(close_enough(*got, want), "{:?}", e.returns);
        }
    }

    #[test]
    fn episode_metrics_compare_with_buy_and_hold() {
        let m = market();
        let cfg = EpisodeConfig::new("e", "test", vec!["A".into(), "B".into()], 100.0);
        // The strategy stays in cash.
        let cash = vec![Holding { date: "2020-01-01".into(), portfolio: PortfolioSnapshot::cash_only(100.0) }];
        let em = episode_metrics(&m, &cfg, &days(), &cash, 4, 0, 1);
        assert_eq!(em.strategy.total_return, 0.0);
        assert_eq!(em.final_value, 100.0);
        // Buy-and-hold: 5 A at 10 and 2 B at 20 (cash 10 left): 100 → 109.4 at the end.
        assert!(close_enough(em.buy_and_hold_final_value, 5.0 * 11.88 + 40.0 + 10.0));
        assert!(close_enough(em.buy_and_hold.total_return, 0.094));
        assert_eq!((em.days, em.decision_points, em.rejected_decisions), (4, 4, 1));
        let text = format_metrics(&em);
        assert!(text.contains("total return"), "{text}");
        assert!(text.contains("+9.40%"), "{text}");
        let run = run_metrics(&[em.clone(), em]);
        assert_eq!(run.episodes, 2);
        assert!(close_enough(run.mean_buy_and_hold.total_return, 0.094));
        assert_eq!(run.rejected_decisions, 2);
        assert_eq!(run.mean_strategy.sharpe, None);
    }
}
