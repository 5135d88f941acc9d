"""Every call of the blocking client against the real server (mock LLM, in-memory store)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import httpx
import pandas as pd
import pytest

from conftest import ROOT, binary
from simtree_client import Client, Conflict, NotFound, SimtreeError, Unprocessable, frames, models

SIR_SWEEP = {
    "turns": 4,
    "replicates": 2,
    "seed": 1,
    "axes": [
        {
            "label": "rate",
            "op": {"op": "abm_set_global", "name": "infectionRate"},
            "field": "value",
            "values": [0.01, 0.3],
        }
    ],
    "metrics": {"peak": "max:globalVariable.infectedCount"},
}

#: Trading runs hold no random state, so a sweep in a tree and `simtree sweep` agree run for run.
TRADING_SWEEP = {
    "scenario": "momentum_tech",
    "turns": 6,
    "replicates": 2,
    "seed": 5,
    "axes": [
        {
            "label": "lookback",
            "op": {"op": "agent_swap", "agent": {"kind": "momentum", "lookback": 10}},
            "field": "agent.lookback",
            "values": [3, 10, 20],
        }
    ],
    "metrics": {"final": "metric:final_value", "trades": "metric:num_trades", "points": "count:decision_point"},
}


def test_trees_are_created_listed_edited_and_deleted(client: Client):
    tree = client.create(scenario="simple_chat", seed=4, name="chat for the client")
    assert tree in client.trees()
    info = tree.info()
    assert (info.name, info.scenario, info.kind, info.nodes) == ("chat for the client", "simple_chat", "social", 1)
    edited = tree.edit(description="a tree made by the Python tests")
    assert edited.description == "a tree made by the Python tests"
    tree.delete()
    assert tree not in client.trees()
    with pytest.raises(NotFound):
        tree.info()
    with pytest.raises(ValueError):
        client.create()


def test_a_tree_created_with_the_state_last_lays_its_prompts_out_so(client: Client):
    """``prompt_layout="state_last"`` reaches the server: the tree says so, and the agents'
    state goes in the last message of each prompt (``[Your state now]``), which the default
    layout never sends."""
    last = {}
    for layout in (None, "state_last"):
        tree = client.create(scenario="simple_chat", prompt_layout=layout)
        assert tree.info().prompt_layout == (layout or "upstream")
        call = tree.root.advance(1).calls().calls[0]
        last[layout] = call.messages[-1].content
    assert "[Your state now]" in last["state_last"], last
    assert "[Your state now]" not in last[None], last
    with pytest.raises(SimtreeError, match="prompt_layout"):
        client.create(scenario="simple_chat", prompt_layout="plan_first")


def test_a_node_advances_branches_fans_out_and_is_annotated(client: Client):
    tree = client.create(scenario="council", seed=3)
    node = tree.root.advance(2)
    info = node.info()
    assert (info.status, info.seed) == ("done", 3)
    assert tree.node(node.id).state().turns == 2
    assert node.view().root.kind == "social"
    children = node.fan_out(3, turns=1)
    assert len(children) == 3
    seeds = {c.info().seed for c in children}
    assert len(seeds) == 3, "each child of a fan-out gets its own seed"
    same = node.fan_out(2, turns=1, same_seed=True)
    assert {c.info().seed for c in same} == {3}
    branch = node.branch([{"op": "public_broadcast", "text": "The budget is cut in half."}])
    assert "The budget is cut in half." in json.dumps(branch.logs())
    typed = node.branch([models.OpPublicBroadcast(op="public_broadcast", text="A typed op.")])
    assert typed.info().status == "done"
    noted = branch.note(title="cut", tags=["budget", "what-if"], starred=True)
    assert noted.annotation == models.Annotation(title="cut", tags=["budget", "what-if"], starred=True)
    assert not branch.note(tags=[]).annotation.tags
    assert tree.lca(children[0].id, branch.id) == node
    frontier = tree.advance_frontier(turns=1)
    assert frontier and all(n.info().status == "done" for n in frontier)
    assert tree.usage().usage.calls == 0
    assert tree.graph().root == 0
    assert [s.id for s in tree.summaries()][:2] == [0, node.id]
    estimate = node.estimate(turns=2, count=4)
    assert "4 run(s) × 2 turn(s)" in estimate.basis
    assert node.calls().node == node.id
    branch.delete()
    with pytest.raises(NotFound):
        branch.info()


def test_asks_are_answered_and_kept(client: Client):
    tree = client.create(scenario="council", seed=1)
    node = tree.root.advance(1)
    ask = node.ask("Host", "What is the chamber voting on?")
    assert ask.agent == "Host" and ask.answer
    again = node.ask("Host", "What is the chamber voting on?")
    assert again.seq == 1
    assert [a.question for a in node.asks()] == ["What is the chamber voting on?"] * 2
    with pytest.raises(Unprocessable) as refused:
        node.ask("Nobody", "Hello?")
    assert "Nobody" in refused.value.detail


def test_search_finds_text_in_a_tree_and_across_trees(client: Client):
    tree = client.create(scenario="simple_chat")
    branch = tree.root.branch([{"op": "public_broadcast", "text": "A zeppelin lands in the square."}])
    hits = tree.search("zeppelin")
    assert hits.total >= 1 and hits.hits[0].node == branch.id
    everywhere = client.search("zeppelin")
    assert any(h.tree == tree.id for h in everywhere.hits)
    with pytest.raises(Unprocessable):
        tree.search("")


def test_nodes_frame_has_a_row_per_node(client: Client):
    tree = client.create(scenario="simple_chat", seed=2)
    a = tree.root.advance(2)
    kids = a.fan_out(2, turns=1)
    b = a.branch([{"op": "public_broadcast", "text": "news"}])
    b.note(title="news", tags=["x"])
    frame = tree.nodes_frame()
    assert list(frame.columns) == frames.NODE_COLUMNS
    assert frame["id"].tolist() == [0, a.id, kids[0].id, kids[1].id, b.id]
    row = frame.set_index("id").loc[b.id]
    assert (row.parent, row.depth, row.edge_type, row.status, row.title, row.tags) == (
        a.id,
        2,
        "public_event",
        "done",
        "news",
        ["x"],
    )
    assert row.ops == [{"op": "public_broadcast", "text": "news"}]
    assert frame.set_index("id").loc[a.id, "turns"] == 2
    assert frame["seed"].notna().all() and frame["tokens"].eq(0).all()
    assert frame.set_index("id").loc[kids[0].id, "seed"] != frame.set_index("id").loc[kids[1].id, "seed"]
    fast = tree.nodes_frame(info=False)
    assert fast["seed"].isna().all()
    assert fast.drop(columns=["seed", "tokens"]).equals(frame.drop(columns=["seed", "tokens"]))


def test_events_frame_is_long_format_along_the_path(client: Client):
    tree = client.create(scenario="council", seed=1)
    a = tree.root.advance(2)
    b = a.advance(1)
    side = a.branch([{"op": "public_broadcast", "text": "Recess."}])
    frame = b.events_frame()
    log = b.logs()
    assert list(frame.columns) == frames.EVENT_COLUMNS
    assert len(frame) == len(log)
    assert frame["seq"].tolist() == list(range(len(log)))
    assert frame["kind"].tolist() == [e["type"] for e in log]
    assert set(frame["node"]) == {0, a.id, b.id}
    # Three turns along the path; each starts with an agent's step 1.
    starts = frame[(frame.kind == "agent_process_start")]
    assert frame["step"].max() == 3
    assert starts.groupby("step").size().min() >= 1
    assert frame["time"].notna().any()
    said = frame[frame.kind == "agent_ctx_delta"]
    assert said["agent"].notna().all() and said["text"].notna().all()
    # The whole tree: every entry once.
    whole = tree.events_frame()
    per_node = {n: sum(1 for e in tree.node(n).logs() if e.get("node", 0) == n) for n in (0, a.id, b.id, side.id)}
    assert whole.groupby("node").size().to_dict() == per_node
    assert not whole.duplicated(["node", "seq"]).any()
    # Listed paths, one after the other.
    two = tree.events_frame(nodes=[b, side.id])
    assert two["path"].unique().tolist() == [b.id, side.id]
    assert len(two) == len(log) + len(side.logs())


def test_sweeps_run_wait_and_give_their_runs_and_effects(client: Client, tmp_path: Path):
    tree = client.create(scenario="momentum_tech")
    sweep = tree.sweep(TRADING_SWEEP)
    table = sweep.wait(progress=True, timeout=120)
    assert (table.done, table.pending, table.failed) == (6, 0, 0)
    assert sweep in [s for s in tree.sweeps() if s.id == sweep.id] or tree.sweeps()[0].id == sweep.id
    runs = sweep.runs_frame()
    assert {"run", "cell", "lookback", "replicate", "seed", "node", "step", "variable", "value"} <= set(runs.columns)
    metrics = runs[runs.step.isna()]
    assert len(metrics) == 6 * 3
    series = runs[runs.step.notna()]
    assert set(series.variable) == {"value", "cash"}
    assert series.groupby("run").step.max().tolist() == [6] * 6
    # Equal to what the binary writes for the same sweep (`simtree sweep --csv`).
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps(TRADING_SWEEP))
    csv = tmp_path / "runs.csv"
    subprocess.run([str(binary()), "sweep", str(spec), "--csv", str(csv)], cwd=ROOT, check=True, capture_output=True)
    expected = pd.read_csv(csv)
    got = sweep.results_frame()
    assert list(got.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(got.astype(float), expected.astype(float))
    # The frame is the server's long-format table: equal to its CSV, row for row.
    served = httpx.get(f"{client.url}/devui/simtree/{tree.id}/sweep/{sweep.id}/table")
    assert served.headers["content-type"].startswith("text/csv")
    csv_runs = pd.read_csv(io.StringIO(served.text))
    assert list(csv_runs.columns) == list(runs.columns)
    assert runs["variable"].tolist() == csv_runs["variable"].tolist()
    numbers = [c for c in runs.columns if c != "variable"]
    pd.testing.assert_frame_equal(runs[numbers].astype(float), csv_runs[numbers].astype(float))
    effects = sweep.effects_frame()
    assert effects["cell"].tolist() == [1, 1, 1, 2, 2, 2]
    assert effects["metric"].tolist() == ["final", "trades", "points"] * 2
    raw = table.cells[1].effects["final"]
    first = effects.iloc[0]
    assert (first.mean_diff, first.n_pairs, first.dropped) == (raw.mean_diff, raw.n_pairs, raw.dropped)


def test_a_sweep_is_cancelled(client: Client):
    tree = client.create(scenario="momentum_tech")
    long = dict(TRADING_SWEEP, turns=140, replicates=4)
    sweep = tree.sweep(long)
    sweep.cancel()
    table = sweep.wait(progress=False, timeout=60)
    assert table.pending == 0
    assert table.done + table.failed == table.total


def test_abm_sweeps_give_series_per_step(client: Client):
    tree = client.create(scenario="sir_network", seed=1)
    sweep = tree.sweep(SIR_SWEEP)
    sweep.wait(progress=False, timeout=180)
    runs = sweep.runs_frame()
    series = runs[runs.step.notna()]
    assert "globalVariable.infectedCount" in set(series.variable)
    # The model's steps: 0 (the state a run from the root starts from) to 4.
    assert series.groupby("run").step.agg(["min", "max"]).values.tolist() == [[0, 4]] * 4
    node = tree.node(int(runs.node.iloc[-1]))
    abm = node.abm_frame()
    assert {"node", "step", "globalVariable.infectedCount"} <= set(abm.columns)
    assert abm["step"].is_monotonic_increasing
    with pytest.raises(ValueError):
        node.equity_frame()


def test_trading_equity_comes_as_a_frame(client: Client):
    tree = client.create(scenario="momentum_tech")
    node = tree.root.advance(5)
    equity = node.equity_frame()
    assert list(equity.columns) == ["date", "value", "buy_and_hold"]
    assert len(equity) == 5
    assert equity["date"].is_monotonic_increasing
    assert equity["value"].iloc[0] == pytest.approx(100000.0)


def test_explorations_run_within_their_budget(client: Client):
    tree = client.create(scenario="momentum_tech")
    spec = {
        "turns": 5,
        "seed": 1,
        "objective": {"metric": "metric:final_value", "goal": "max"},
        "space": TRADING_SWEEP["axes"],
        "replicates": 1,
        "budget": {"runs": 5},
    }
    exploration = tree.explore(spec)
    table = exploration.wait(progress=True, timeout=120)
    assert table.status == "done"
    assert table.runs_used <= 5
    assert table.best is not None
    assert [e.id for e in tree.explorations()] == [exploration.id]
    candidates = exploration.candidates_frame()
    assert candidates["lookback"].tolist() == [3, 10, 20]
    assert candidates["best"].sum() == 1
    assert candidates.loc[candidates.best, "node"].item() == table.best.node
    with pytest.raises(Conflict):
        exploration.cancel()
    with pytest.raises(Conflict):
        exploration.resume()


def test_library_scenarios_are_saved_versioned_and_used(client: Client):
    shipped = {s.id for s in client.library.list()}
    assert {"council", "sir_network", "momentum_tech"} <= shipped
    document = client.library.get("simple_chat").document
    saved = client.library.save("py-chat", document)
    assert (saved.id, saved.version) == ("py-chat", 1)
    assert client.library.update("py-chat", document).version == 2
    tree = client.create(scenario="py-chat@1")
    assert tree.info().scenario_version == 1
    with pytest.raises(Conflict):
        client.library.update("council", document)
    client.library.delete("py-chat")
    with pytest.raises(NotFound):
        client.library.get("py-chat")


def test_datasets_upload_from_a_file_or_a_frame(client: Client, tmp_path: Path):
    rows = "date,ticker,open,high,low,close,volume\n2020-01-01,AAA,10,11,9,10,1000\n2020-01-02,AAA,10,12,9,11,1200\n"
    path = tmp_path / "mine.csv"
    path.write_text(rows)
    info = client.datasets.upload(path)
    assert (info.name, info.tickers, info.rows) == ("mine", ["AAA"], 2)
    frame = pd.read_csv(path, parse_dates=["date"])
    assert client.datasets.upload(frame, name="mine-frame").first == "2020-01-01"
    assert {"shipped", "mine", "mine-frame"} <= {d.name for d in client.datasets.list()}
    bad = frame.copy()
    bad.loc[1, "high"] = 1
    with pytest.raises(Unprocessable) as refused:
        client.datasets.upload(bad, name="bad")
    assert refused.value.detail.startswith("line 3")
    with pytest.raises(Conflict):
        client.datasets.delete("shipped")
    client.datasets.delete("mine")
    with pytest.raises(NotFound):
        client.datasets.delete("mine")


def test_export_and_import_round_trip(client: Client, tmp_path: Path):
    tree = client.create(scenario="simple_chat", seed=8)
    tree.root.advance(2).branch([{"op": "public_broadcast", "text": "hello"}]).note(title="kept")
    path = tmp_path / "tree.json"
    size = tree.export(path)
    assert size == path.stat().st_size > 0
    copy = client.import_(path)
    assert copy != tree
    keep = ["id", "parent", "depth", "edge_type", "ops", "status", "turns", "title", "tags", "starred"]
    assert copy.nodes_frame()[keep].equals(tree.nodes_frame()[keep])
    path.write_text("{}")
    with pytest.raises(Unprocessable):
        client.import_(path)


def test_the_server_is_healthy_and_ready(client: Client):
    assert client.health().ok and client.ready().ok
