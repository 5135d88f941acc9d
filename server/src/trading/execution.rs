//! `execute_decision`: turns an agent's Decision into fills, all or nothing.
//!
//! Every order is checked before anything happens: its ticker must be in `Case.tickers` and have a
//! price in the Case, its quantity must be positive, the sells of a ticker may not exceed the
//! shares held (no shorting), and the buys must fit in the cash available *after* the sells.
//! Sells execute before buys, so a swap (sell one stock, buy another with the proceeds) works even
//! when the cash on hand alone would not cover the buy. One failing check rejects the whole
//! decision; the message lists every failing order with its ticker and the rule it broke.
//! Fills are at the Case's `current_price` (the cutoff day's close), without fees.

use std::collections::BTreeMap;

use super::models::{Case, Decision, DecisionResult, DecisionStatus, ExecutedTrade, PortfolioSnapshot, Side};

/// Cash comparisons allow this much rounding error (a share count times a price in f64).
const CASH_EPSILON: f64 = 1e-6;

/// Checks and executes `decision` against `portfolio` at `case`'s prices.
///
/// Returns the result to hand back to the agent and the portfolio after execution (unchanged when
/// the decision is rejected). An empty decision is an accepted hold.
pub(crate) fn execute_decision(
    decision: &Decision,
    case: &Case,
    portfolio: &PortfolioSnapshot,
) -> (DecisionResult, PortfolioSnapshot) {
    let mut problems = Vec::new();
    let universe = case.tickers.join(", ");
    // Orders that passed the per-order checks, with their price.
    let mut priced = Vec::new();
    for (i, order) in decision.orders.iter().enumerate() {
        let t = &order.ticker;
        let mut ok = true;
        if !case.tickers.contains(t) {
            problems.push(format!("order {i}: ticker {t} not in case universe ({universe})"));
            ok = false;
        }
        if order.quantity <= 0 {
            problems.push(format!(
                "order {i}: {} {t}: quantity must be a positive number of shares, got {}",
                order.side.as_str(),
                order.quantity
            ));
            ok = false;
        }
        if ok {
            match case.price(t).filter(|p| p.is_finite() && *p > 0.0) {
                Some(price) => priced.push((i, order, price)),
                None => problems.push(format!("order {i}: no price for {t} in the case")),
            }
        }
    }

    // Sells are summed per ticker: two sells of 5 against 8 held fail together.
    let mut sold: BTreeMap<&str, i64> = BTreeMap::new();
    for (_, o, _) in priced.iter().filter(|(_, o, _)| o.side == Side::Sell) {
        *sold.entry(o.ticker.as_str()).or_default() += o.quantity;
    }
    for (t, &qty) in &sold {
        let held = portfolio.shares(t);
        if qty > held {
            problems.push(format!("sell {t}: {qty} shares requested but only {held} held"));
        }
    }

    let proceeds: f64 =
        priced.iter().filter(|(_, o, _)| o.side == Side::Sell).map(|(_, o, p)| o.quantity as f64 * p).sum();
    let cost: f64 = priced.iter().filter(|(_, o, _)| o.side == Side::Buy).map(|(_, o, p)| o.quantity as f64 * p).sum();
    let available = portfolio.cash + proceeds;
    if cost > available + CASH_EPSILON {
        let mut buys: Vec<&str> = Vec::new();
        for (_, o, _) in priced.iter().filter(|(_, o, _)| o.side == Side::Buy) {
            if !buys.contains(&o.ticker.as_str()) {
                buys.push(&o.ticker);
            }
        }
        problems.push(format!(
            "insufficient cash: buys of {} cost {cost:.2} but cash after sells is {available:.2}",
            buys.join(", ")
        ));
    }

    if !problems.is_empty() {
        return (
            DecisionResult::rejected(format!("rejected, nothing executed: {}", problems.join("; "))),
            portfolio.clone(),
        );
    }

    let timestamp = case.information_cutoff_timestamp.clone().unwrap_or_default();
    let mut after = portfolio.clone();
    let mut trades = Vec::with_capacity(priced.len());
    for side in [Side::Sell, Side::Buy] {
        for &(i, order, price) in priced.iter().filter(|(_, o, _)| o.side == side) {
            let shares = after.positions.entry(order.ticker.clone()).or_default();
            let value = order.quantity as f64 * price;
            match side {
                Side::Sell => {
                    *shares -= order.quantity;
                    after.cash += value;
                }
                Side::Buy => {
                    *shares += order.quantity;
                    after.cash -= value;
                }
            }
            trades.push(ExecutedTrade {
                order_index: i,
                ticker: order.ticker.clone(),
                side,
                quantity: order.quantity,
                price,
                timestamp: timestamp.clone(),
                case_id: case.case_id.clone(),
            });
        }
    }
    after.positions.retain(|_, n| *n != 0);
    // Rounding may leave a negative dust amount after spending everything.
    if after.cash < 0.0 {
        after.cash = 0.0;
    }
    let message = if trades.is_empty() {
        "accepted: hold (no orders)".to_owned()
    } else {
        let fills: Vec<String> = trades
            .iter()
            .map(|t| {
                let verb = if t.side == Side::Sell { "sold" } else { "bought" };
                format!("{verb} {} {} at {:.2}", t.quantity, t.ticker, t.price)
            })
            .collect();
        format!("accepted: {} (cash now {:.2})", fills.join("; "), after.cash)
    };
    (DecisionResult { status: DecisionStatus::Accepted, message, executed_trades: trades }, after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trading::models::{CaseData, Order, StockData};

    fn case(prices: &[(&str, f64)]) -> Case {
        Case {
            case_id: "ep:0".into(),
            tickers: prices.iter().map(|(t, _)| t.to_string()).collect(),
            case_data: CaseData::default(),
            stock_data: prices
                .iter()
                .map(|(t, p)| {
                    (t.to_string(), StockData { current_price: *p, daily_bars: vec![], interval_summary: None })
                })
                .collect(),
            portfolio: PortfolioSnapshot::default(),
            decision_point_idx: Some(0),
            information_cutoff_timestamp: Some("2012-06-01".into()),
        }
    }

    fn folio(cash: f64, pos: &[(&str, i64)]) -> PortfolioSnapshot {
        PortfolioSnapshot { cash, positions: pos.iter().map(|(t, n)| (t.to_string(), *n)).collect() }
    }

    fn decide(orders: &[(&str, Side, i64)]) -> Decision {
        Decision { orders: orders.iter().map(|(t, s, q)| Order::new(*t, *s, *q)).collect() }
    }

    fn rejected_with(d: Decision, c: &Case, p: &PortfolioSnapshot) -> String {
        let (r, after) = execute_decision(&d, c, p);
        assert_eq!(r.status, DecisionStatus::Rejected, "{}", r.message);
        assert!(r.executed_trades.is_empty());
        assert_eq!(&after, p, "a rejected decision changes nothing");
        r.message
    }

    use Side::{Buy, Sell};

    #[test]
    fn unknown_ticker_is_named_with_the_universe() {
        let c = case(&[("AAPL", 100.0), ("MSFT", 30.0)]);
        let m = rejected_with(decide(&[("AAPL", Buy, 1), ("XYZ", Buy, 1)]), &c, &folio(1e4, &[]));
        assert_eq!(m, "rejected, nothing executed: order 1: ticker XYZ not in case universe (AAPL, MSFT)");
    }

    #[test]
    fn quantity_must_be_positive() {
        let c = case(&[("AAPL", 100.0)]);
        let m = rejected_with(decide(&[("AAPL", Buy, 0), ("AAPL", Sell, -2)]), &c, &folio(1e4, &[("AAPL", 5)]));
        assert_eq!(
            m,
            "rejected, nothing executed: order 0: buy AAPL: quantity must be a positive number of \
             shares, got 0; order 1: sell AAPL: quantity must be a positive number of shares, got -2"
        );
    }

    #[test]
    fn cannot_sell_more_than_held_summed_per_ticker() {
        let c = case(&[("AAPL", 100.0), ("MSFT", 30.0)]);
        let p = folio(0.0, &[("AAPL", 8)]);
        let m = rejected_with(decide(&[("AAPL", Sell, 5), ("AAPL", Sell, 5), ("MSFT", Sell, 1)]), &c, &p);
        assert_eq!(
            m,
            "rejected, nothing executed: sell AAPL: 10 shares requested but only 8 held; \
             sell MSFT: 1 shares requested but only 0 held"
        );
    }

    #[test]
    fn buys_must_fit_in_cash_after_sells() {
        let c = case(&[("AAPL", 100.0), ("MSFT", 30.0)]);
        let p = folio(1000.0, &[("MSFT", 10)]);
        let m = rejected_with(decide(&[("MSFT", Sell, 10), ("AAPL", Buy, 14)]), &c, &p);
        assert_eq!(
            m,
            "rejected, nothing executed: insufficient cash: buys of AAPL cost 1400.00 but cash \
             after sells is 1300.00"
        );
    }

    #[test]
    fn cash_rule_names_every_buy_ticker() {
        let c = case(&[("AAPL", 100.0), ("MSFT", 30.0)]);
        let m = rejected_with(decide(&[("AAPL", Buy, 5), ("MSFT", Buy, 20)]), &c, &folio(1000.0, &[]));
        assert_eq!(
            m,
            "rejected, nothing executed: insufficient cash: buys of AAPL, MSFT cost 1100.00 but \
             cash after sells is 1000.00"
        );
    }

    #[test]
    fn every_problem_is_reported_together() {
        let c = case(&[("AAPL", 100.0)]);
        let m = rejected_with(decide(&[("XYZ", Buy, 1), ("AAPL", Sell, 3), ("AAPL", Buy, 0)]), &c, &folio(0.0, &[]));
        assert!(m.contains("order 0: ticker XYZ not in case universe (AAPL)"), "{m}");
        assert!(m.contains("order 2: buy AAPL: quantity must be a positive"), "{m}");
        assert!(m.contains("sell AAPL: 3 shares requested but only 0 held"), "{m}");
    }

    #[test]
    fn ticker_without_price_is_rejected() {
        let mut c = case(&[("AAPL", 100.0)]);
        c.tickers.push("MSFT".into());
        let m = rejected_with(decide(&[("MSFT", Buy, 1)]), &c, &folio(1e4, &[]));
        assert_eq!(m, "rejected, nothing executed: order 0: no price for MSFT in the case");
    }

    #[test]
    fn swap_succeeds_only_because_sells_go_first() {
        let c = case(&[("AAPL", 100.0), ("MSFT", 30.0)]);
        let p = folio(500.0, &[("MSFT", 50)]);
        // The buy is listed first and costs 1200 > 500 cash on hand; the sell raises 1500.
        let d = decide(&[("AAPL", Buy, 12), ("MSFT", Sell, 50)]);
        // Buys first would have failed: the buy alone exceeds the cash on hand.
        let buy_only = decide(&[("AAPL", Buy, 12)]);
        assert!(!execute_decision(&buy_only, &c, &p).0.is_accepted());

        let (r, after) = execute_decision(&d, &c, &p);
        assert!(r.is_accepted(), "{}", r.message);
        assert_eq!(after, folio(800.0, &[("AAPL", 12)]));
        let fills: Vec<(usize, Side, &str)> =
            r.executed_trades.iter().map(|t| (t.order_index, t.side, t.ticker.as_str())).collect();
        assert_eq!(fills, [(1, Sell, "MSFT"), (0, Buy, "AAPL")], "sells execute first");
        assert_eq!(r.executed_trades[0].price, 30.0);
        assert_eq!(r.executed_trades[0].timestamp, "2012-06-01");
        assert_eq!(r.executed_trades[0].case_id, "ep:0");
        assert_eq!(r.message, "accepted: sold 50 MSFT at 30.00; bought 12 AAPL at 100.00 (cash now 800.00)");
    }

    #[test]
    fn empty_decision_is_an_accepted_hold_and_exact_cash_is_enough() {
        let c = case(&[("AAPL", 100.0)]);
        let p = folio(1000.0, &[]);
        let (r, after) = execute_decision(&Decision::hold(), &c, &p);
        assert!(r.is_accepted());
        assert_eq!(r.message, "accepted: hold (no orders)");
        assert_eq!(after, p);
        let (r, after) = execute_decision(&decide(&[("AAPL", Buy, 10)]), &c, &p);
        assert!(r.is_accepted(), "{}", r.message);
        assert_eq!(after, folio(0.0, &[("AAPL", 10)]));
        let (r, after) = execute_decision(&decide(&[("AAPL", Sell, 10)]), &c, &after);
        assert!(r.is_accepted());
        assert!(after.positions.is_empty(), "a closed position disappears");
        assert_eq!(after.cash, 1000.0);
    }
}
