#!/usr/bin/env python3
"""Regenerates assets/data/market/daily_ohlcv.csv and its PROVENANCE.md (standard library only).

The trading simulation runs on real daily prices. They come from the public-domain Quandl WIKI
series that the PyPI package bokeh-sampledata ships as `bokeh_sampledata/_data/stocks.csv.gz`.
This script fetches the pinned wheel with `pip download --no-deps` (or takes one given with
--wheel), checks both the wheel and the gzip member against pinned SHA-256 digests (the member's
digest is also cross-checked against the one the wheel records in its datasets.json), keeps four
tickers over one year and writes the rows sorted by date, then ticker. Values are copied as the
source prints them, so rerunning the script reproduces the committed files byte for byte.

    python3 assets/data/extract_market_data.py            # download, extract, write
    python3 assets/data/extract_market_data.py --wheel W  # use a wheel already on disk
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "bokeh-sampledata"
VERSION = "2026.1"
WHEEL_NAME = "bokeh_sampledata-2026.1-py3-none-any.whl"
WHEEL_SHA256 = "f40331a40ca30c64a1c1471835aad9006b61b0d9731a3f649ee8cbbf48d3822f"
MEMBER = "bokeh_sampledata/_data/stocks.csv.gz"
MEMBER_SHA256 = "5abadf99b2d394f920120a27de6f0df129859d71d4cfb0bf661bcc99446ab1fd"
DATASETS_JSON = "bokeh_sampledata-2026.1.dist-info/licenses/licenses/datasets.json"

TICKERS = ("AAPL", "GOOG", "IBM", "MSFT")
FIRST_DAY = "2012-03-01"
LAST_DAY = "2013-03-01"
OUT_COLUMNS = ("date", "ticker", "open", "high", "low", "close", "volume", "adj_close")

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "market"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_wheel(into: Path) -> Path:
    """Downloads the pinned wheel from PyPI with pip's ordinary client."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"{PACKAGE}=={VERSION}", "-d", str(into)]
    subprocess.run(cmd, check=True)
    wheel = into / WHEEL_NAME
    if not wheel.exists():
        sys.exit(f"pip did not produce {WHEEL_NAME} in {into}")
    return wheel


def stocks_entry(datasets: dict) -> dict:
    """The datasets.json record that describes stocks.csv.gz."""
    for entry in datasets.get("datasets", []):
        if "stocks.csv.gz" in entry.get("files", []):
            return entry
    sys.exit(f"{DATASETS_JSON} has no record for stocks.csv.gz")


def extract(wheel: Path) -> tuple[list[list[str]], dict, str]:
    wheel_bytes = wheel.read_bytes()
    wheel_digest = sha256(wheel_bytes)
    if wheel_digest != WHEEL_SHA256:
        sys.exit(f"{wheel}: sha256 {wheel_digest}, expected {WHEEL_SHA256}")
    with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as zf:
        member = zf.read(MEMBER)
        datasets = json.loads(zf.read(DATASETS_JSON))
    entry = stocks_entry(datasets)
    recorded = entry.get("sha256", {}).get("stocks.csv.gz")
    if sha256(member) != MEMBER_SHA256 or recorded != MEMBER_SHA256:
        sys.exit(f"{MEMBER}: sha256 {sha256(member)}, pinned {MEMBER_SHA256}, recorded {recorded}")

    text = gzip.decompress(member).decode("utf-8")
    rows = []
    for rec in csv.DictReader(io.StringIO(text)):
        if rec["Ticker"] not in TICKERS or not FIRST_DAY <= rec["Date"] <= LAST_DAY:
            continue
        volume = float(rec["Volume"])
        if volume != int(volume):
            sys.exit(f"{rec['Ticker']} {rec['Date']}: fractional volume {rec['Volume']}")
        o, h, lo, c = (float(rec[k]) for k in ("Open", "High", "Low", "Close"))
        # A bar whose high/low do not bracket its open/close would break the simulation's checks.
        if h < max(o, c) or lo > min(o, c):
            sys.exit(f"{rec['Ticker']} {rec['Date']}: inconsistent OHLC {o} {h} {lo} {c}")
        rows.append([rec["Date"], rec["Ticker"], rec["Open"], rec["High"], rec["Low"],
                     rec["Close"], str(int(volume)), rec["Adj Close"]])
    rows.sort(key=lambda r: (r[0], r[1]))
    check_no_split(rows)
    return rows, entry, wheel_digest


def check_no_split(rows: list[list[str]]) -> None:
    """Fails when adj_close/close jumps from one day to the next as a split would make it.

    Dividends move the ratio by well under 2%; a split moves it by its factor. The simulation
    trades unadjusted prices, so a split inside the window would look like a crash.
    """
    last: dict[str, float] = {}
    for date, ticker, *_, close, _volume, adj in rows:
        ratio = float(adj) / float(close)
        if ticker in last and abs(ratio / last[ticker] - 1) > 0.02:
            sys.exit(f"{ticker} {date}: adj_close/close jumps by more than 2% (a split?)")
        last[ticker] = ratio


def write_csv(rows: list[list[str]], path: Path) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(OUT_COLUMNS)
    writer.writerows(rows)
    data = buf.getvalue().encode("utf-8")
    path.write_bytes(data)
    return data


def provenance(rows: list[list[str]], entry: dict, wheel_digest: str, csv_digest: str) -> str:
    days = sorted({r[0] for r in rows})
    per_ticker = {t: sum(1 for r in rows if r[1] == t) for t in TICKERS}
    counts = ", ".join(f"{t} {n}" for t, n in per_ticker.items())
    sources = "\n".join(f"  - {s}" for s in entry.get("sources", []))
    return f"""# Provenance of `daily_ohlcv.csv`

Generated by `assets/data/extract_market_data.py`; do not edit by hand, rerun the script instead.

| what | value |
|---|---|
| package | `{PACKAGE}` {VERSION} (PyPI) |
| wheel | `{WHEEL_NAME}`, sha256 `{wheel_digest}` |
| source file in the wheel | `{MEMBER}`, sha256 `{MEMBER_SHA256}` (matches the digest recorded in the wheel's `datasets.json`) |
| tickers | {", ".join(TICKERS)} |
| window | {FIRST_DAY} to {LAST_DAY} inclusive: {len(days)} trading days, first {days[0]}, last {days[-1]} |
| rows | {len(rows)} ({counts}) |
| this file's sha256 | `{csv_digest}` |

Columns: `{",".join(OUT_COLUMNS)}`. Open, high, low, close and
volume are the unadjusted values of the source; `adj_close` is the source's adjusted close (it
reflects corporate actions up to the archived snapshot, so only its ratios are meaningful). The
script checks that no split falls inside the window. Values are copied verbatim; rows are sorted
by date, then ticker.

## Licence

The wheel's `datasets.json` records the licence of `stocks.csv.gz` as
**{entry.get("recorded_license")}** (status `{entry.get("status")}`).

- Attribution recorded there: {entry.get("attribution")}
- Its note on the source terms: {entry.get("verified_source_terms")}

Sources listed there:
{sources}

## `events.csv` (curated by hand, not from the package)

`events.csv` (`date,ticker,kind,session,headline`) lists a few dated public facts about the four
companies in the window, chiefly the days they released quarterly results, written by the project
in its own words. `session` says when the fact became public (`pre_market`, `intraday`,
`after_close`): the simulation shows an `after_close` item only from the next trading day on, so
an agent never trades at a close that preceded the news. A test checks that every date is a
trading day of `daily_ohlcv.csv`.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="use this wheel instead of downloading it")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or fetch_wheel(Path(tmp))
        rows, entry, wheel_digest = extract(wheel)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    data = write_csv(rows, args.out_dir / "daily_ohlcv.csv")
    text = provenance(rows, entry, wheel_digest, sha256(data))
    (args.out_dir / "PROVENANCE.md").write_text(text, encoding="utf-8")
    days = len({r[0] for r in rows})
    print(f"wrote {len(rows)} rows, {days} trading days, tickers {', '.join(TICKERS)} "
          f"to {args.out_dir / 'daily_ohlcv.csv'}")


if __name__ == "__main__":
    main()
