"""A byte cap on request bodies, enforced while they arrive: an oversized request gets a 413 before it is
parsed or stored.

Without it a 30 MB JSON body was parsed in full (seconds of the one event loop, ~0.8 GB of memory)
before the schema's limits refused it, and an upload was written to a temporary file in full before
the upload cap was checked. A declared Content-Length over the cap is refused before any byte is read;
a body without one (chunked) is counted chunk by chunk and refused as soon as it passes the cap. Both
413s say ``Connection: close``: the server then closes the connection after a lingering read, so the
client, still sending, can read the 413 (serve/lingering.py) instead of getting a TCP reset.
"""
from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from tokenspace.serve.body_timeout import CLOSE


class BodyLimit:
    def __init__(self, app, limit_for: Callable[[str], int]):
        """``limit_for(path)``: the largest body in bytes a request to ``path`` may send."""
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            # refused before reading: the connection closes, its unread body is never received
            response = JSONResponse({"detail": _message(declared, limit)}, status_code=413,
                                    headers=CLOSE)
            return await response(scope, receive, send)
        seen = 0

        async def counted_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, _message(seen, limit, so_far=True), headers=CLOSE)
            return message

        return await self.app(scope, counted_receive, send)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # malformed: the server rejects it, or the body is counted as it comes
    return None


def _message(size: int, limit: int, so_far: bool = False) -> str:
    return f"the request body is {'over ' if so_far else ''}{size:,} bytes; the limit for this endpoint is {limit:,}"
