"""pandas tables built from the server's JSON answers. Pure functions of what the routes return,
so each table is defined (and tested) once, whichever client fetched the data.

The tables are long where rows are observations (events, a sweep's runs) and wide where a series
is plotted against its step or date (ABM variables, equity curves).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

#: The columns of :func:`nodes_frame`, in order.
NODE_COLUMNS = [
    "id",
    "parent",
    "depth",
    "edge_type",
    "ops",
    "status",
    "seed",
    "turns",
    "tokens",
    "money",
    "title",
    "tags",
    "starred",
]

#: The columns of :func:`events_frame`, in order.
EVENT_COLUMNS = ["node", "seq", "step", "time", "agent", "kind", "text", "data"]

#: The fixed columns of :func:`runs_frame`; the cell's axis values come between ``cell`` and
#: ``replicate``.
RUN_COLUMNS = ["run", "cell", "replicate", "seed", "node", "step", "variable", "value"]

#: The figures of an effect, per (cell, metric), in :func:`effects_frame`.
EFFECT_FIGURES = ["mean_diff", "ci_lo", "ci_hi", "n_pairs", "sd_diff", "dropped", "reason"]


#: Node statuses by their byte in the columnar graph (shared/src/columns.rs).
STATUS_CODES = ["done", "running", "failed", "cancelled", "interrupted"]
#: The columnar graph's first bytes and the version read here.
COLUMNS_MAGIC = b"STGC"
COLUMNS_VERSION = 1


def graph_columns(body: bytes) -> dict[int, tuple[int, str]]:
    """``{id: (depth, status)}`` from ``GET …/graph/columns``, the graph's binary form (its
    layout is documented in shared/src/columns.rs): read with numpy, no JSON to parse."""
    import numpy as np

    if len(body) < 32 or body[:4] != COLUMNS_MAGIC:
        raise ValueError("not a columnar graph")
    if body[4] != COLUMNS_VERSION:
        raise ValueError(f"columnar graph version {body[4]} is not supported")
    n, e, f, r = np.frombuffer(body, dtype="<u4", count=4, offset=16)
    expected = 32 + 13 * int(n) + 17 * int(e) + 8 * (int(f) + int(r))
    if len(body) != expected:
        raise ValueError(f"columnar graph of {len(body)} bytes, its counts make {expected}")
    ids = np.frombuffer(body, dtype="<u8", count=int(n), offset=32)
    depths = np.frombuffer(body, dtype="<u4", count=int(n), offset=32 + 8 * int(n))
    codes = np.frombuffer(body, dtype="u1", count=int(n), offset=32 + 12 * int(n))
    return {
        i: (d, STATUS_CODES[c] if c < len(STATUS_CODES) else "unknown")
        for i, d, c in zip(ids.tolist(), depths.tolist(), codes.tolist(), strict=True)
    }


def nodes_frame(
    summaries: Sequence[dict],
    graph: dict[int, tuple[int, str]],
    infos: Sequence[dict] | None = None,
) -> pd.DataFrame:
    """One row per node, from ``GET …/summaries`` and the graph's depths and statuses
    (:func:`graph_columns`), and each node's ``…/info`` for ``seed``, ``tokens`` and ``money``
    (without them those columns are empty).

    ``edge_type`` and ``ops`` are those of the edge that made the node (``root`` and ``[]`` for
    the root); ``tokens`` counts prompt and completion tokens of the node's own provider calls;
    ``money`` is their price in US dollars when every call had one."""
    edge_of: dict[int, tuple[str, list]] = {}
    for s in summaries:
        for e in s.get("edges", ()):
            edge_of[e["to"]] = (e["type"], e.get("ops", []))
    info_of = {i["id"]: i for i in infos or ()}
    ids, parents, depths, edge_types, ops, statuses = [], [], [], [], [], []
    seeds, turns, tokens, money, titles, tags, starred = [], [], [], [], [], [], []
    for s in summaries:
        nid = s["id"]
        depth, status = graph.get(nid, (None, None))
        edge_type, node_ops = edge_of.get(nid, ("root", []))
        note = s.get("annotation") or {}
        info = info_of.get(nid)
        usage = (info or {}).get("usage") or {}
        ids.append(nid)
        parents.append(s.get("parent"))
        depths.append(depth)
        edge_types.append(edge_type)
        ops.append(node_ops)
        statuses.append(status)
        seeds.append((info or {}).get("seed"))
        turns.append(s.get("turns"))
        tokens.append(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0) if info else None)
        money.append(usage.get("money"))
        titles.append(note.get("title"))
        tags.append(list(note.get("tags") or []))
        starred.append(bool(note.get("starred", False)))
    frame = pd.DataFrame(
        {
            "id": pd.array(ids, dtype="Int64"),
            "parent": pd.array(parents, dtype="Int64"),
            "depth": pd.array(depths, dtype="Int64"),
            "edge_type": pd.array(edge_types, dtype="string"),
            "ops": ops,
            "status": pd.array(statuses, dtype="string"),
            "seed": pd.array(seeds, dtype="UInt64"),
            "turns": pd.array(turns, dtype="Int64"),
            "tokens": pd.array(tokens, dtype="Int64"),
            "money": pd.array(money, dtype="Float64"),
            "title": pd.array(titles, dtype="string"),
            "tags": tags,
            "starred": starred,
        },
        columns=NODE_COLUMNS,
    )
    return frame


def events_frame(rows: Sequence[dict], path: Sequence[int] | None = None) -> pd.DataFrame:
    """Long format: one row per log entry, columns :data:`EVENT_COLUMNS`, from the server's log
    table (``GET …/node/{n}/table``, NDJSON rows; docs/http-api.md, "Long-format tables"), and
    first ``path``, the node whose path the row was read from, when given (one value per row).

    ``seq`` is the entry's position along its root path; ``step`` the simulation step it belongs
    to (the turn, the decision point from 1, the model's step) and ``time`` the scene clock, both
    carried forward; ``agent`` the entry's agent or sender; ``text`` its readable part; ``data``
    its payload."""
    frame = pd.DataFrame.from_records([[r.get(c) for c in EVENT_COLUMNS] for r in rows], columns=EVENT_COLUMNS)
    for col in ("node", "seq", "step"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Int64")
    frame["time"] = pd.array(frame["time"].tolist(), dtype="Int64")
    frame["agent"] = frame["agent"].astype("string")
    frame["kind"] = frame["kind"].astype("string")
    frame["text"] = frame["text"].astype("string")
    if path is not None:
        frame.insert(0, "path", pd.array(list(path), dtype="Int64"))
    return frame


def _param_names(cells: Sequence[dict]) -> list[str]:
    names: list[str] = []
    for c in cells:
        for k in c.get("cell", {}):
            if k not in names:
                names.append(k)
    return names


def _param_column(name: str) -> str:
    """An axis label as a column: itself, unless it is one of the fixed columns."""
    fixed = (
        set(RUN_COLUMNS)
        | set(EFFECT_FIGURES)
        | {"metric", "baseline", "candidate", "n", "mean", "alive", "dropped_after", "best"}
    )
    return f"param:{name}" if name in fixed else name


def runs_frame(rows: Sequence[dict], columns: Sequence[str] | None = None) -> pd.DataFrame:
    """BehaviorSpace style: one row per (run, step, variable) of a sweep, from the server's runs
    table (``GET …/sweep/{id}/table``, NDJSON rows; docs/http-api.md, "Long-format tables").

    Each run is one replicate of one cell: ``run`` numbers them (cells in the grid's order,
    replicates within), ``cell`` is the cell's index, then one column per axis with the cell's
    value, ``replicate``, its ``seed`` and its ``node``. The sweep's metrics come as rows whose
    ``step`` is empty (each reduces the whole run; ``value`` is empty while the run is pending or
    when it failed); each run's own steps follow, one row per step and variable. ``columns``
    names the columns when there are no rows."""
    columns = list(rows[0]) if rows else list(columns or RUN_COLUMNS)
    frame = pd.DataFrame.from_records([[r.get(c) for c in columns] for r in rows], columns=columns)
    for col in ("run", "cell", "replicate", "node", "step"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Int64")
    frame["seed"] = pd.array(frame["seed"].tolist(), dtype="UInt64")
    frame["variable"] = frame["variable"].astype("string")
    return frame


def results_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """The metric rows of :func:`runs_frame` as one row per run: the cell's axis values,
    ``replicate``, ``seed``, then one column per metric — the layout of ``simtree sweep --csv``."""
    metric_rows = runs[runs["step"].isna()]
    fixed = set(RUN_COLUMNS) | {"cell"}
    params = [c for c in runs.columns if c not in fixed]
    names = list(dict.fromkeys(metric_rows["variable"]))
    records: dict[int, dict] = {}
    for row in metric_rows.itertuples(index=False):
        r = dict(zip(metric_rows.columns, row, strict=True))
        rec = records.setdefault(
            r["run"], {**{p: r[p] for p in params}, "replicate": r["replicate"], "seed": r["seed"]}
        )
        rec[r["variable"]] = r["value"]
    frame = pd.DataFrame(list(records.values()), columns=[*params, "replicate", "seed", *names])
    frame["replicate"] = pd.array(frame["replicate"].tolist(), dtype="Int64")
    frame["seed"] = pd.array(frame["seed"].tolist(), dtype="UInt64")
    return frame


def effects_frame(table: dict) -> pd.DataFrame:
    """One row per (cell, metric) of every cell but the baseline: the cell's index and axis
    values, ``metric``, then the paired effect against the baseline as the server computed it
    (docs/sweeps.md, "Effects"): ``mean_diff``, the interval ``ci_lo``/``ci_hi``, ``n_pairs``,
    ``sd_diff``, ``dropped`` and ``reason`` (why a figure is missing)."""
    cells = table.get("cells", [])
    params = _param_names(cells)
    baseline = table.get("baseline", 0)
    records = []
    for i, c in enumerate(cells):
        for metric, e in (c.get("effects") or {}).items():
            ci = e.get("ci95") or [None, None]
            records.append(
                [
                    i,
                    *[c.get("cell", {}).get(p) for p in params],
                    metric,
                    e.get("mean_diff"),
                    ci[0],
                    ci[1],
                    e.get("n_pairs"),
                    e.get("sd_diff"),
                    e.get("dropped"),
                    e.get("reason"),
                    baseline,
                ]
            )
    columns = ["cell", *map(_param_column, params), "metric", *EFFECT_FIGURES, "baseline"]
    frame = pd.DataFrame.from_records(records, columns=columns)
    for col in ("mean_diff", "ci_lo", "ci_hi", "sd_diff"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Float64")
    for col in ("cell", "n_pairs", "dropped", "baseline"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Int64")
    frame["metric"] = frame["metric"].astype("string")
    frame["reason"] = frame["reason"].astype("string")
    return frame


def candidates_frame(table: dict) -> pd.DataFrame:
    """An exploration's candidates (``GET …/explore/{id}``), one row each in the space's order:
    ``candidate``, one column per axis, ``n`` (replicates with a value), ``mean`` and its 95%
    interval ``ci_lo``/``ci_hi``, ``alive`` (still in the race), ``dropped_after`` (the round it
    was dropped after), ``best`` and ``node``."""
    rows = table.get("candidates", [])
    params = []
    for c in rows:
        for k in c.get("point", {}):
            if k not in params:
                params.append(k)
    best = (table.get("best") or {}).get("node")
    records = []
    for i, c in enumerate(rows):
        ci = c.get("ci95") or [None, None]
        records.append(
            [
                i,
                *[c.get("point", {}).get(p) for p in params],
                c.get("n"),
                c.get("mean"),
                ci[0],
                ci[1],
                c.get("alive"),
                c.get("dropped_after"),
                c.get("node") == best,
                c.get("node"),
            ]
        )
    columns = [
        "candidate",
        *map(_param_column, params),
        "n",
        "mean",
        "ci_lo",
        "ci_hi",
        "alive",
        "dropped_after",
        "best",
        "node",
    ]
    frame = pd.DataFrame.from_records(records, columns=columns)
    for col in ("mean", "ci_lo", "ci_hi"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Float64")
    for col in ("candidate", "n", "dropped_after", "node"):
        frame[col] = pd.array(frame[col].tolist(), dtype="Int64")
    return frame


def abm_frame(entries: Iterable[dict]) -> pd.DataFrame:
    """An agent-based model's series along a path: one row per ``abm_step`` entry, ``node`` and
    ``step`` (the model's step), then one column per tracked variable."""
    rows = []
    for e in entries:
        if e.get("type") != "abm_step":
            continue
        data = e.get("data") or {}
        rows.append({"node": e.get("node"), "step": data.get("step"), **(data.get("values") or {})})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=["node", "step"])
    frame["node"] = pd.array(frame["node"].tolist(), dtype="Int64")
    frame["step"] = pd.array(frame["step"].tolist(), dtype="Int64")
    return frame


def equity_frame(view: dict) -> pd.DataFrame:
    """A trading node's equity curve (``GET …/node/{n}/view``): one row per decision date with
    the portfolio's ``value`` and the ``buy_and_hold`` baseline's value on that date."""
    if view.get("kind") != "trading":
        raise ValueError(f"not a trading node: its view is of kind {view.get('kind')!r}")
    curve = pd.DataFrame(view.get("equity_curve") or [], columns=["date", "value"])
    hold = pd.DataFrame(view.get("buy_and_hold_curve") or [], columns=["date", "value"])
    frame = curve.merge(hold.rename(columns={"value": "buy_and_hold"}), on="date", how="left")
    frame["date"] = pd.to_datetime(frame["date"])
    return frame
