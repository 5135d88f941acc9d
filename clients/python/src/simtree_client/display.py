"""How trees and nodes show in Jupyter: a small static SVG of the tree (or of a node's path)
whose nodes link to the live page, ``/simtree/{tree}?node=N``. Pure functions of the graph's JSON
(``GET …/graph``), so they are tested without a notebook.

The links carry no token: a notebook's output is saved and shared, and a token in it would be
too. With ``--token``, open the link the server prints once in the browser; its cookie then
opens these links.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

#: Nodes drawn at most; a larger tree shows its first nodes, breadth first, and says so.
MAX_DRAWN = 400

STATUS_COLOURS = {
    "done": "#4c78a8",
    "running": "#f2a541",
    "failed": "#d1495b",
    "cancelled": "#9d9d9d",
    "interrupted": "#b279a2",
}

_STEP_X = 16
_STEP_Y = 28
_R = 5


def page_link(base: str, tree: int, node: int | None = None) -> str:
    """The web UI's page of ``tree`` with ``node`` selected."""
    return f"{base}/simtree/{tree}" + ("" if node is None else f"?node={node}")


def _layout(children: dict[int, list[int]], root: int) -> dict[int, tuple[float, int]]:
    """``{node: (x, depth)}``: leaves side by side in depth-first order, each parent above the
    middle of its children."""
    place: dict[int, tuple[float, int]] = {}
    next_x = 0.0
    # Iterative post-order: a deep chain must not hit Python's recursion limit.
    stack: list[tuple[int, int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, expanded = stack.pop()
        kids = children.get(node, [])
        if not kids:
            place[node] = (next_x, depth)
            next_x += 1
        elif expanded:
            xs = [place[k][0] for k in kids]
            place[node] = ((min(xs) + max(xs)) / 2, depth)
        else:
            stack.append((node, depth, True))
            stack.extend((k, depth + 1, False) for k in reversed(kids))
    return place


def _drawn(graph: dict, limit: int) -> tuple[list[int], dict[int, list[int]]]:
    """The first ``limit`` nodes breadth first, and their children among them."""
    children: dict[int, list[int]] = defaultdict(list)
    for e in graph.get("edges", ()):
        children[e["from"]].append(e["to"])
    order, queue, seen = [], [graph.get("root", 0)], set()
    while queue and len(order) < limit:
        node = queue.pop(0)
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        queue.extend(children.get(node, ()))
    kept = set(order)
    return order, {n: [k for k in children.get(n, ()) if k in kept] for n in order}


def tree_svg(graph: dict, base: str, tree: int, highlight: set[int] | None = None, limit: int = MAX_DRAWN) -> str:
    """An SVG of the tree's graph: one dot per node, coloured by status, each a link to the
    node's page; the nodes in ``highlight`` are ringed."""
    order, children = _drawn(graph, limit)
    if not order:
        return ""
    status = {n["id"]: n.get("status", "done") for n in graph.get("nodes", ())}
    place = _layout(children, order[0])
    width = int(max(x for x, _ in place.values()) * _STEP_X + 2 * _STEP_X)
    height = int(max(d for _, d in place.values()) * _STEP_Y + 2 * _STEP_Y)
    at = {n: (_STEP_X + x * _STEP_X, _STEP_Y / 2 + d * _STEP_Y) for n, (x, d) in place.items()}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="tree {tree}">'
    ]
    for parent, kids in children.items():
        x1, y1 = at[parent]
        for k in kids:
            x2, y2 = at[k]
            parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#bbb"/>')
    for n in order:
        x, y = at[n]
        colour = STATUS_COLOURS.get(status.get(n, "done"), "#4c78a8")
        ring = ' stroke="#222" stroke-width="2"' if highlight and n in highlight else ""
        parts.append(
            f'<a href="{escape(page_link(base, tree, n))}" target="_blank">'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{_R}" fill="{colour}"{ring}>'
            f"<title>node {n}: {escape(status.get(n, ''))}</title></circle></a>"
        )
    parts.append("</svg>")
    return "".join(parts)


def path_of(graph: dict, node: int) -> list[int]:
    """The nodes from the root to ``node``."""
    parent = {e["to"]: e["from"] for e in graph.get("edges", ())}
    path = [node]
    while path[-1] in parent:
        path.append(parent[path[-1]])
    return path[::-1]


def path_graph(graph: dict, node: int) -> dict:
    """The part of ``graph`` on the root path of ``node``."""
    on = set(path_of(graph, node))
    return {
        "root": graph.get("root", 0),
        "nodes": [n for n in graph.get("nodes", ()) if n["id"] in on],
        "edges": [e for e in graph.get("edges", ()) if e["to"] in on],
    }


def tree_html(info: dict, graph: dict, base: str) -> str:
    """A tree's card: its name, kind and size, the drawing, and a link to its page."""
    tree = info["id"]
    nodes = len(graph.get("nodes", ()))
    shown = f" ({MAX_DRAWN} of {nodes} nodes drawn)" if nodes > MAX_DRAWN else ""
    return (
        f"<div><b>{escape(str(info.get('name', tree)))}</b> · tree {tree} · "
        f"{escape(str(info.get('kind', '')))} scenario <code>{escape(str(info.get('scenario', '')))}</code> · "
        f"{nodes} nodes{shown} · "
        f'<a href="{escape(page_link(base, tree))}" target="_blank">open in simtree</a></div>'
        + tree_svg(graph, base, tree)
    )


def node_html(tree: int, node: int, graph: dict, base: str) -> str:
    """A node's card: its status and its path from the root, drawn, with a link to its page."""
    status = {n["id"]: n.get("status") for n in graph.get("nodes", ())}
    path = path_of(graph, node)
    return (
        f"<div><b>node {node}</b> of tree {tree} · {escape(str(status.get(node, 'unknown')))} · "
        f"depth {len(path) - 1} · "
        f'<a href="{escape(page_link(base, tree, node))}" target="_blank">open in simtree</a></div>'
        + tree_svg(path_graph(graph, node), base, tree, highlight={node})
    )


def framing_origins(headers: dict[str, str]) -> list[str] | None:
    """The origins a page's ``Content-Security-Policy`` lets frame it (``frame-ancestors``):
    ``[]`` when none may (``'none'``, or ``X-Frame-Options: DENY`` alone), ``None`` when the
    answer states no framing policy."""
    for directive in headers.get("content-security-policy", "").split(";"):
        words = directive.split()
        if words and words[0].lower() == "frame-ancestors":
            return [w for w in words[1:] if w != "'none'"]
    if headers.get("x-frame-options", "").upper() in ("DENY", "SAMEORIGIN"):
        return []
    return None


class LivePage:
    """The live page of a tree (``tree.show()``): in a notebook, an iframe of it when the server
    lets other pages frame it, else what to start the server with.

    ``src`` is the page, ``allowed`` the origins the server lets frame it (``[]``: none, its
    default; ``None``: it stated no policy)."""

    def __init__(self, src: str, allowed: list[str] | None, height: int = 600) -> None:
        self.src = src
        self.allowed = allowed
        self.height = height

    def __repr__(self) -> str:
        return f"LivePage({self.src!r}, allowed={self.allowed!r})"

    def _repr_html_(self) -> str:
        link = f'<a href="{escape(self.src)}" target="_blank">{escape(self.src)}</a>'
        flag = "<code>simtree serve --allow-framing http://localhost:8888</code>"
        if self.allowed == []:
            return (
                "<p>simtree does not let other pages show it in a frame (its default, against "
                f"clickjacking). Start it with {flag}, naming the origin this notebook is served "
                f"from (repeatable), or open {link}.</p>"
            )
        who = ", ".join(escape(o) for o in self.allowed or []) or "any page (no policy stated)"
        return (
            f'<iframe src="{escape(self.src)}" width="100%" height="{int(self.height)}" '
            'style="border: 1px solid #ddd"></iframe>'
            f"<p><small>simtree lets these pages frame it: {who}. A blank frame means this notebook's "
            f"origin is not one of them: add it with <code>--allow-framing</code>. Open {link} "
            "to use it in a tab.</small></p>"
        )
