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
import time

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

        async def timed_receive():
            nonlocal deadline, done
            if done:
                return await receive()
            if deadline is None:
                deadline = time.monotonic() + self.seconds
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                done = True  # the handler's later receive() calls wait for the disconnect as usual
                raise HTTPException(408, f"the request body did not arrive within {self.seconds:g} s",
                                    headers=CLOSE) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        return await self.app(scope, timed_receive, send)
