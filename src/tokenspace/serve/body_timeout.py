"""A deadline on reading a request's body: a client that declares more bytes than it sends (or trickles
them) gets a 408 instead of holding a connection and a worker forever.

uvicorn has no such timeout (``timeout_keep_alive`` only covers idle connections between requests), so
this ASGI middleware wraps ``receive``: until the last body chunk has arrived, each call waits at most
until ``seconds`` after the first one, then raises HTTPException(408), which FastAPI's exception
handling turns into the response. It says ``Connection: close``: the unread body cannot be skipped, so
the server closes the connection once the 408 is sent, however long the client goes on sending
(serve/lingering.py).
After the body, ``receive`` is passed through untouched (it then waits for a disconnect, for as long
as a response streams).
"""
from __future__ import annotations

import asyncio
import sys

from starlette.exceptions import HTTPException

BODY_TIMEOUT = 20.0  # seconds for a whole request body: 8 MB (the upload cap) at ~400 KB/s
CLOSE = {"Connection": "close"}  # the answer to a body left unread ends its connection


class BodyTimeout:
    def __init__(self, app, seconds: float = BODY_TIMEOUT):
        if not seconds > 0:
            raise ValueError(f"the body timeout must be > 0 seconds, got {seconds}")
        self.app, self.seconds = app, seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        deadline: float | None = None
        done = False
        loop = asyncio.get_running_loop()

        async def timed_receive():
            nonlocal deadline, done
            if done:
                return await receive()
            if deadline is None:
                deadline = loop.time() + self.seconds
            try:
                message = await _before(receive(), deadline)
            except asyncio.TimeoutError:
                done = True  # the handler's later receive() calls wait for the disconnect as usual
                raise HTTPException(408, f"the request body did not arrive within {self.seconds:g} s",
                                    headers=CLOSE) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        return await self.app(scope, timed_receive, send)


if sys.version_info >= (3, 11):
    async def _before(awaitable, deadline: float):
        """``awaitable``'s result, or TimeoutError at ``deadline`` (the loop's clock): a timer on the
        request's own task, where ``wait_for`` starts a task of its own for each call."""
        async with asyncio.timeout_at(deadline):
            return await awaitable
else:
    async def _before(awaitable, deadline: float):
        return await asyncio.wait_for(awaitable, max(0.0, deadline - asyncio.get_running_loop().time()))
