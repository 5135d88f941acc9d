"""A table of a 10,000-node tree comes in under a second (issue 41)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from conftest import Server
from simtree_client import Client

NODES = 10_000


@pytest.fixture(scope="module")
def big() -> Iterator[Server]:
    s = Server("--max-children", str(NODES))
    yield s
    s.stop()


def test_a_10000_node_tree_frame_takes_under_a_second(big: Server):
    with Client(big.url) as c:
        tree = c.create(scenario="simple_chat", seed=1)
        # A fan-out of zero turns attaches its children without running anything.
        first = tree.root.fan_out(NODES // 2 - 1, turns=0)
        first[0].fan_out(NODES // 2, turns=0)
        first[1].note(title="marked", tags=["a"])
        times = []
        for _ in range(3):
            started = time.perf_counter()
            frame = tree.nodes_frame()
            times.append(time.perf_counter() - started)
        assert len(frame) == NODES
        assert frame["depth"].max() == 2
        assert frame.set_index("id").loc[first[1].id, "title"] == "marked"
        best = min(times)
        print(f"\nnodes_frame of {NODES} nodes: best {best:.3f} s of {', '.join(f'{t:.3f}' for t in times)}")
        assert best < 1.0, times
