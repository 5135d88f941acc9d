"""Refusals become typed exceptions carrying the server's status and detail; the access token is
sent the ways the server takes it (docs/http-api.md "Errors", SECURITY.md "Token")."""

from __future__ import annotations

import pytest

from conftest import Server
from simtree_client import (
    Client,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    SimtreeError,
    Unauthorized,
    Unavailable,
    Unprocessable,
)
from simtree_client._transport import Call, Receive, Watch
from simtree_client.errors import error_for


def test_unknown_trees_and_nodes_are_not_found(client: Client):
    with pytest.raises(NotFound) as missing:
        client.tree(987654).info()
    assert (missing.value.status, missing.value.method, missing.value.path) == (404, "GET", "/devui/simtree/987654")
    assert missing.value.detail == "simtree not found"
    tree = client.create(scenario="simple_chat")
    with pytest.raises(NotFound):
        tree.node(42).advance()


def test_conflicts_are_409(client: Client):
    tree = client.create(scenario="simple_chat")
    with pytest.raises(Conflict) as root:
        tree.root.delete()
    assert root.value.status == 409 and root.value.detail
    with pytest.raises(Conflict):
        tree.root.cancel()


def test_invalid_input_is_422_naming_the_field(client: Client):
    tree = client.create(scenario="simple_chat")
    with pytest.raises(Unprocessable) as op:
        tree.root.branch([{"op": "public_broadcast", "text": "ok"}, {"op": "fly"}])
    assert op.value.detail == "ops[1]: Unknown op: fly"
    with pytest.raises(Unprocessable):
        client.create(scenario="no_such_scenario")
    with pytest.raises(Unprocessable):
        tree.root.note()
    with pytest.raises(Unprocessable) as sweep:
        tree.sweep({"turns": 1, "axes": [], "metrics": {}, "wrong": 1})
    assert "wrong" in sweep.value.detail


def test_every_class_is_a_simtree_error_with_its_status():
    for status, cls in [
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, PayloadTooLarge),
        (422, Unprocessable),
        (503, Unavailable),
    ]:
        e = error_for(status, b'{"detail": "why"}', "POST", "/x")
        assert type(e) is cls and isinstance(e, SimtreeError)
        assert (e.status, e.detail, str(e)) == (status, "why", f"{status} (POST /x): why")
    other = error_for(508, b"not json", "GET", "/y")
    assert type(other) is SimtreeError and other.detail == "not json"


def test_without_the_token_every_call_is_401(guarded: Server):
    with Client(guarded.url, token=None) as anonymous:
        anonymous._t.headers.clear()  # no $SIMTREE_TOKEN either
        assert anonymous.health().ok
        with pytest.raises(Unauthorized) as refused:
            anonymous.trees()
        assert "token" in refused.value.detail
    with Client(guarded.url, token="wrong") as wrong, pytest.raises(Unauthorized):
        wrong.create(scenario="simple_chat")


def test_the_token_is_sent_as_a_bearer_and_read_from_the_printed_link(guarded: Server):
    assert "?token=s3cret-token" in guarded.link
    for c in (Client(guarded.url, token="s3cret-token"), Client(guarded.link)):
        with c:
            tree = c.create(scenario="simple_chat")
            assert tree.root.advance(1).info().status == "done"


def test_the_tree_socket_takes_the_token(guarded: Server):
    """wait() is fed by the tree socket: it opens with the token and carries the run messages."""
    with Client(guarded.link) as c:
        tree = c.create(scenario="simple_chat")

        def program():
            socket = yield Watch(tree.id)
            assert socket is not None, "the socket did not open"
            yield Call("POST", f"/devui/simtree/{tree.id}/advance", json={"parent": 0, "turns": 1})
            seen = []
            for _ in range(50):
                got = yield Receive(socket, 0.2)
                seen.extend(m["type"] for m in got or [])
                if "run_finish" in seen:
                    break
            return seen

        seen = c._t.run(program())
    assert seen[:2] == ["attached", "snapshot"] and "run_finish" in seen


def test_a_body_over_the_limit_is_413(guarded: Server):
    with Client(guarded.link) as c, pytest.raises(PayloadTooLarge) as big:
        c.tree(0).root.branch([{"op": "public_broadcast", "text": "x" * 100_000}])
    assert big.value.status == 413
