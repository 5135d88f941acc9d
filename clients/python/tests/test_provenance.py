"""Provenance from Python: ``tree.provenance`` and ``node.provenance`` as the server states them,
and ``client.replay_check`` of an export on the same server and on one whose price table
differs."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Server
from simtree_client import Client, ReplayCheck, models


def test_a_tree_and_a_node_state_their_provenance(client: Client):
    tree = client.create(scenario="council", seed=11)
    child = tree.root.advance(1)
    stated = tree.provenance
    assert isinstance(stated, models.Provenance)
    assert (stated.scenario, stated.seed, stated.player) == ("council", 11, "mock")
    assert len(stated.document_sha256) == 64 and len(stated.prices_sha256) == 64
    assert stated.line.startswith("council sha256:") and "seed 11" in stated.line
    assert child.provenance.seed == child.info().seed


def test_replaying_an_export_says_what_differs(client: Client, tmp_path: Path):
    tree = client.create(scenario="council", seed=5)
    tree.root.advance(1)
    path = tmp_path / "council.json"
    tree.export(path)

    here = client.replay_check(path)
    assert isinstance(here, ReplayCheck)
    assert (here.same, here.differences, here.note) == (True, [], None)
    assert here.tree.provenance == tree.provenance
    assert "the same provenance" in str(here)

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"some-model": {"prompt": 1.0, "completion": 2.0}}))
    other = Server("--prices", str(prices))
    try:
        with Client(other.url) as elsewhere:
            check = elsewhere.replay_check(path)
            assert not check.same
            assert [d.field for d in check.differences] == ["prices_sha256"]
            assert check.differences[0].export == tree.provenance.prices_sha256
            assert check.differences[0].here == check.tree.provenance.prices_sha256
            assert "prices_sha256: export" in str(check)
    finally:
        other.stop()

    # An export that states no provenance imports, and says there is nothing to compare.
    document = json.loads(path.read_text())
    del document["provenance"]
    path.write_text(json.dumps(document))
    old = client.replay_check(path)
    assert not old.same and "states no provenance" in old.note
