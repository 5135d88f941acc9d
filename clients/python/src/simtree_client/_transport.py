"""How requests reach the server, written once for both clients.

Every client method is a *program*: a generator that yields what it needs — a :class:`Call` (one
HTTP request), a :class:`Batch` (several independent ones), a :class:`Watch` of a tree's socket,
a :class:`Receive` from it, a :class:`Sleep` — and gets each answer back through ``send``. A
transport runs programs: :class:`SyncTransport` with ``httpx.Client`` and blocking sockets,
:class:`AsyncTransport` with ``httpx.AsyncClient`` and asyncio (its ``run`` returns a coroutine).
So ``Tree``, ``Node`` and ``Sweep`` exist once, and an answer is parsed, and an error raised, in
one place. An error is thrown into the program, which may catch it (``Batch(tolerate=…)`` hands
tolerated errors back as values instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

import httpx
from pydantic import TypeAdapter

from .errors import SimtreeError, error_for

T = TypeVar("T")

#: Largest tree-socket message accepted (a large tree's snapshot is one message).
MAX_SOCKET_MESSAGE = 256 * 1024 * 1024
#: Requests a batch keeps in flight at once (async client).
BATCH_CONCURRENCY = 8
#: Bytes per chunk when streaming an export or an import.
CHUNK = 1 << 20


@dataclass
class Call:
    """One request. The answer is parsed into ``model`` (a type pydantic validates, e.g.
    ``list[TreeInfo]``); ``model=None`` gives the decoded JSON, ``raw=True`` the bytes, and
    ``save_to`` streams the body into that file and gives its size."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    upload: Path | None = None
    content_type: str | None = None
    model: Any = None
    raw: bool = False
    save_to: Path | None = None
    #: An answer with no body (204).
    empty: bool = False
    #: An NDJSON page of a long-format table: the answer is ``(rows, next_offset)``, the rows as
    #: dicts and the offset of the next page (``X-Next-Offset``), ``None`` after the last.
    ndjson: bool = False
    #: The answer's headers only (a dict with lowercase names), whatever its status but 401 and
    #: 403 (a page the server does not have still states its framing policy).
    headers: bool = False


@dataclass
class Batch:
    """Independent calls, answered in order. Errors of the ``tolerate`` classes come back as
    values in their place; any other error is raised."""

    calls: list[Call]
    tolerate: tuple[type[SimtreeError], ...] = ()


@dataclass
class Watch:
    """Opens the tree socket of ``tree`` (sends ``ready``). Answers a handle, or ``None`` when
    the socket cannot be opened (the program then polls)."""

    tree: int


@dataclass
class Receive:
    """The messages that arrive on a watched socket within ``timeout`` seconds (returning as
    soon as some came); ``None`` once the socket is closed."""

    socket: Any
    timeout: float


@dataclass
class Sleep:
    seconds: float


Program = Generator[Any, Any, T]


def one(call: Call, then: Callable[[Any], T] | None = None) -> Program[T]:
    """The program of a single call (and what to make of its answer)."""
    answer = yield call
    return then(answer) if then else answer


@cache
def _adapter(model: Any) -> TypeAdapter:
    return TypeAdapter(model)


def _base_and_token(url: str, token: str | None) -> tuple[str, str | None]:
    """The server's base URL and the token: the link ``simtree serve`` prints
    (``http://host:port/?token=T``) works as it is."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if token is None and query.get("token"):
        token = query["token"][0]
    if token is None:
        token = os.environ.get("SIMTREE_TOKEN") or None
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base, token


def _socket_url(base: str, tree: int) -> str:
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, f"{parts.path}/devui/simtree/{tree}/events", "", ""))


class _Transport:
    """What both transports share: the base URL, the token, how an answer is read."""

    def __init__(self, url: str, token: str | None) -> None:
        self.base, self.token = _base_and_token(url, token)
        self.headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _request_args(self, call: Call) -> dict[str, Any]:
        headers = dict(self.headers)
        if call.content_type:
            headers["Content-Type"] = call.content_type
        args: dict[str, Any] = {"headers": headers}
        if call.params:
            args["params"] = {k: v for k, v in call.params.items() if v is not None}
        if call.json is not None:
            args["json"] = call.json
        if call.content is not None:
            args["content"] = call.content
        return args

    def _read(self, call: Call, status: int, body: bytes, headers: Any = None) -> Any:
        if call.headers and status not in (401, 403):
            return {k.lower(): v for k, v in (headers or {}).items()}
        if status >= 400:
            raise error_for(status, body, call.method, call.path)
        if call.raw:
            return body
        if call.ndjson:
            following = (headers or {}).get("x-next-offset")
            return [json.loads(line) for line in body.splitlines() if line], (
                int(following) if following is not None else None
            )
        if call.empty or not body:
            return None
        data = json.loads(body)
        return data if call.model is None else _adapter(call.model).validate_python(data)

    def socket_url(self, tree: int) -> str:
        return _socket_url(self.base, tree)


def _tolerated(batch: Batch, error: SimtreeError) -> Any:
    if isinstance(error, batch.tolerate):
        return error
    raise error


class SyncTransport(_Transport):
    """Runs programs with blocking calls (``Client``)."""

    def __init__(self, url: str, token: str | None, timeout: float | None) -> None:
        super().__init__(url, token)
        self.http = httpx.Client(base_url=self.base, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def run(self, program: Program[T]) -> T:
        # The sockets a program opens are closed when it ends.
        with contextlib.ExitStack() as sockets:
            try:
                step = next(program)
                while True:
                    try:
                        answer = self._do(step, sockets)
                    except BaseException as e:  # noqa: BLE001 - handed to the program
                        step = program.throw(e)
                    else:
                        step = program.send(answer)
            except StopIteration as done:
                return done.value

    def _do(self, step: Any, sockets: contextlib.ExitStack) -> Any:
        if isinstance(step, Call):
            return self._call(step)
        if isinstance(step, Batch):
            out = []
            for c in step.calls:
                try:
                    out.append(self._call(c))
                except SimtreeError as e:
                    out.append(_tolerated(step, e))
            return out
        if isinstance(step, Watch):
            return self._watch(step, sockets)
        if isinstance(step, Receive):
            return self._receive(step)
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        raise TypeError(f"a program yielded {step!r}")

    def _call(self, call: Call) -> Any:
        args = self._request_args(call)
        if call.upload is not None:
            with open(call.upload, "rb") as f:
                args["content"] = iter(lambda: f.read(CHUNK), b"")
                r = self.http.request(call.method, call.path, **args)
            return self._read(call, r.status_code, r.content)
        if call.save_to is not None:
            with self.http.stream(call.method, call.path, **args) as r:
                if r.status_code >= 400:
                    return self._read(call, r.status_code, r.read())
                size = 0
                with open(call.save_to, "wb") as f:
                    for chunk in r.iter_bytes(CHUNK):
                        f.write(chunk)
                        size += len(chunk)
                return size
        r = self.http.request(call.method, call.path, **args)
        return self._read(call, r.status_code, r.content, r.headers)

    def _watch(self, step: Watch, sockets: contextlib.ExitStack) -> Any:
        try:
            from websockets.sync.client import connect

            ws = sockets.enter_context(
                connect(
                    self.socket_url(step.tree),
                    additional_headers=self.headers,
                    max_size=MAX_SOCKET_MESSAGE,
                    open_timeout=10,
                )
            )
            ws.send("ready")
        except Exception:  # noqa: BLE001 - no socket: the program polls instead
            return None
        return ws

    @staticmethod
    def _receive(step: Receive) -> list[dict] | None:
        from websockets.exceptions import ConnectionClosed

        got: list[dict] = []
        timeout = step.timeout
        try:
            while True:
                got.append(json.loads(step.socket.recv(timeout=timeout)))
                timeout = 0
        except TimeoutError:
            return got
        except ConnectionClosed:
            return got or None


class AsyncTransport(_Transport):
    """Runs programs with asyncio (``AsyncClient``); ``run`` returns a coroutine."""

    def __init__(self, url: str, token: str | None, timeout: float | None) -> None:
        super().__init__(url, token)
        self.http = httpx.AsyncClient(base_url=self.base, timeout=timeout)

    async def close(self) -> None:
        await self.http.aclose()

    async def run(self, program: Program[T]) -> T:
        async with contextlib.AsyncExitStack() as sockets:
            try:
                step = next(program)
                while True:
                    try:
                        answer = await self._do(step, sockets)
                    except BaseException as e:  # noqa: BLE001 - handed to the program
                        step = program.throw(e)
                    else:
                        step = program.send(answer)
            except StopIteration as done:
                return done.value

    async def _do(self, step: Any, sockets: contextlib.AsyncExitStack) -> Any:
        if isinstance(step, Call):
            return await self._call(step)
        if isinstance(step, Batch):
            gate = asyncio.Semaphore(BATCH_CONCURRENCY)

            async def each(c: Call) -> Any:
                async with gate:
                    try:
                        return await self._call(c)
                    except SimtreeError as e:
                        return _tolerated(step, e)

            return list(await asyncio.gather(*(each(c) for c in step.calls)))
        if isinstance(step, Watch):
            return await self._watch(step, sockets)
        if isinstance(step, Receive):
            return await self._receive(step)
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        raise TypeError(f"a program yielded {step!r}")

    async def _call(self, call: Call) -> Any:
        args = self._request_args(call)
        if call.upload is not None:
            path = call.upload

            async def chunks():
                with open(path, "rb") as f:
                    while chunk := f.read(CHUNK):
                        yield chunk

            args["content"] = chunks()
            r = await self.http.request(call.method, call.path, **args)
            return self._read(call, r.status_code, r.content)
        if call.save_to is not None:
            async with self.http.stream(call.method, call.path, **args) as r:
                if r.status_code >= 400:
                    return self._read(call, r.status_code, await r.aread())
                size = 0
                with open(call.save_to, "wb") as f:
                    async for chunk in r.aiter_bytes(CHUNK):
                        f.write(chunk)
                        size += len(chunk)
                return size
        r = await self.http.request(call.method, call.path, **args)
        return self._read(call, r.status_code, r.content, r.headers)

    async def _watch(self, step: Watch, sockets: contextlib.AsyncExitStack) -> Any:
        try:
            from websockets.asyncio.client import connect

            ws = await sockets.enter_async_context(
                connect(
                    self.socket_url(step.tree),
                    additional_headers=self.headers,
                    max_size=MAX_SOCKET_MESSAGE,
                    open_timeout=10,
                )
            )
            await ws.send("ready")
        except Exception:  # noqa: BLE001 - no socket: the program polls instead
            return None
        return ws

    @staticmethod
    async def _receive(step: Receive) -> list[dict] | None:
        from websockets.exceptions import ConnectionClosed

        got: list[dict] = []
        timeout = step.timeout
        try:
            while True:
                got.append(json.loads(await asyncio.wait_for(step.socket.recv(), timeout or 0.001)))
                timeout = 0
        except (TimeoutError, asyncio.TimeoutError):
            return got
        except ConnectionClosed:
            return got or None
