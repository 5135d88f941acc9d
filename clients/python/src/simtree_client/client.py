"""The researcher's API: ``Client`` / ``AsyncClient``, and handles on what lives on the server —
``Tree``, ``Node``, ``Sweep``, ``Exploration``, the scenario ``Library`` and the ``Datasets``.

Each method is written once as a program (see ``_transport``): with ``Client`` it returns its
value, with ``AsyncClient`` an awaitable of the same value. Handles hold ids, not copies: every
read asks the server, so a handle never shows stale data. Routes and bodies are those of
docs/http-api.md; answers are the pydantic models generated from the server's OpenAPI document
(``simtree_client.models``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from . import display, frames
from . import models as m
from ._transport import (
    AsyncTransport,
    Batch,
    Call,
    Program,
    Receive,
    Sleep,
    SyncTransport,
    Watch,
    one,
)
from .errors import Conflict

#: Trees with at most this many nodes get ``seed``, ``tokens`` and ``money`` in
#: ``Tree.nodes_frame()`` by default (one ``…/info`` request per node).
INFO_NODES_DEFAULT = 500


def _ops(ops: Iterable[Any]) -> list[Any]:
    """Branch ops as JSON: dicts as they are, generated ``Op…`` models dumped."""
    return [op.model_dump(mode="json", exclude_none=True) if hasattr(op, "model_dump") else op for op in ops]


def _id(value: Any) -> int:
    """A node id from a generated model: ids inside lists come as ``RootModel[int]``."""
    return int(getattr(value, "root", value))


def _spec(spec: Any) -> dict:
    return spec.model_dump(mode="json", exclude_none=True) if hasattr(spec, "model_dump") else dict(spec)


def _table(path: str, **params: Any) -> Program[list[dict]]:
    """Every row of a long-format table route (``…/table``), read as NDJSON a page at a time."""
    rows: list[dict] = []
    offset: int | None = 0
    while offset is not None:
        page, offset = yield Call("GET", path, params={**params, "format": "ndjson", "offset": offset}, ndjson=True)
        rows.extend(page)
    return rows


class _Handle:
    _t: Any

    def _run(self, program: Program[Any]) -> Any:
        return self._t.run(program)

    def _html(self, draw: Any, tree: int, node: int | None = None) -> str:
        """Jupyter's view of a handle: ``draw`` of what the server says, read with a blocking
        call (a notebook shows a value synchronously, so an ``AsyncClient`` handle shows its
        link only). A server that cannot be read shows the link and why."""
        link = f'<a href="{display.page_link(self._t.base, tree, node)}" target="_blank">{self!r}</a>'
        if not isinstance(self._t, SyncTransport):
            return link
        try:
            return self._run(draw)
        except Exception as e:  # noqa: BLE001 - shown, not raised, in a notebook's output
            return f"{link} <i>({escape(str(e))})</i>"

    def _call(self, call: Call, then: Any = None) -> Any:
        return self._t.run(one(call, then))


class Node(_Handle):
    """Node ``id`` of tree ``tree.id``."""

    def __init__(self, tree: Tree, id: int) -> None:
        self.tree = tree
        self.id = id
        self._t = tree._t

    def __repr__(self) -> str:
        return f"Node(tree={self.tree.id}, id={self.id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and (other.tree.id, other.id) == (self.tree.id, self.id)

    def __hash__(self) -> int:
        return hash((self.tree.id, self.id))

    @property
    def _path(self) -> str:
        return f"{self.tree._path}/node/{self.id}"

    def _repr_html_(self) -> str:
        def draw() -> Program[str]:
            graph = yield Call("GET", f"{self.tree._path}/graph")
            return display.node_html(self.tree.id, self.id, graph, self._t.base)

        return self._html(draw(), self.tree.id, self.id)

    def show(self, height: int = 600) -> display.LivePage:
        """The live page with this node selected, in an iframe (see ``Tree.show``)."""
        return self.tree.show(node=self.id, height=height)

    def info(self) -> m.NodeInfo:
        """Status, failure reason, usage, seed and annotation."""
        return self._call(Call("GET", f"{self._path}/info", model=m.NodeInfo))

    def advance(self, turns: int = 1) -> Node:
        """Runs ``turns`` turns (steps, decision points) from this node; the new child. A run
        that failed or was cancelled still makes its node: see ``child.info().status``."""
        body = {"parent": self.id, "turns": turns}
        return self._call(
            Call("POST", f"{self.tree._path}/advance", json=body, model=m.RunReply),
            lambda r: Node(self.tree, r.child),
        )

    def estimate(self, turns: int = 1, count: int = 1) -> m.Estimate:
        """What advancing (``count`` > 1: fanning out) would cost, running nothing."""
        if count == 1:
            call = Call(
                "POST",
                f"{self.tree._path}/advance",
                params={"estimate": "true"},
                json={"parent": self.id, "turns": turns},
                model=m.Estimate,
            )
        else:
            call = Call(
                "POST",
                f"{self.tree._path}/advance_multi",
                params={"estimate": "true"},
                json={"parent": self.id, "turns": turns, "count": count},
                model=m.Estimate,
            )
        return self._call(call)

    def branch(self, ops: Sequence[Any]) -> Node:
        """A counterfactual child with ``ops`` applied (dicts such as
        ``{"op": "public_broadcast", "text": "…"}`` or ``models.Op…`` instances)."""
        body = {"parent": self.id, "ops": _ops(ops)}
        return self._call(
            Call("POST", f"{self.tree._path}/branch", json=body, model=m.ChildReply),
            lambda r: Node(self.tree, r.child),
        )

    def fan_out(self, count: int, turns: int = 1, same_seed: bool = False) -> list[Node]:
        """``count`` children advanced ``turns`` at once, each reseeded from this node's seed
        and its index (``same_seed=True``: all with this node's streams)."""
        body = {"parent": self.id, "turns": turns, "count": count, "same_seed": same_seed}
        return self._call(
            Call("POST", f"{self.tree._path}/advance_multi", json=body, model=m.ChildrenReply),
            lambda r: [Node(self.tree, _id(c)) for c in r.children],
        )

    def replay(self, parent: int | None = None) -> Node:
        """Re-runs this node's advance from its recorded model calls (no provider call)."""
        body = {"node": self.id, "parent": parent}
        return self._call(
            Call("POST", f"{self.tree._path}/replay", json=body, model=m.RunReply),
            lambda r: Node(self.tree, r.child),
        )

    def ask(self, agent: str, question: str) -> m.Ask:
        """Interviews ``agent`` with its context at this node; the timeline does not change."""
        body = {"agent": agent, "question": question}
        return self._call(Call("POST", f"{self._path}/ask", json=body, model=m.Ask))

    def asks(self) -> list[m.Ask]:
        return self._call(Call("GET", f"{self._path}/asks", model=list[m.Ask]))

    def note(
        self,
        title: str | None = None,
        note: str | None = None,
        tags: Sequence[str] | None = None,
        starred: bool | None = None,
    ) -> m.NodeInfo:
        """Writes on the node: each field given replaces the node's (``""`` or ``[]`` clears
        it), a field left out is kept."""
        body = {
            k: v
            for k, v in {
                "title": title,
                "note": note,
                "tags": None if tags is None else list(tags),
                "starred": starred,
            }.items()
            if v is not None
        }
        return self._call(Call("PATCH", self._path, json=body, model=m.NodeInfo))

    def logs(self) -> list[dict]:
        """The full log along the root path, ``[{type, data, node}]``."""
        return self._call(Call("GET", f"{self._path}/logs"))

    def state(self) -> m.NodeState:
        return self._call(Call("GET", f"{self._path}/state", model=m.NodeState))

    def view(self) -> m.NodeView:
        """The kind-specific view (scene state, portfolio and curves, ABM model)."""
        return self._call(Call("GET", f"{self._path}/view", model=m.NodeView))

    def calls(self, offset: int | None = None, limit: int | None = None) -> m.NodeCalls:
        return self._call(
            Call("GET", f"{self._path}/calls", params={"offset": offset, "limit": limit}, model=m.NodeCalls)
        )

    def cancel(self) -> None:
        """Stops this running node (its partial log is kept); ``Conflict`` when not running."""
        return self._call(Call("POST", f"{self._path}/cancel"), lambda _: None)

    def delete(self) -> None:
        """Deletes the node and its subtree (cancelling their runs)."""
        return self._call(Call("DELETE", self._path), lambda _: None)

    @property
    def provenance(self) -> m.Provenance | None:
        """Where the node's numbers come from (its own seed and player); ``None`` while it runs."""
        return self._call(Call("GET", f"{self._path}/info", model=m.NodeInfo), lambda i: i.provenance)

    def events_frame(self):
        """The path's log in long format, one row per entry (``frames.events_frame``), from the
        server's log table."""
        return self._run(self._events())

    def _events(self) -> Program[Any]:
        rows = yield from _table(f"{self._path}/table", scope="path")
        return frames.events_frame(rows)

    def abm_frame(self):
        """An agent-based model's tracked variables per step along the path."""
        return self._call(Call("GET", f"{self._path}/logs"), frames.abm_frame)

    def equity_frame(self):
        """A trading node's equity curve beside buy-and-hold's, one row per date."""
        return self._call(Call("GET", f"{self._path}/view"), frames.equity_frame)


class _Job(_Handle):
    """What sweeps and explorations share: a table to read, and waiting for it to finish while
    the tree socket's progress messages feed a tqdm bar."""

    #: The tree socket's progress message of this kind of job, and its id field.
    _message: str
    _key: str

    def __init__(self, tree: Tree, id: int) -> None:
        self.tree = tree
        self.id = id
        self._t = tree._t

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tree={self.tree.id}, id={self.id})"

    def _table_call(self, model: Any = None) -> Call:
        raise NotImplementedError

    @staticmethod
    def _finished(table: Any) -> bool:
        raise NotImplementedError

    @staticmethod
    def _progress(table: Any) -> tuple[int, int | None]:
        raise NotImplementedError

    def table(self) -> Any:
        return self._call(self._table_call())

    def _concerns(self, message: dict) -> bool:
        """Whether a tree socket message may change this job's table."""
        kind = message.get("type")
        data = message.get("data") or {}
        return (kind == self._message and data.get(self._key) == self.id) or kind in ("resync", "snapshot")

    def wait(self, progress: bool = True, timeout: float | None = None, poll: float = 1.0) -> Any:
        """Waits until every run has ended and returns the final table. ``progress`` shows a
        tqdm bar; ``timeout`` (seconds) raises ``TimeoutError`` past it. Progress comes from
        the tree socket; the table is read again on each of this job's messages and at least
        every ``poll`` seconds (the socket is optional: without it the table is polled)."""
        return self._run(self._wait(progress, timeout, poll))

    def _wait(self, progress: bool, timeout: float | None, poll: float) -> Program[Any]:
        socket = yield Watch(self.tree.id)
        table = yield self._table_call()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            n, total = self._progress(table)
            bar = tqdm(total=total, initial=n, desc=f"{type(self).__name__.lower()} {self.id}", unit="run")
        started = last = time.monotonic()
        try:
            while not self._finished(table):
                if timeout is not None and time.monotonic() - started > timeout:
                    raise TimeoutError(f"{self!r} still running after {timeout} s")
                if socket is not None:
                    left = poll - (time.monotonic() - last)
                    messages = yield Receive(socket, max(left, 0.01))
                    if messages is None:
                        socket = None
                        continue
                    if not any(self._concerns(msg) for msg in messages) and time.monotonic() - last < poll:
                        continue
                else:
                    yield Sleep(poll)
                table = yield self._table_call()
                last = time.monotonic()
                if bar is not None:
                    n, total = self._progress(table)
                    bar.total = total
                    bar.n = n
                    bar.refresh()
        finally:
            if bar is not None:
                bar.close()
        return table


class Sweep(_Job):
    """A sweep of tree ``tree``: cells branched from a node, paired replicates under each."""

    _message = "sweep_progress"
    _key = "sweep"

    def _table_call(self, model: Any = m.SweepTable) -> Call:
        return Call("GET", f"{self.tree._path}/sweep/{self.id}", model=model)

    @staticmethod
    def _finished(table: m.SweepTable) -> bool:
        return table.pending == 0

    @staticmethod
    def _progress(table: m.SweepTable) -> tuple[int, int | None]:
        return table.done + table.failed, table.total

    def cancel(self) -> None:
        """Cancels every replicate still running (each keeps its partial log)."""
        return self._run(self._cancel())

    def _cancel(self) -> Program[None]:
        table = yield self._table_call(model=None)
        calls = [
            Call("POST", f"{self.tree._path}/node/{n}/cancel") for cell in table["cells"] for n in cell["children"]
        ]
        yield Batch(calls, tolerate=(Conflict,))

    def runs_frame(self, series: bool = True):
        """One row per (run, step, variable), BehaviorSpace style (see ``frames.runs_frame``):
        the server's runs table (``GET …/sweep/{id}/table``); ``series=False`` keeps only the
        metric rows."""
        return self._run(self._runs(series))

    def _runs(self, series: bool) -> Program[Any]:
        rows = yield from _table(f"{self.tree._path}/sweep/{self.id}/table", series=str(series).lower())
        return frames.runs_frame(rows)

    def results_frame(self):
        """One row per run with a column per metric: the layout of ``simtree sweep --csv``."""
        return self._run(self._results())

    def _results(self) -> Program[Any]:
        return frames.results_frame((yield from self._runs(False)))

    def effects_frame(self):
        """The paired effects against the baseline cell, one row per (cell, metric)."""
        return self._call(self._table_call(model=None), frames.effects_frame)


class Exploration(_Job):
    """An exploration of tree ``tree``: successive halving over candidates within a budget."""

    _message = "explore_progress"
    _key = "explore"

    def _table_call(self, model: Any = m.ExploreTable) -> Call:
        return Call("GET", f"{self.tree._path}/explore/{self.id}", model=model)

    @staticmethod
    def _finished(table: m.ExploreTable) -> bool:
        return table.status != "running"

    @staticmethod
    def _progress(table: m.ExploreTable) -> tuple[int, int | None]:
        return table.runs_used, table.budget.runs

    def cancel(self) -> m.ExploreTable:
        """Stops it (its running replicates are cancelled); ``Conflict`` when not running."""
        return self._call(Call("POST", f"{self.tree._path}/explore/{self.id}/cancel", model=m.ExploreTable))

    def resume(self) -> m.ExploreTable:
        """Carries an interrupted exploration on within its original budget."""
        return self._call(Call("POST", f"{self.tree._path}/explore/{self.id}/resume", model=m.ExploreTable))

    def candidates_frame(self):
        """The candidates, one row each, with their means, intervals and fate in the halving."""
        return self._call(self._table_call(model=None), frames.candidates_frame)


class Tree(_Handle):
    """Tree ``id`` on the server."""

    def __init__(self, transport: Any, id: int, root_id: int = 0) -> None:
        self._t = transport
        self.id = id
        self.root_id = root_id

    def __repr__(self) -> str:
        return f"Tree(id={self.id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tree) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def _path(self) -> str:
        return f"/devui/simtree/{self.id}"

    def _repr_html_(self) -> str:
        def draw() -> Program[str]:
            info = yield Call("GET", self._path)
            graph = yield Call("GET", f"{self._path}/graph")
            return display.tree_html(info, graph, self._t.base)

        return self._html(draw(), self.id)

    @property
    def root(self) -> Node:
        return Node(self, self.root_id)

    def show(self, node: int | None = None, height: int = 600) -> display.LivePage:
        """The live page (``/simtree/{tree}?node=N``) in an iframe, shown by Jupyter. The server
        refuses to be framed unless started with ``--allow-framing ORIGIN``, the origin the
        notebook is served from (e.g. ``http://localhost:8888``); the page then says so, with the
        link to open instead. The frame carries no token (see docs/python.md)."""
        src = display.page_link(self._t.base, self.id, node)
        path = f"/simtree/{self.id}"
        params = None if node is None else {"node": node}
        return self._call(
            Call("GET", path, params=params, headers=True),
            lambda h: display.LivePage(src, display.framing_origins(h), height),
        )

    def node(self, id: int) -> Node:
        """A handle on node ``id`` (not checked: a call on a missing node raises ``NotFound``)."""
        return Node(self, id)

    def info(self) -> m.TreeInfo:
        """Name, scenario, kind, counts, and the document it was made from."""
        return self._call(Call("GET", self._path, model=m.TreeInfo))

    def edit(self, name: str | None = None, description: str | None = None) -> m.TreeInfo:
        body = {k: v for k, v in {"name": name, "description": description}.items() if v is not None}
        return self._call(Call("PATCH", self._path, json=body, model=m.TreeInfo))

    def delete(self) -> None:
        return self._call(Call("DELETE", self._path), lambda _: None)

    def graph(self, edges: str | None = None) -> m.NotedGraph:
        return self._call(Call("GET", f"{self._path}/graph", params={"edges": edges}, model=m.NotedGraph))

    def summaries(self) -> list[m.NotedSummary]:
        return self._call(Call("GET", f"{self._path}/summaries", model=list[m.NotedSummary]))

    def usage(self) -> m.UsageReply:
        return self._call(Call("GET", f"{self._path}/usage", model=m.UsageReply))

    def lca(self, a: int, b: int) -> Node:
        return self._call(Call("GET", f"{self._path}/lca/{a}/{b}", model=m.LcaReply), lambda r: Node(self, r.lca))

    def advance_frontier(self, turns: int = 1, only_max_depth: bool = True) -> list[Node]:
        body = {"turns": turns, "only_max_depth": only_max_depth}
        return self._call(
            Call("POST", f"{self._path}/advance_frontier", json=body, model=m.ChildrenReply),
            lambda r: [Node(self, _id(c)) for c in r.children],
        )

    def search(self, text: str, offset: int | None = None, limit: int | None = None) -> m.SearchReply:
        """Where ``text`` entered the timeline, then the descendants that carry it."""
        params = {"q": text, "offset": offset, "limit": limit}
        return self._call(Call("GET", f"{self._path}/search", params=params, model=m.SearchReply))

    def _job_body(self, spec: Any, parent: int | None) -> dict:
        """A sweep's or exploration's body: ``parent`` given wins, then the spec's, then the root."""
        body = _spec(spec)
        if parent is not None:
            body["parent"] = parent
        body.setdefault("parent", self.root_id)
        return body

    def sweep(self, spec: Any, parent: int | None = None) -> Sweep:
        """Starts a sweep (a sweep file, docs/sweeps.md) branching from ``parent`` (default: the
        spec's ``parent``, else the root); its handle at once, while the runs go on."""
        body = self._job_body(spec, parent)
        return self._call(
            Call("POST", f"{self._path}/sweep", json=body, model=m.SweepStarted),
            lambda r: Sweep(self, r.sweep),
        )

    def sweeps(self) -> list[Sweep]:
        return self._call(
            Call("GET", f"{self._path}/sweep", model=list[m.SweepTable]),
            lambda ts: [Sweep(self, t.sweep) for t in ts],
        )

    def explore(self, spec: Any, parent: int | None = None) -> Exploration:
        """Starts an exploration (docs/explore.md); its handle at once."""
        body = self._job_body(spec, parent)
        return self._call(
            Call("POST", f"{self._path}/explore", json=body, model=m.ExploreStarted),
            lambda r: Exploration(self, r.explore),
        )

    def explorations(self) -> list[Exploration]:
        return self._call(
            Call("GET", f"{self._path}/explores", model=list[m.ExploreTable]),
            lambda ts: [Exploration(self, t.explore) for t in ts],
        )

    def export(self, path: str | Path) -> int:
        """Streams the tree's export into ``path``; its size in bytes (``Conflict`` while a
        run is in flight)."""
        return self._call(Call("GET", f"{self._path}/export", save_to=Path(path)))

    def nodes_frame(self, info: bool | None = None):
        """One row per node (see ``frames.nodes_frame``). ``seed``, ``tokens`` and ``money``
        come from each node's info, one request per node: read when ``info`` is true, or by
        default when the tree has at most ``INFO_NODES_DEFAULT`` nodes; otherwise those columns
        are empty."""
        return self._run(self._nodes(info))

    def _nodes(self, info: bool | None) -> Program[Any]:
        summaries = yield Call("GET", f"{self._path}/summaries")
        graph = frames.graph_columns((yield Call("GET", f"{self._path}/graph/columns", raw=True)))
        infos = None
        if info or (info is None and len(summaries) <= INFO_NODES_DEFAULT):
            infos = yield Batch([Call("GET", f"{self._path}/node/{s['id']}/info") for s in summaries])
        return frames.nodes_frame(summaries, graph, infos)

    def events_frame(self, nodes: Sequence[int | Node] | None = None):
        """The log in long format, from the server's log table. With ``nodes``, each one's path,
        one after the other, with a first column ``path`` naming the node read; without, every
        entry of the tree once, in node order."""
        return self._run(self._events(nodes))

    def _events(self, nodes: Sequence[int | Node] | None) -> Program[Any]:
        if nodes is None:
            rows = yield from _table(f"{self._path}/node/{self.root_id}/table", scope="subtree")
            return frames.events_frame(rows)
        rows, path = [], []
        for n in [n.id if isinstance(n, Node) else int(n) for n in nodes]:
            got = yield from _table(f"{self._path}/node/{n}/table", scope="path")
            rows.extend(got)
            path.extend([n] * len(got))
        return frames.events_frame(rows, path)

    @property
    def provenance(self) -> m.Provenance:
        """Where the tree's numbers come from: the scenario and version with its document's
        SHA-256, the dataset and its SHA-256, the root's seed, the player, the price table's
        SHA-256 and simtree's version; ``.line`` says it all on one line, to paste into notes."""
        return self._call(Call("GET", self._path, model=m.TreeInfo), lambda i: i.provenance)


class Library(_Handle):
    """The scenario library: the shipped scenarios and the saved documents, every version."""

    def __init__(self, transport: Any) -> None:
        self._t = transport

    def list(self) -> list[m.ScenarioSummary]:
        return self._call(Call("GET", "/api/scenarios", model=list[m.ScenarioSummary]))

    def get(self, id: str, version: int | None = None) -> m.ScenarioDocument:
        return self._call(Call("GET", f"/api/scenarios/{id}", params={"version": version}, model=m.ScenarioDocument))

    def save(self, name: str, document: Any) -> m.SavedRef:
        """Saves ``document`` as version 1 of a new scenario ``name``."""
        return self._call(Call("POST", "/api/scenarios", json={"name": name, "document": document}, model=m.SavedRef))

    def update(self, id: str, document: Any) -> m.SavedRef:
        """Saves the next version of saved scenario ``id``."""
        return self._call(Call("PUT", f"/api/scenarios/{id}", json={"document": document}, model=m.SavedRef))

    def delete(self, id: str) -> None:
        return self._call(Call("DELETE", f"/api/scenarios/{id}", empty=True))


class Datasets(_Handle):
    """Market datasets for trading scenarios (``episode.dataset``)."""

    def __init__(self, transport: Any) -> None:
        self._t = transport

    def list(self) -> list[m.DatasetInfo]:
        return self._call(Call("GET", "/api/datasets", model=list[m.DatasetInfo]))

    def upload(self, data: Any, name: str | None = None) -> m.DatasetInfo:
        """Uploads a CSV (``date,ticker,open,high,low,close,volume[,adj_close]``): a path (its
        stem is the default name) or a pandas DataFrame with those columns (``name`` needed)."""
        if hasattr(data, "to_csv"):
            if name is None:
                raise ValueError("a DataFrame upload needs a name")
            frame = data.copy()
            if "date" in frame.columns:
                frame["date"] = frame["date"].map(lambda d: d.strftime("%Y-%m-%d") if hasattr(d, "strftime") else d)
            call = Call(
                "POST",
                "/api/datasets",
                params={"name": name},
                content=frame.to_csv(index=False).encode(),
                content_type="text/csv",
            )
        else:
            path = Path(data)
            call = Call(
                "POST", "/api/datasets", params={"name": name or path.stem}, upload=path, content_type="text/csv"
            )
        call.model = m.DatasetInfo
        return self._call(call)

    def delete(self, name: str) -> None:
        return self._call(Call("DELETE", f"/api/datasets/{name}"), lambda _: None)


class _Client(_Handle):
    def __init__(self, transport: Any) -> None:
        self._t = transport
        self.library = Library(transport)
        self.datasets = Datasets(transport)

    @property
    def url(self) -> str:
        return self._t.base

    def health(self) -> m.OkReply:
        return self._call(Call("GET", "/health", model=m.OkReply))

    def ready(self) -> m.OkReply:
        """``Unavailable`` (503) naming the cause while the store cannot take writes."""
        return self._call(Call("GET", "/ready", model=m.OkReply))

    def openapi(self) -> dict:
        """The server's OpenAPI document."""
        return self._call(Call("GET", "/openapi.json"))

    def tree(self, id: int) -> Tree:
        """A handle on tree ``id`` (not checked)."""
        return Tree(self._t, id)

    def trees(self) -> list[Tree]:
        return self._call(
            Call("GET", "/devui/simtree", model=list[m.TreeInfo]),
            lambda ts: [Tree(self._t, t.id, t.root) for t in ts],
        )

    def create(
        self,
        scenario: str | None = None,
        document: Any = None,
        seed: int | None = None,
        name: str | None = None,
        llm: str | None = None,
        token_budget: int | None = None,
        money_budget: float | None = None,
        prompt_layout: str | None = None,
    ) -> Tree:
        """A new tree from a library scenario (``scenario="council"``, ``"mine@2"``) or from a
        ``document`` (a social or trading scenario, or an agent-based model). ``prompt_layout``
        lays social agents' prompts out: ``"upstream"`` (the server's default) or
        ``"state_last"`` (the emotion and plan in the last message, so that a plan change keeps
        the provider's cached prefix)."""
        if (scenario is None) == (document is None):
            raise ValueError("give exactly one of scenario= or document=")
        body = {
            "scenario": scenario if document is None else document,
            "seed": seed,
            "name": name,
            "llm": llm,
            "token_budget": token_budget,
            "money_budget": money_budget,
            "prompt_layout": prompt_layout,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return self._call(
            Call("POST", "/devui/simtree", json=body, model=m.TreeRef),
            lambda r: Tree(self._t, r.id, r.root),
        )

    def import_(self, path: str | Path) -> Tree:
        """Imports an export file (streamed) as a new tree."""
        return self._call(self._import_call(path), lambda r: Tree(self._t, r.id, r.root))

    def replay_check(self, path: str | Path) -> ReplayCheck:
        """Imports an export file as a new tree to replay on, and says how the provenance the
        export states compares with what this server states for that tree: which hashes, seeds,
        player or versions differ. The server builds nothing from the export's statement."""
        return self._call(self._import_call(path), lambda r: ReplayCheck(Tree(self._t, r.id, r.root), r.provenance))

    @staticmethod
    def _import_call(path: str | Path) -> Call:
        return Call(
            "POST", "/devui/simtree/import", upload=Path(path), content_type="application/json", model=m.ImportReply
        )

    def search(self, text: str, offset: int | None = None, limit: int | None = None) -> m.SearchReply:
        """Searches every tree (each hit names its ``tree``)."""
        params = {"q": text, "offset": offset, "limit": limit}
        return self._call(Call("GET", "/api/search", params=params, model=m.SearchReply))


class ReplayCheck:
    """An imported export's provenance beside this server's (``client.replay_check``): ``tree``
    is the imported tree, ``same`` says nothing differs, ``differences`` names each field with
    both values, ``here`` and ``export`` are the two statements, ``note`` says why there was
    nothing to compare (an export written before exports stated provenance)."""

    def __init__(self, tree: Tree, check: m.ProvenanceCheck) -> None:
        self.tree = tree
        self.check = check
        self.same = check.same
        self.differences = check.differences
        self.here = check.here
        self.export = check.export
        self.note = check.note

    def __repr__(self) -> str:
        return f"ReplayCheck(tree={self.tree.id}, same={self.same}, differences={len(self.differences)})"

    def __str__(self) -> str:
        if self.note:
            return f"tree {self.tree.id}: {self.note}"
        if self.same:
            return f"tree {self.tree.id}: the same provenance as the export states"
        lines = [f"tree {self.tree.id}: differs from what the export states in"]
        lines += [f"  {d.field}: export {d.export!r}, here {d.here!r}" for d in self.differences]
        return "\n".join(lines)


def default_url() -> str:
    """``$SIMTREE_URL``, else ``simtree serve``'s default address."""
    return os.environ.get("SIMTREE_URL") or "http://127.0.0.1:8090"


class Client(_Client):
    """A blocking client. ``url`` is the server's address (default :func:`default_url`); the link
    ``simtree serve`` prints (with ``?token=…``) works as it is, else ``token`` or
    ``$SIMTREE_TOKEN`` is sent as ``Authorization: Bearer``. ``timeout`` bounds each request
    (runs answer when they end)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float | None = 600.0) -> None:
        super().__init__(SyncTransport(url or default_url(), token, timeout))

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Client):
    """The same API for asyncio: every method returns an awaitable."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float | None = 600.0) -> None:
        super().__init__(AsyncTransport(url or default_url(), token, timeout))

    async def aclose(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
