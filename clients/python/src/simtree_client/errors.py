"""Errors the client raises: one class per status the server documents, each carrying the
server's ``detail`` (the text of its ``{"detail": "…"}`` body) and the status.

A refused request changed nothing on the server (docs/http-api.md, "Errors"), so catching one of
these and trying something else is always safe.
"""

from __future__ import annotations


class SimtreeError(Exception):
    """The server answered with an error status.

    ``status`` is the HTTP status, ``detail`` the server's reason, ``method`` and ``path`` the
    request that was refused.
    """

    status: int = 0

    def __init__(self, status: int, detail: str, method: str = "", path: str = "") -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method else ""
        super().__init__(f"{status}{where}: {detail}")


class Unauthorized(SimtreeError):
    """401: the server runs with ``--token`` and the request did not carry it."""


class Forbidden(SimtreeError):
    """403: a foreign ``Origin`` or a non-loopback ``Host`` on a loopback bind."""


class NotFound(SimtreeError):
    """404: an unknown tree, node, sweep, exploration, scenario or dataset."""


class Conflict(SimtreeError):
    """409: a run it needs is in flight, a name is taken, a limit is reached."""


class PayloadTooLarge(SimtreeError):
    """413: the body is over ``--max-body-bytes`` (``--max-import-bytes`` for imports)."""


class Unprocessable(SimtreeError):
    """422: invalid input; ``detail`` names the field (``ops[1]: …``, ``line 3: …``)."""


class Unavailable(SimtreeError):
    """503: the store cannot take writes, the server is stopping, or its leader is silent."""


BY_STATUS: dict[int, type[SimtreeError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    503: Unavailable,
}


def error_for(status: int, body: bytes, method: str, path: str) -> SimtreeError:
    """The exception for an error answer: its class by status, its detail from the JSON body
    (or the body's text when it is not the documented shape)."""
    import json

    detail = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(detail)
        if isinstance(parsed, dict) and isinstance(parsed.get("detail"), str):
            detail = parsed["detail"]
    except ValueError:
        pass
    cls = BY_STATUS.get(status, SimtreeError)
    return cls(status, detail, method, path)
