"""The asyncio client: the same programs, awaited."""

from __future__ import annotations

import asyncio

import pytest

from conftest import Server
from simtree_client import AsyncClient, NotFound, Unprocessable, frames
from test_client import TRADING_SWEEP


def run(coro):
    return asyncio.run(coro)


def test_the_async_client_makes_and_reads_trees(server: Server):
    async def main():
        async with AsyncClient(server.url) as c:
            tree = await c.create(scenario="council", seed=2)
            node = await tree.root.advance(2)
            kids = await node.fan_out(3)
            assert len(kids) == 3 and (await kids[0].info()).status == "done"
            ask = await node.ask("Host", "Ready?")
            assert ask.answer
            frame = await tree.nodes_frame()
            assert list(frame.columns) == frames.NODE_COLUMNS and len(frame) == 5
            assert frame["seed"].notna().all()
            events = await node.events_frame()
            assert len(events) == len(await node.logs())
            provenance = await tree.provenance
            assert provenance.scenario == "council" and provenance.seed == (await tree.root.info()).seed
            assert tree in await c.trees()
            with pytest.raises(NotFound):
                await tree.node(99).info()
            with pytest.raises(Unprocessable):
                await node.branch([{"op": "fly"}])

    run(main())


def test_the_async_client_waits_for_a_sweep(server: Server):
    async def main():
        async with AsyncClient(server.url) as c:
            tree = await c.create(scenario="momentum_tech")
            sweep = await tree.sweep(TRADING_SWEEP)
            table = await sweep.wait(progress=False, timeout=120)
            assert table.pending == 0 and table.done == 6
            runs = await sweep.runs_frame()
            assert runs.run.nunique() == 6
            effects = await sweep.effects_frame()
            assert len(effects) == 6

    run(main())
