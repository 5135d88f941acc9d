//! Market data: the committed daily OHLCV file, the curated events, and Case building.
//!
//! `assets/data/market/daily_ohlcv.csv` (written by `assets/data/extract_market_data.py`, see its
//! PROVENANCE.md) holds one bar per ticker and trading day; `events.csv` holds dated public facts.
//! Both are checked when loaded and every error names the file, the line and the column.
//!
//! No look-ahead is the rule of this module: [`MarketData::case_template`] for a cutoff day only
//! reads bars dated on or before it, and shows an event only once it was public at that day's
//! close (an `after_close` release is shown from the next trading day on). Orders then execute at
//! the cutoff day's close, a price the agent has seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::TradingError;
use super::models::{
    Case, CaseData, CaseDataItem, CaseDataKind, IntervalPriceSummary, PortfolioSnapshot, PricePoint, StockData,
};

pub(crate) const OHLCV_FILE: &str = "daily_ohlcv.csv";
pub(crate) const EVENTS_FILE: &str = "events.csv";
const OHLCV_HEADER: [&str; 8] = ["date", "ticker", "open", "high", "low", "close", "volume", "adj_close"];
const EVENTS_HEADER: [&str; 5] = ["date", "ticker", "kind", "session", "headline"];

/// `assets/data/market` under the assets folder (`$SIMTREE_ASSETS`, `./assets`, the checkout's or
/// the embedded copy).
pub(crate) fn default_market_dir() -> Result<PathBuf, crate::embedded::EmbedError> {
    Ok(crate::embedded::assets_dir()?.join("data").join("market"))
}

/// When in the trading day a fact became public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Session {
    PreMarket,
    Intraday,
    AfterClose,
}

/// One dated public fact from `events.csv`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MarketEvent {
    date: String,
    ticker: String,
    kind: CaseDataKind,
    session: Session,
    headline: String,
}

impl MarketEvent {
    /// Whether the fact was public at the close of trading day `day`.
    pub(crate) fn public_at_close_of(&self, day: &str) -> bool {
        match self.session {
            Session::AfterClose => self.date.as_str() < day,
            Session::PreMarket | Session::Intraday => self.date.as_str() <= day,
        }
    }

    /// The item a Case shows for this event (the date and ticker lead the content).
    pub(crate) fn to_item(&self) -> CaseDataItem {
        let when = match self.session {
            Session::PreMarket => "before the open",
            Session::Intraday => "during trading",
            Session::AfterClose => "after the close",
        };
        CaseDataItem { kind: self.kind, content: format!("{} ({when}) {}: {}", self.date, self.ticker, self.headline) }
    }
}

/// Daily bars per ticker (oldest first) and the curated events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MarketData {
    bars: BTreeMap<String, Vec<PricePoint>>,
    events: Vec<MarketEvent>,
}

/// Where a Case's window lies: the cutoff day, the previous decision point's cutoff (if any) and
/// how many bars per ticker to include.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CaseWindow<'a> {
    pub(crate) cutoff: &'a str,
    pub(crate) previous_cutoff: Option<&'a str>,
    pub(crate) lookback: usize,
}

impl MarketData {
    /// Loads `daily_ohlcv.csv` and, when present, `events.csv` from `dir`.
    pub fn load_dir(dir: &Path) -> Result<Self, TradingError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| TradingError::Data {
                file: path.display().to_string(),
                line: 0,
                message: format!("cannot read: {e}"),
            })
        };
        let ohlcv = read(OHLCV_FILE)?;
        let events = if dir.join(EVENTS_FILE).exists() { Some(read(EVENTS_FILE)?) } else { None };
        MarketData::parse(&ohlcv, events.as_deref())
    }

    /// The market data of the default assets folder.
    pub fn load_default() -> Result<Self, TradingError> {
        MarketData::load_dir(&default_market_dir()?)
    }

    /// Parses the two files' contents (events optional).
    pub(crate) fn parse(ohlcv: &str, events: Option<&str>) -> Result<Self, TradingError> {
        let bars = parse_ohlcv(ohlcv)?;
        let mut market = MarketData { bars, events: Vec::new() };
        if let Some(text) = events {
            market.events = parse_events(text, &market)?;
        }
        Ok(market)
    }

    /// Builds market data from bars directly (tests, synthetic series). Bars are sorted by day;
    /// duplicates are an error.
    pub(crate) fn from_bars(
        bars: BTreeMap<String, Vec<PricePoint>>,
        events: Vec<MarketEvent>,
    ) -> Result<Self, TradingError> {
        let mut market = MarketData { bars: BTreeMap::new(), events };
        for (ticker, mut list) in bars {
            list.sort_by(|a, b| a.timestamp.cmp(&b.timestamp));
            if let Some(w) = list.windows(2).find(|w| w[0].timestamp == w[1].timestamp) {
                return Err(TradingError::Config(format!("{ticker}: two bars on {}", w[0].timestamp)));
            }
            market.bars.insert(ticker, list);
        }
        Ok(market)
    }

    pub(crate) fn tickers(&self) -> Vec<&str> {
        self.bars.keys().map(String::as_str).collect()
    }

    pub(crate) fn bars(&self, ticker: &str) -> Option<&[PricePoint]> {
        self.bars.get(ticker).map(Vec::as_slice)
    }

    pub fn events(&self) -> &[MarketEvent] {
        &self.events
    }

    /// The bar of `ticker` on `day`.
    pub(crate) fn bar(&self, ticker: &str, day: &str) -> Option<&PricePoint> {
        let bars = self.bars.get(ticker)?;
        bars.binary_search_by(|b| b.timestamp.as_str().cmp(day)).ok().map(|i| &bars[i])
    }

    pub fn close(&self, ticker: &str, day: &str) -> Option<f64> {
        self.bar(ticker, day).map(|b| b.close)
    }

    /// Days on which every ticker of `tickers` has a bar, within `[from, to]` (inclusive; `None`
    /// leaves that side open), in order.
    pub(crate) fn trading_days(&self, tickers: &[String], from: Option<&str>, to: Option<&str>) -> Vec<String> {
        let mut common: Option<BTreeSet<&str>> = None;
        for t in tickers {
            let days: BTreeSet<&str> =
                self.bars.get(t).map(|b| b.iter().map(|p| p.timestamp.as_str()).collect()).unwrap_or_default();
            common = Some(match common {
                None => days,
                Some(c) => c.intersection(&days).copied().collect(),
            });
        }
        common
            .unwrap_or_default()
            .into_iter()
            .filter(|d| from.is_none_or(|f| *d >= f) && to.is_none_or(|t| *d <= t))
            .map(str::to_owned)
            .collect()
    }

    /// The market part of a Case (the seed's case template): bars and facts for `tickers` up to
    /// `window.cutoff`, an empty portfolio and no id. [`build_case`] completes it.
    ///
    /// Each ticker gets its last `lookback` bars dated on or before the cutoff, its close on the
    /// cutoff day as `current_price`, and a summary of the bars since the previous cutoff (the
    /// whole lookback window at the first decision point). Events for those tickers appear once:
    /// in the first Case at whose cutoff they are public.
    pub(crate) fn case_template(&self, tickers: &[String], window: CaseWindow<'_>) -> Result<Case, TradingError> {
        let mut stock_data = BTreeMap::new();
        let mut window_start = window.cutoff;
        for t in tickers {
            let all = self.bars.get(t).ok_or_else(|| TradingError::Config(format!("no market data for ticker {t}")))?;
            // Bars strictly after the cutoff are never looked at.
            let upto = all.partition_point(|b| b.timestamp.as_str() <= window.cutoff);
            let visible = &all[..upto];
            let last = visible
                .last()
                .filter(|b| b.timestamp == window.cutoff)
                .ok_or_else(|| TradingError::Config(format!("{t} has no bar on the cutoff day {}", window.cutoff)))?;
            let recent = &visible[upto.saturating_sub(window.lookback.max(1))..];
            window_start = window_start.min(recent[0].timestamp.as_str());
            let interval = match window.previous_cutoff {
                Some(prev) => {
                    let from = visible.partition_point(|b| b.timestamp.as_str() <= prev);
                    &visible[from..]
                }
                None => recent,
            };
            stock_data.insert(
                t.clone(),
                StockData {
                    current_price: last.close,
                    daily_bars: recent.to_vec(),
                    interval_summary: IntervalPriceSummary::of(interval),
                },
            );
        }
        let fresh = |e: &&MarketEvent| {
            tickers.contains(&e.ticker)
                && e.public_at_close_of(window.cutoff)
                && match window.previous_cutoff {
                    Some(prev) => !e.public_at_close_of(prev),
                    None => e.date.as_str() >= window_start,
                }
        };
        let items = self.events.iter().filter(fresh).map(MarketEvent::to_item).collect();
        Ok(Case {
            case_id: String::new(),
            tickers: tickers.to_vec(),
            case_data: CaseData { items },
            stock_data,
            portfolio: PortfolioSnapshot::default(),
            decision_point_idx: None,
            information_cutoff_timestamp: Some(window.cutoff.to_owned()),
        })
    }
}

/// The trading days of an episode's window and which of them are decision points: the first day,
/// then every `interval`-th trading day after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub(crate) days: Vec<String>,
    /// Indices into `days`, one per decision point.
    pub(crate) points: Vec<usize>,
}

impl Schedule {
    pub(crate) fn new(
        market: &MarketData,
        tickers: &[String],
        start: &str,
        end: &str,
        interval: usize,
    ) -> Result<Schedule, TradingError> {
        let days = market.trading_days(tickers, Some(start), Some(end));
        if days.is_empty() {
            return Err(TradingError::Config(format!(
                "no trading day of {} between {start} and {end}",
                tickers.join(", ")
            )));
        }
        let points = (0..days.len()).step_by(interval.max(1)).collect();
        Ok(Schedule { days, points })
    }

    /// The cutoff day of decision point `idx`.
    pub fn cutoff(&self, idx: usize) -> &str {
        &self.days[self.points[idx]]
    }
}

/// Completes a case template with the current portfolio, the id and the decision index (the
/// seed's `build_case`).
pub(crate) fn build_case(mut template: Case, portfolio: &PortfolioSnapshot, case_id: String, idx: u32) -> Case {
    template.portfolio = portfolio.clone();
    template.case_id = case_id;
    template.decision_point_idx = Some(idx);
    template
}

/// A text that is not a calendar date `YYYY-MM-DD`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DateError {
    #[error("'{0}' is not a date of the form YYYY-MM-DD")]
    Form(String),
    #[error("'{date}' has no month {month}")]
    Month { date: String, month: u32 },
    #[error("'{date}' has no day {day}")]
    Day { date: String, day: u32 },
}

/// Checks `YYYY-MM-DD` with a real month and day (leap years included).
pub(crate) fn check_date(s: &str) -> Result<(), DateError> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' || !digits(0..4) || !digits(5..7) || !digits(8..10) {
        return Err(DateError::Form(s.to_string()));
    }
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().unwrap_or(0);
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => {
            return Err(DateError::Month { date: s.to_string(), month: m });
        }
    };
    if d == 0 || d > days {
        return Err(DateError::Day { date: s.to_string(), day: d });
    }
    Ok(())
}

/// Splits CSV text into records of fields with the `csv` crate: comma separated, `"` quoting with
/// `""` escapes, `\n`, `\r\n` or `\r` line ends. Yields `(line number, fields)`, skipping blank
/// lines. Market data has no multi-line values: a quoted field that runs past its line's end is
/// an unterminated quote, refused at the line it opened on.
pub(crate) fn csv_records(file: &str, text: &str) -> Result<Vec<(usize, Vec<String>)>, TradingError> {
    let mut out = Vec::new();
    each_csv_record(file, text, |line, record| {
        out.push((line, record.iter().map(str::to_string).collect()));
        Ok::<_, TradingError>(())
    })?;
    Ok(out)
}

/// Hands each non-blank record of `text` with its line number to `f`, one at a time (an
/// upload of a million rows never exists as a million lists of strings); stops at the first
/// error, the reader's or `f`'s.
pub(crate) fn each_csv_record<E: From<TradingError>>(
    file: &str,
    text: &str,
    mut f: impl FnMut(usize, &csv::StringRecord) -> Result<(), E>,
) -> Result<(), E> {
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut record = csv::StringRecord::new();
    loop {
        let read = reader.read_record(&mut record).map_err(|e| TradingError::Data {
            file: file.into(),
            line: e.position().map_or(0, |p| p.line() as usize),
            message: e.to_string(),
        })?;
        if !read {
            break;
        }
        let line = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(|f| f.trim().is_empty()) && record.len() <= 1 {
            continue;
        }
        if record.iter().any(|f| f.contains(['\n', '\r'])) {
            return Err(TradingError::Data {
                file: file.into(),
                line,
                message: "unterminated quoted field (a quote opened on this line runs past its end)".into(),
            }
            .into());
        }
        f(line, &record)?;
    }
    Ok(())
}

/// Why a bar cannot follow a ticker's earlier ones: its date repeats or precedes the last one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DateOrderError {
    #[error(
        "{ticker} {date}: a second row (the previous {ticker} row is {date}); rows of a ticker must be in increasing date order"
    )]
    Repeated { ticker: String, date: String },
    #[error(
        "{ticker} {date}: out of date order (the previous {ticker} row is {previous}); rows of a ticker must be in increasing date order"
    )]
    Earlier { ticker: String, date: String, previous: String },
}

/// Appends `bar` to `ticker`'s bars, which stay in strictly increasing date order (the shipped
/// file and uploaded datasets alike).
pub(crate) fn push_in_date_order(
    list: &mut Vec<PricePoint>,
    ticker: &str,
    bar: PricePoint,
) -> Result<(), DateOrderError> {
    if let Some(prev) = list.last()
        && prev.timestamp >= bar.timestamp
    {
        return Err(if prev.timestamp == bar.timestamp {
            DateOrderError::Repeated { ticker: ticker.to_string(), date: bar.timestamp }
        } else {
            DateOrderError::Earlier {
                ticker: ticker.to_string(),
                date: bar.timestamp,
                previous: prev.timestamp.clone(),
            }
        });
    }
    list.push(bar);
    Ok(())
}

fn check_header(file: &str, records: &[(usize, Vec<String>)], expected: &[&str]) -> Result<(), TradingError> {
    let got: Vec<&str> = records.first().map(|(_, f)| f.iter().map(|s| s.trim()).collect()).unwrap_or_default();
    if got != expected {
        return Err(TradingError::Data {
            file: file.into(),
            line: 1,
            message: format!("header must be `{}`, found `{}`", expected.join(","), got.join(",")),
        });
    }
    Ok(())
}

/// A data row after the header: its line, its fields and its date (the first field).
struct DatedRow<'r> {
    file: &'static str,
    line: usize,
    fields: &'r [String],
    date: &'r str,
}

impl DatedRow<'_> {
    fn error(&self, message: String) -> TradingError {
        TradingError::Data { file: self.file.into(), line: self.line, message }
    }
}

/// The rows of `file` after its header (which must be `header`), in file order, each refused
/// unless it has as many fields as the header and a valid date first.
fn dated_rows<'r>(
    file: &'static str,
    records: &'r [(usize, Vec<String>)],
    header: &'r [&str],
) -> Result<impl Iterator<Item = Result<DatedRow<'r>, TradingError>>, TradingError> {
    check_header(file, records, header)?;
    Ok(records[1..].iter().map(move |(line, fields)| {
        let row = DatedRow { file, line: *line, fields, date: fields.first().map_or("", |d| d.trim()) };
        if fields.len() != header.len() {
            return Err(row.error(format!("expected {} fields, found {}", header.len(), fields.len())));
        }
        check_date(row.date).map_err(|m| row.error(format!("date: {m}")))?;
        Ok(row)
    }))
}

fn parse_ohlcv(text: &str) -> Result<BTreeMap<String, Vec<PricePoint>>, TradingError> {
    let file = OHLCV_FILE;
    let records = csv_records(file, text)?;
    let mut bars: BTreeMap<String, Vec<PricePoint>> = BTreeMap::new();
    for row in dated_rows(file, &records, &OHLCV_HEADER)? {
        let row = row?;
        let (fields, date) = (row.fields, row.date);
        let err = |message: String| row.error(message);
        let ticker = fields[1].trim();
        if ticker.is_empty() {
            return Err(err("ticker: empty".into()));
        }
        let price = |i: usize| -> Result<f64, TradingError> {
            let v: f64 = fields[i]
                .trim()
                .parse()
                .map_err(|_| err(format!("{}: '{}' is not a number", OHLCV_HEADER[i], fields[i])))?;
            if !(v.is_finite() && v > 0.0) {
                return Err(err(format!("{}: {v} is not a positive price", OHLCV_HEADER[i])));
            }
            Ok(v)
        };
        let (open, high, low, close) = (price(2)?, price(3)?, price(4)?, price(5)?);
        let volume: u64 = fields[6]
            .trim()
            .parse()
            .map_err(|_| err(format!("volume: '{}' is not a whole non-negative number", fields[6])))?;
        price(7)?; // adj_close is kept in the file for reference only, but must be sane
        if high < open.max(close) || low > open.min(close) || low > high {
            return Err(err(format!(
                "{ticker} {date}: high/low {high}/{low} do not bracket open/close {open}/{close}"
            )));
        }
        let bar = PricePoint::daily(date, open, high, low, close, volume);
        push_in_date_order(bars.entry(ticker.to_owned()).or_default(), ticker, bar).map_err(|e| err(e.to_string()))?;
    }
    if bars.is_empty() {
        return Err(TradingError::Data { file: file.into(), line: 1, message: "no rows".into() });
    }
    Ok(bars)
}

fn parse_events(text: &str, market: &MarketData) -> Result<Vec<MarketEvent>, TradingError> {
    let file = EVENTS_FILE;
    let records = csv_records(file, text)?;
    let mut events = Vec::new();
    for row in dated_rows(file, &records, &EVENTS_HEADER)? {
        let row = row?;
        let (fields, date) = (row.fields, row.date);
        let err = |message: String| row.error(message);
        let ticker = fields[1].trim();
        if market.bars(ticker).is_none() {
            return Err(err(format!("ticker: '{ticker}' has no prices (known: {})", market.tickers().join(", "))));
        }
        let kind = CaseDataKind::parse(fields[2].trim())
            .ok_or_else(|| err(format!("kind: '{}' is not earnings, news or other", fields[2])))?;
        let session = match fields[3].trim() {
            "pre_market" => Session::PreMarket,
            "intraday" => Session::Intraday,
            "after_close" => Session::AfterClose,
            other => {
                return Err(err(format!("session: '{other}' is not pre_market, intraday or after_close")));
            }
        };
        let headline = fields[4].trim();
        if headline.is_empty() {
            return Err(err("headline: empty".into()));
        }
        events.push(MarketEvent {
            date: date.to_owned(),
            ticker: ticker.to_owned(),
            kind,
            session,
            headline: headline.to_owned(),
        });
    }
    events.sort_by(|a, b| a.date.cmp(&b.date).then(a.ticker.cmp(&b.ticker)));
    Ok(events)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tiny market: tickers A and B on five days (B misses day 3), prices rising by 1 a day.
    pub(crate) fn tiny_market() -> MarketData {
        let csv = "\
date,ticker,open,high,low,close,volume,adj_close
2020-01-01,A,10,11,9,10,100,10
2020-01-01,B,50,51,49,50,200,50
2020-01-02,A,10,12,9.5,11,100,11
2020-01-02,B,50,52,49,51,200,51
2020-01-03,A,11,13,10,12,100,12
2020-01-06,A,12,14,11,13,100,13
2020-01-06,B,51,54,50,53,200,53
2020-01-07,A,13,15,12,14,100,14
2020-01-07,B,53,55,52,54,200,54
";
        let events = "\
date,ticker,kind,session,headline
2020-01-02,A,earnings,after_close,A reports results
2020-01-06,B,news,intraday,\"B news, with a comma\"
2020-01-07,A,other,pre_market,A note
";
        MarketData::parse(csv, Some(events)).unwrap()
    }

    fn tk(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn trading_days_are_the_common_days_in_the_window() {
        let m = tiny_market();
        assert_eq!(m.trading_days(&tk(&["A"]), None, None).len(), 5);
        assert_eq!(
            m.trading_days(&tk(&["A", "B"]), Some("2020-01-02"), Some("2020-01-06")),
            tk(&["2020-01-02", "2020-01-06"])
        );
        assert_eq!(m.close("A", "2020-01-03"), Some(12.0));
        assert_eq!(m.close("B", "2020-01-03"), None);
    }

    #[test]
    fn a_case_never_holds_a_bar_after_its_cutoff() {
        let m = tiny_market();
        let tickers = tk(&["A", "B"]);
        let days = m.trading_days(&tickers, None, None);
        for (i, cutoff) in days.iter().enumerate() {
            let window =
                CaseWindow { cutoff, previous_cutoff: i.checked_sub(1).map(|p| days[p].as_str()), lookback: 10 };
            let case = m.case_template(&tickers, window).unwrap();
            assert_eq!(case.information_cutoff_timestamp.as_deref(), Some(cutoff.as_str()));
            for (t, sd) in &case.stock_data {
                assert!(sd.daily_bars.iter().all(|b| &b.timestamp <= cutoff), "{t} at {cutoff}");
                assert_eq!(sd.daily_bars.last().unwrap().timestamp, *cutoff);
                assert_eq!(sd.current_price, m.close(t, cutoff).unwrap());
            }
            // The JSON the agent sees holds no later date anywhere.
            let text = serde_json::to_string(&case.for_agent()).unwrap();
            for later in days.iter().skip(i + 1) {
                assert!(!text.contains(later.as_str()), "{later} leaked into the case at {cutoff}");
            }
        }
    }

    #[test]
    fn lookback_and_interval_summary() {
        let m = tiny_market();
        let tickers = tk(&["A"]);
        let first =
            m.case_template(&tickers, CaseWindow { cutoff: "2020-01-06", previous_cutoff: None, lookback: 2 }).unwrap();
        let a = &first.stock_data["A"];
        assert_eq!(a.daily_bars.iter().map(|b| b.timestamp.as_str()).collect::<Vec<_>>(), ["2020-01-03", "2020-01-06"]);
        let s = a.interval_summary.as_ref().unwrap();
        assert_eq!((s.open, s.close, s.high, s.low, s.volume), (11.0, 13.0, 14.0, 10.0, 200));
        let later = m
            .case_template(
                &tickers,
                CaseWindow { cutoff: "2020-01-07", previous_cutoff: Some("2020-01-03"), lookback: 2 },
            )
            .unwrap();
        let s = later.stock_data["A"].interval_summary.as_ref().unwrap();
        assert_eq!((s.open, s.close, s.volume), (12.0, 14.0, 200), "bars after 01-03 only");
    }

    #[test]
    fn events_appear_once_when_public() {
        let m = tiny_market();
        let tickers = tk(&["A", "B"]);
        let days = m.trading_days(&tickers, None, None); // 01, 02, 06, 07
        let items_at = |i: usize| {
            let w = CaseWindow {
                cutoff: &days[i],
                previous_cutoff: i.checked_sub(1).map(|p| days[p].as_str()),
                lookback: 5,
            };
            m.case_template(&tickers, w).unwrap().case_data.items.into_iter().map(|it| it.content).collect::<Vec<_>>()
        };
        assert!(items_at(0).is_empty());
        assert!(items_at(1).is_empty(), "an after-close release is not public at that close");
        assert_eq!(
            items_at(2),
            [
                "2020-01-02 (after the close) A: A reports results",
                "2020-01-06 (during trading) B: B news, with a comma"
            ]
        );
        assert_eq!(items_at(3), ["2020-01-07 (before the open) A: A note"]);
        // Only the universe's tickers.
        let only_b = m
            .case_template(
                &tk(&["B"]),
                CaseWindow { cutoff: "2020-01-07", previous_cutoff: Some("2020-01-02"), lookback: 5 },
            )
            .unwrap();
        assert_eq!(only_b.case_data.items.len(), 1);
    }

    #[test]
    fn case_template_errors_name_the_ticker_and_day() {
        let m = tiny_market();
        let error = |tickers: &[&str]| {
            let window = CaseWindow { cutoff: "2020-01-03", previous_cutoff: None, lookback: 3 };
            m.case_template(&tk(tickers), window).unwrap_err().to_string()
        };
        assert_eq!(error(&["A", "B"]), "episode config: B has no bar on the cutoff day 2020-01-03");
        let e = error(&["Z"]);
        assert!(e.contains("no market data for ticker Z"), "{e}");
    }

    #[test]
    fn bad_files_are_reported_with_line_and_column() {
        let head = "date,ticker,open,high,low,close,volume,adj_close\n";
        let cases = [
            ("date,ticker,open\n", "daily_ohlcv.csv:1: header must be"),
            ("2020-02-30,A,1,1,1,1,1,1\n", "daily_ohlcv.csv:2: date: '2020-02-30' has no day 30"),
            ("2020-01-01,A,x,1,1,1,1,1\n", "daily_ohlcv.csv:2: open: 'x' is not a number"),
            ("2020-01-01,A,1,1,1,-1,1,1\n", "close: -1 is not a positive price"),
            ("2020-01-01,A,1,1,1,1,1.5,1\n", "volume: '1.5' is not a whole"),
            ("2020-01-01,A,1,2,1\n", "expected 8 fields, found 5"),
            ("2020-01-01,A,5,4,1,3,1,1\n", "do not bracket"),
            (
                "2020-01-02,A,1,1,1,1,1,1\n2020-01-01,A,1,1,1,1,1,1\n",
                "daily_ohlcv.csv:3: A 2020-01-01: out of date order (the previous A row is 2020-01-02)",
            ),
            ("2020-01-01,A,\"1,1,1,1,1,1\n", "daily_ohlcv.csv:2: unterminated quoted field"),
            ("2020-01-01,A,1,1,1,1,1,1\n2020-01-01,A,1,1,1,1,1,1\n", "daily_ohlcv.csv:3: A 2020-01-01: a second row"),
            (
                "2020-01-01,A,\"1\",1,1,1,1,1\r\n2020-01-02,A,1,1,1,1,1,1\n2020-01-02,A,1,1,1,1,1,1\n",
                "daily_ohlcv.csv:4: A 2020-01-02: a second row",
            ),
        ];
        for (body, want) in cases {
            let text = if body.starts_with("date,") { body.to_string() } else { format!("{head}{body}") };
            let e = MarketData::parse(&text, None).unwrap_err().to_string();
            assert!(e.contains(want), "{body:?}: {e}");
        }
        let ok = format!("{head}2020-01-01,A,1,1,1,1,1,1\n");
        let ev_head = "date,ticker,kind,session,headline\n";
        for (body, want) in [
            ("2020-01-01,Z,news,intraday,x\n", "events.csv:2: ticker: 'Z' has no prices (known: A)"),
            ("2020-01-01,A,rumour,intraday,x\n", "kind: 'rumour' is not earnings, news or other"),
            ("2020-01-01,A,news,evening,x\n", "session: 'evening'"),
            ("2020-01-01,A,news,intraday,\n", "headline: empty"),
        ] {
            let e = MarketData::parse(&ok, Some(&format!("{ev_head}{body}"))).unwrap_err().to_string();
            assert!(e.contains(want), "{body:?}: {e}");
        }
    }

    #[test]
    fn dates_are_checked() {
        assert!(check_date("2012-02-29").is_ok());
        assert_eq!(check_date("2013-02-29").unwrap_err().to_string(), "'2013-02-29' has no day 29");
        assert!(check_date("2000-02-29").is_ok());
        assert!(check_date("1900-02-29").is_err());
        assert_eq!(check_date("2012-13-01").unwrap_err().to_string(), "'2012-13-01' has no month 13");
        assert_eq!(
            check_date("2012-1-01").unwrap_err().to_string(),
            "'2012-1-01' is not a date of the form YYYY-MM-DD"
        );
        assert!(check_date("20120101xx").is_err());
    }

    /// The committed files: four tickers on 251 common days, and every curated event on a trading
    /// day of its ticker.
    #[test]
    fn committed_market_data_loads_and_every_event_is_on_a_trading_day() {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/data/market"));
        let m = MarketData::load_dir(&dir).unwrap();
        assert_eq!(m.tickers(), ["AAPL", "GOOG", "IBM", "MSFT"]);
        let all = tk(&["AAPL", "GOOG", "IBM", "MSFT"]);
        let days = m.trading_days(&all, None, None);
        assert_eq!(days.len(), 251);
        assert_eq!((days[0].as_str(), days[250].as_str()), ("2012-03-01", "2013-03-01"));
        for t in &all {
            assert_eq!(m.bars(t).unwrap().len(), 251, "{t}");
        }
        assert!(m.events().len() >= 12);
        for e in m.events() {
            assert!(
                m.bar(&e.ticker, &e.date).is_some(),
                "event {} {} is not on a trading day of {}",
                e.date,
                e.headline,
                e.ticker
            );
        }
        // Spot checks against the source file.
        assert_eq!(m.close("AAPL", "2012-03-01"), Some(544.47));
        assert_eq!(m.bar("MSFT", "2012-03-01").unwrap().volume, 77_344_100);
    }
}
