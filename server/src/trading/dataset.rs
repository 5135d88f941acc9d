//! Market datasets users upload (`POST /api/datasets`, `simtree data import`): daily bars of
//! several tickers as CSV, `date,ticker,open,high,low,close,volume[,adj_close]`, checked before
//! anything is kept. A refusal names the line (and the column where there is one), in the words
//! of the file: "line 8: high 41.2 below low 41.5".
//!
//! The text is read with the `csv` crate (quoting, `""` escapes, CRLF), as the shipped file is
//! ([`super::data::each_csv_record`]); the date order of a ticker's rows is checked by the same
//! function too ([`super::data::push_in_date_order`]).
//!
//! The checks, beyond the shipped file's: size limits (bytes, rows, fields per line), ticker names
//! from a safe alphabet (no `../`, no spaces), and no spreadsheet formulas — a cell starting with
//! `=`, `+`, `-` or `@` that is not a number is refused, since the data is shown and exported
//! again and a spreadsheet would run it.

use std::collections::BTreeMap;

use super::data::{DateError, DateOrderError, MarketData, check_date, each_csv_record, push_in_date_order};
use super::models::PricePoint;

/// Largest dataset, in bytes of CSV.
pub(crate) const MAX_DATASET_BYTES: usize = 64 << 20;
/// Most data rows a dataset may have.
pub(crate) const MAX_DATASET_ROWS: usize = 1_000_000;
/// Most tickers a dataset may have.
pub(crate) const MAX_DATASET_TICKERS: usize = 1000;
/// Commas a line may hold before it is refused unread (a row has 6 or 7; quoted text in a cell
/// may add a few).
const MAX_LINE_COMMAS: usize = 64;
const HEADER: [&str; 8] = ["date", "ticker", "open", "high", "low", "close", "volume", "adj_close"];

/// A dataset's name: 1 to 64 of `A-Z a-z 0-9 _ -`, starting with a letter or digit.
pub(crate) fn check_dataset_name(name: &str) -> Result<(), DatasetError> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok { Ok(()) } else { Err(DatasetError::Name(name.to_string())) }
}

/// A ticker: 1 to 16 of `A-Z a-z 0-9 . - ^`, starting with a letter or digit (so no `../`).
fn check_ticker(t: &str) -> Result<(), RowError> {
    let ok = (1..=16).contains(&t.len())
        && t.starts_with(|c: char| c.is_ascii_alphanumeric())
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '^'))
        && !t.contains("..");
    if ok { Ok(()) } else { Err(RowError::Ticker(t.to_string())) }
}

/// The first line holding more than [`MAX_LINE_COMMAS`] commas: its number and its commas
/// (lines end at `\n`, `\r\n` or `\r`, as the CSV reader ends them; one pass over the bytes).
fn widest_line(text: &str) -> Option<(usize, usize)> {
    let (mut line, mut commas) = (1, 0);
    let mut bytes = text.bytes().peekable();
    while let Some(b) = bytes.next() {
        match b {
            b',' => commas += 1,
            b'\r' | b'\n' => {
                if commas > MAX_LINE_COMMAS {
                    return Some((line, commas));
                }
                if b == b'\r' && bytes.peek() == Some(&b'\n') {
                    bytes.next();
                }
                line += 1;
                commas = 0;
            }
            _ => {}
        }
    }
    (commas > MAX_LINE_COMMAS).then_some((line, commas))
}

/// Why a dataset was refused. Each message names the line (and the column where there is one)
/// in the words of the file.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("dataset name {0:?}: use 1 to 64 letters, digits, '_' or '-', starting with a letter or digit")]
    Name(String),
    #[error("{0} bytes; a dataset may have at most {MAX_DATASET_BYTES}")]
    TooBig(usize),
    #[error("{0} rows; a dataset may have at most {MAX_DATASET_ROWS}")]
    TooManyRows(usize),
    #[error("line 1: the header has {0} columns; expected `{header}` (adj_close optional)", header = HEADER.join(","))]
    HeaderWidth(usize),
    #[error("line 1: header must be `{header}` (adj_close optional), found `{0}`", header = HEADER.join(","))]
    Header(String),
    #[error("line 1: the file is empty")]
    Empty,
    #[error("line 2: no rows after the header")]
    NoRows,
    /// A line the CSV reader could not read.
    #[error("line {line}: {message}")]
    Csv { line: usize, message: String },
    #[error("line {line}: {problem}")]
    Row { line: usize, problem: RowError },
    /// The bars do not make a market (the market's own check says why).
    #[error(transparent)]
    Market(super::TradingError),
}

impl From<super::TradingError> for DatasetError {
    /// The CSV reader's complaints name their line; anything else is the market's.
    fn from(e: super::TradingError) -> Self {
        match e {
            super::TradingError::Data { line, message, .. } => DatasetError::Csv { line, message },
            other => DatasetError::Market(other),
        }
    }
}

/// What is wrong with one row of a dataset.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// A line of more fields than any row has (counted before the CSV reader runs).
    #[error("{found} fields; a row has {width} (`{header}`)", header = HEADER[..*width].join(","))]
    Wide { found: usize, width: usize },
    #[error("expected {width} fields, found {found}")]
    Fields { width: usize, found: usize },
    #[error("{name}: {cell:?} looks like a spreadsheet formula; cells must be plain values", name = HEADER[*column])]
    Formula { column: usize, cell: String },
    #[error("date: {0}")]
    Date(DateError),
    #[error("ticker {0:?}: use 1 to 16 letters, digits, '.', '-' or '^', starting with a letter or digit")]
    Ticker(String),
    #[error("{name}: {raw:?} is not a number", name = HEADER[*column])]
    NotANumber { column: usize, raw: String },
    #[error("{name}: {raw} is not a finite number", name = HEADER[*column])]
    NotFinite { column: usize, raw: String },
    #[error("{name}: {value} is not a positive price", name = HEADER[*column])]
    NotPositive { column: usize, value: f64 },
    #[error("volume: {0} is not a whole number ≥ 0")]
    Volume(f64),
    #[error("high {high} below low {low}")]
    HighBelowLow { high: f64, low: f64 },
    #[error("{what} {value} above high {high}")]
    AboveHigh { what: &'static str, value: f64, high: f64 },
    #[error("{what} {value} below low {low}")]
    BelowLow { what: &'static str, value: f64, low: f64 },
    #[error("more than {MAX_DATASET_TICKERS} tickers")]
    TooManyTickers,
    /// A ticker's dates not increasing (the shipped data's check says how).
    #[error(transparent)]
    Order(DateOrderError),
}

/// A checked dataset: the market data and what `GET /api/datasets` shows of it.
#[derive(Clone, Debug)]
pub(crate) struct Dataset {
    pub(crate) market: MarketData,
    pub(crate) rows: usize,
    pub(crate) first: String,
    pub(crate) last: String,
}

/// What a dataset's text will take in memory once parsed, from above: its lines at 96 bytes
/// each (a bar is a date string and five numbers, ~70 bytes with its allocation).
pub(crate) fn parsed_size_estimate(text: &str) -> u64 {
    (text.bytes().filter(|&b| b == b'\n').count() as u64 + 1) * 96
}

/// Parses and checks an uploaded CSV. Every error starts with `line N:`.
pub(crate) fn parse_dataset(text: &str) -> Result<Dataset, DatasetError> {
    if text.len() > MAX_DATASET_BYTES {
        return Err(DatasetError::TooBig(text.len()));
    }
    // The header line is checked before the rest is parsed, and every line's commas are
    // counted, so a line of a million fields is refused after one pass over its bytes, before the
    // CSV reader would give each field a place.
    let first_line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let fields = first_line.split(',').count();
    if !(7..=8).contains(&fields) {
        return Err(DatasetError::HeaderWidth(fields));
    }
    if let Some((line, commas)) = widest_line(text) {
        let problem = RowError::Wide { found: commas + 1, width: fields };
        return Err(DatasetError::Row { line, problem });
    }
    let mut header: Option<Vec<String>> = None;
    let mut rows = 0usize;
    let mut bars: BTreeMap<String, Vec<PricePoint>> = BTreeMap::new();
    each_csv_record("dataset", text, |line, fields| {
        let Some(header) = &header else {
            let got: Vec<String> = fields.iter().map(|s| s.trim().to_string()).collect();
            if got.len() > HEADER.len() || got.iter().zip(HEADER).any(|(g, h)| g != h) {
                return Err(DatasetError::Header(got.join(",")));
            }
            header = Some(got);
            return Ok(());
        };
        let width = header.len();
        rows += 1;
        if rows > MAX_DATASET_ROWS {
            return Err(DatasetError::TooManyRows(rows));
        }
        let err = |problem: RowError| DatasetError::Row { line, problem };
        if fields.len() != width {
            let found = fields.len();
            return Err(err(RowError::Fields { width, found }));
        }
        for (column, f) in fields.iter().enumerate() {
            let f = f.trim();
            if f.starts_with(['=', '+', '-', '@']) && f.parse::<f64>().is_err() {
                let cell = f.to_string();
                return Err(err(RowError::Formula { column, cell }));
            }
        }
        let date = fields[0].trim();
        check_date(date).map_err(|e| err(RowError::Date(e)))?;
        let ticker = fields[1].trim();
        check_ticker(ticker).map_err(err)?;
        let number = |column: usize| -> Result<f64, DatasetError> {
            let raw = fields[column].trim();
            let v: f64 = raw.parse().map_err(|_| {
                let raw = raw.to_string();
                err(RowError::NotANumber { column, raw })
            })?;
            if !v.is_finite() {
                let raw = raw.to_string();
                return Err(err(RowError::NotFinite { column, raw }));
            }
            Ok(v)
        };
        let price = |column: usize| -> Result<f64, DatasetError> {
            let value = number(column)?;
            if value <= 0.0 {
                return Err(err(RowError::NotPositive { column, value }));
            }
            Ok(value)
        };
        let (open, high, low, close) = (price(2)?, price(3)?, price(4)?, price(5)?);
        if width == 8 {
            price(7)?;
        }
        let volume = number(6)?;
        if volume < 0.0 || volume.fract() != 0.0 || volume > u64::MAX as f64 {
            return Err(err(RowError::Volume(volume)));
        }
        if high < low {
            return Err(err(RowError::HighBelowLow { high, low }));
        }
        for (what, value) in [("open", open), ("close", close)] {
            if value > high {
                return Err(err(RowError::AboveHigh { what, value, high }));
            }
            if value < low {
                return Err(err(RowError::BelowLow { what, value, low }));
            }
        }
        if !bars.contains_key(ticker) && bars.len() == MAX_DATASET_TICKERS {
            return Err(err(RowError::TooManyTickers));
        }
        let bar = PricePoint::daily(date, open, high, low, close, volume as u64);
        push_in_date_order(bars.entry(ticker.to_owned()).or_default(), ticker, bar).map_err(|e| err(RowError::Order(e)))
    })?;
    if header.is_none() {
        return Err(DatasetError::Empty);
    }
    if rows == 0 {
        return Err(DatasetError::NoRows);
    }
    let first = bars.values().filter_map(|l| l.first()).map(|p| p.timestamp.clone()).min();
    let last = bars.values().filter_map(|l| l.last()).map(|p| p.timestamp.clone()).max();
    let market = MarketData::from_bars(bars, Vec::new()).map_err(DatasetError::Market)?;
    Ok(Dataset { market, rows, first: first.unwrap_or_default(), last: last.unwrap_or_default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "date,ticker,open,high,low,close,volume\n";

    fn check(rows: &str, expect: &str) {
        let got = match parse_dataset(&format!("{HEAD}{rows}")) {
            Ok(d) => format!("ok {} rows {}..{}", d.rows, d.first, d.last),
            Err(e) => e.to_string(),
        };
        assert!(got.contains(expect), "{got:?} does not contain {expect:?}");
    }

    #[test]
    fn every_refusal_names_its_line() {
        check("2020-01-02,AAA,10,11,9,10.5,100\n2020-01-02,BBB,5,6,4,5,10\n", "ok 2 rows 2020-01-02..2020-01-02");
        check("2020-01-02,AAA,10,41.2,41.5,10.5,100\n", "line 2: high 41.2 below low 41.5");
        check("2020-01-02,AAA,12,11,9,10.5,100\n", "line 2: open 12 above high 11");
        check("2020-01-02,AAA,NaN,11,9,10.5,100\n", "line 2: open: NaN is not a finite number");
        check("2020-01-02,AAA,inf,11,9,10.5,100\n", "line 2: open: inf is not a finite number");
        check("2020-01-02,AAA,-1,11,9,10.5,100\n", "line 2: open: -1 is not a positive price");
        check("2020-01-02,AAA,10,11,9,10.5,-5\n", "line 2: volume: -5");
        check(
            "2020-01-03,AAA,10,11,9,10,1\n2020-01-02,AAA,10,11,9,10,1\n",
            "line 3: AAA 2020-01-02: out of date order",
        );
        check("2020-01-02,AAA,10,11,9,10,1\n2020-01-02,AAA,10,11,9,10,1\n", "line 3: AAA 2020-01-02: a second row");
        check("2020-01-02,\"=HYPERLINK(\"\"http://x\"\")\",10,11,9,10,1\n", "line 2: ticker: \"=HYPERLINK");
        check("2020-01-02,../etc,10,11,9,10,1\n", "line 2: ticker \"../etc\"");
        check("2020-02-30,AAA,10,11,9,10,1\n", "line 2: date: '2020-02-30' has no day 30");
        check("2020-01-02,AAA,10,11,9\n", "line 2: expected 7 fields, found 5");
        check("", "no rows");
        let wide = format!("date,ticker{}\n", ",x".repeat(1_000_000));
        assert!(parse_dataset(&wide).unwrap_err().to_string().starts_with("line 1: the header has 1000002 columns"));
        // A million fields in a row: refused from a count of its commas, at once.
        let wide = format!("2020-01-02,AAA{}\n", ",1".repeat(1_000_000));
        let took = std::time::Instant::now();
        check(&wide, "line 2: 1000002 fields; a row has 7 (`date,ticker,open,high,low,close,volume`)");
        assert!(took.elapsed() < std::time::Duration::from_millis(500), "{:?}", took.elapsed());
        let late = format!("{HEAD}2020-01-02,AAA,10,11,9,10,1\r\n2020-01-03,AAA{}\r\n", ",1".repeat(100));
        assert!(parse_dataset(&late).unwrap_err().to_string().starts_with("line 3: 102 fields"));
        // Quoting as the csv crate reads it: quoted cells, "" escapes, CRLF line ends.
        check(
            "\"2020-01-02\",\"AAA\",10,11,9,10.5,100\r\n2020-01-03,AAA,10,11,9,10,\"1\"\r\n",
            "ok 2 rows 2020-01-02..2020-01-03",
        );
        check("2020-01-02,AAA,\"10,11,9,10.5,100\n2020-01-03,AAA,10,11,9,10,1\n", "line 2: unterminated quoted field");
        // Every formula prefix spreadsheets run, in any column, quoted or not; signed numbers pass
        // the prefix check (and are then judged as prices).
        for (cell, column) in [
            ("=1+1", "open"),
            ("\"=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"", "high"),
            ("+cmd|' /C calc'!A0", "low"),
            ("-2+3", "close"),
            ("@SUM(1)", "volume"),
        ] {
            let mut cells = ["2020-01-02", "AAA", "10", "11", "9", "10", "1"];
            let at = HEADER.iter().position(|h| *h == column).unwrap();
            cells[at] = cell;
            check(&format!("{}\n", cells.join(",")), &format!("line 2: {column}: "));
            check(&format!("{}\n", cells.join(",")), "looks like a spreadsheet formula");
        }
        check("2020-01-02,AAA,+10,11,9,10,1\n", "ok 1 rows");
        // Tickers from a safe alphabet only.
        for bad in ["../etc", "A B", "AAA/B", ".AAA", "A..B", "AAAAAAAAAAAAAAAAA", "ÄÄ"] {
            check(&format!("2020-01-02,{bad},10,11,9,10,1\n"), "line 2: ticker");
        }
        check("2020-01-02,BRK.B,10,11,9,10,1\n2020-01-02,BF-B,10,11,9,10,1\n", "ok 2 rows");
    }
}
