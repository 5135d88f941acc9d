"""Fixtures: the real ``simtree`` binary, started on a free port of 127.0.0.1 with an in-memory
store (``--ephemeral``) and the offline mock LLM, and clients of it.

The binary is ``$SIMTREE_BIN``, else ``$CARGO_TARGET_DIR/debug/simtree``, else the checkout's
``target/debug/simtree`` (``cargo build -p simtree-server`` makes it). It runs in the checkout's
root, where the agent-based models find their worker's venv (``.venv-abm``, made by
``simtree abm setup``).
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from simtree_client import Client

ROOT = Path(__file__).resolve().parents[3]


def binary() -> Path:
    if os.environ.get("SIMTREE_BIN"):
        return Path(os.environ["SIMTREE_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    return target / "debug" / "simtree"


def listening_address(line: str) -> str:
    """``host:port`` of the server's first line, ``simtree listening on http://ADDR[/?token=T]``
    (the shape tests/src/lib.rs reads too)."""
    return line.strip().rsplit("http://", 1)[-1].split("/", 1)[0]


class Server:
    """A running ``simtree serve``; ``url`` is its address, ``link`` the line it printed."""

    def __init__(self, *flags: str) -> None:
        exe = binary()
        if not exe.is_file():
            raise RuntimeError(f"{exe} is missing: build it with `cargo build -p simtree-server`")
        self.process = subprocess.Popen(
            [str(exe), "serve", "--ephemeral", "--addr", "127.0.0.1:0", *flags],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self.said: list[str] = []
        threading.Thread(target=self._relay, args=(self.process.stderr,), daemon=True).start()
        line = self.process.stdout.readline()
        address = listening_address(line)
        if not address:
            self.process.wait(10)
            raise RuntimeError(f"simtree did not start: {line!r}\n{''.join(self.said)}")
        self.link = line.strip().rsplit(" ", 1)[-1]
        self.url = f"http://{address}"

    def _relay(self, stream) -> None:
        for line in stream:
            if len(self.said) < 1000:
                self.said.append(line)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server: Server) -> Iterator[Client]:
    with Client(server.url) as c:
        yield c


@pytest.fixture(scope="session")
def guarded() -> Iterator[Server]:
    """A server with an access token and a small body limit."""
    s = Server("--token", "s3cret-token", "--max-body-bytes", "65536")
    yield s
    s.stop()
