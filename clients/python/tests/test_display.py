"""Trees and nodes in Jupyter: a static SVG whose dots link to the live pages."""

from __future__ import annotations

import re

from conftest import Server
from simtree_client import AsyncClient, Client, display

GRAPH = {
    "root": 0,
    "nodes": [
        {"id": i, "depth": d, "status": s}
        for i, d, s in [(0, 0, "done"), (1, 1, "done"), (2, 2, "failed"), (3, 2, "running"), (4, 1, "done")]
    ],
    "edges": [{"from": 0, "to": 1}, {"from": 1, "to": 2}, {"from": 1, "to": 3}, {"from": 0, "to": 4}],
}


def dots(svg: str) -> dict[int, tuple[float, float]]:
    found = re.findall(r'node=(\d+)" target="_blank"><circle cx="([\d.]+)" cy="([\d.]+)"', svg)
    return {int(n): (float(x), float(y)) for n, x, y in found}


def test_parents_sit_above_the_middle_of_their_children():
    at = dots(display.tree_svg(GRAPH, "http://h:1", 7))
    assert set(at) == {0, 1, 2, 3, 4}
    assert at[1][0] == (at[2][0] + at[3][0]) / 2 and at[1][1] < at[2][1] == at[3][1]
    assert at[0][0] == (at[1][0] + at[4][0]) / 2
    svg = display.tree_svg(GRAPH, "http://h:1", 7)
    assert 'href="http://h:1/simtree/7?node=3"' in svg
    assert display.STATUS_COLOURS["failed"] in svg and display.STATUS_COLOURS["running"] in svg


def test_a_large_tree_is_cut_breadth_first_and_a_deep_one_is_drawn():
    chain = {
        "root": 0,
        "nodes": [{"id": i} for i in range(5000)],
        "edges": [{"from": i, "to": i + 1} for i in range(4999)],
    }
    assert len(dots(display.tree_svg(chain, "", 1, limit=5000))) == 5000
    assert sorted(dots(display.tree_svg(GRAPH, "", 1, limit=3))) == [0, 1, 4]
    html = display.tree_html({"id": 1, "name": "<b>x</b>"}, chain, "")
    assert f"({display.MAX_DRAWN} of 5000 nodes drawn)" in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_a_node_shows_its_path(client: Client):
    tree = client.create(scenario="simple_chat")
    a = tree.root.advance(1)
    a.fan_out(2)
    b = a.branch([{"op": "public_broadcast", "text": "x"}])
    html = b._repr_html_()
    assert set(dots(html)) == {0, a.id, b.id}
    assert f'href="{client.url}/simtree/{tree.id}?node={b.id}"' in html
    whole = tree._repr_html_()
    assert len(dots(whole)) == 5 and "5 nodes" in whole


def test_an_async_handle_shows_its_link(server: Server):
    c = AsyncClient(server.url)
    assert c.tree(3)._repr_html_() == f'<a href="{server.url}/simtree/3" target="_blank">Tree(id=3)</a>'


def test_a_missing_tree_shows_why(client: Client):
    html = client.tree(123456)._repr_html_()
    assert "Tree(id=123456)" in html and "simtree not found" in html


def test_show_embeds_the_live_page_only_where_the_server_allows_framing(client: Client):
    tree = client.create(scenario="simple_chat", seed=2)
    # The default: the UI refuses every frame, and the page says which flag allows one.
    page = tree.show()
    assert page.allowed == [] and page.src == f"{client.url}/simtree/{tree.id}"
    html = page._repr_html_()
    assert "<iframe" not in html and "--allow-framing" in html
    framed = Server("--allow-framing", "http://localhost:8888", "--allow-framing", "https://hub.example/")
    try:
        with Client(framed.url) as c:
            other = c.create(scenario="simple_chat", seed=2)
            page = other.root.show(height=400)
            assert page.allowed == ["http://localhost:8888", "https://hub.example"]
            assert page.src == f"{framed.url}/simtree/{other.id}?node=0"
            html = page._repr_html_()
            assert f'<iframe src="{page.src}"' in html and 'height="400"' in html
            assert "http://localhost:8888" in html
    finally:
        framed.stop()


def test_the_ui_sends_its_framing_policy_on_every_page(server: Server):
    import httpx

    for path in ("/", "/simtree/0?node=1", "/studio/0"):
        r = httpx.get(server.url + path)
        assert r.headers["content-security-policy"] == "frame-ancestors 'none'", path
        assert r.headers["x-frame-options"] == "DENY", path
    assert display.framing_origins({"x-frame-options": "DENY"}) == []
    assert display.framing_origins({}) is None
