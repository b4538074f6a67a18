"""A deadline on reading a request's headers: a connection that opens and never finishes its request line
and headers (slowloris) is answered 408 and closed instead of being held forever.

uvicorn has no such timeout: its ``timeout_keep_alive`` runs only between requests (it starts after a
response and is cancelled by the first byte of the next request), ``limit_concurrency`` counts only
connections whose headers are complete, and h11's ``max_incomplete_event_size`` bounds the size of the
headers, not their time (200 half-sent requests stayed open in a fault probe). So this is uvicorn's
protocol with one timer: armed when a connection opens and when the first byte of a later request on a
kept-alive connection arrives, cancelled once the headers are complete (the body then has the app's own
deadline, body_timeout.py). The deadline is for the whole header block, not per byte, so trickling
bytes does not extend it. The protocol also closes a connection whose body was refused unread, after a
lingering read (serve/lingering.py).

Two parsers: httptools (C; uvicorn's own choice where it is installed) and h11 (pure Python, always
there). ``with_header_timeout`` gives httptools' protocol where httptools imports: h11's parsing and
writing took ~0.15 ms of CPU per request on the event loop (a tenth of a cheap search's whole cost:
benchmarks/serve_load.py); uvicorn's ``http`` setting always names one of these two classes, so neither
parser runs without the timeout. h11 also caps a header block's size (16 KiB: a 400 and the connection
closed); httptools has no cap (it held a 74 MB header in memory within the deadline), so its protocol
here counts the bytes of an unfinished header block and answers past the same cap as h11 does.
"""
from __future__ import annotations

import asyncio

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE

from tokenspace.serve.lingering import LINGER, LingeringClose, LingeringCloseHttpTools

HEADER_TIMEOUT = 10.0  # seconds from a request's first byte (or the connection) to its last header
_MESSAGE = b"the request headers did not arrive in time\n"
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(_MESSAGE), _MESSAGE))
PARSERS = ("h11", "httptools") if LingeringCloseHttpTools is not None else ("h11",)  # the ones installed


class _HeaderTimer:
    """The header deadline over a lingering protocol (a mixin before it in the bases); the protocol says
    whether it waits for a request's headers (``awaiting_headers``)."""

    header_timeout = HEADER_TIMEOUT
    _header_timer: asyncio.TimerHandle | None = None

    def awaiting_headers(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if self.awaiting_headers():
            # written raw: the parser cannot send a response before it has a request; the connection ends here
            self.transport.write(TIMEOUT_RESPONSE)
            self.transport.close()


class _H11Timer(_HeaderTimer, LingeringClose):
    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.awaiting_headers():
            self._arm()  # the first byte of a later request on a kept-alive connection
        super().data_received(data)
        if not self.awaiting_headers():
            self._disarm()

    def awaiting_headers(self) -> bool:
        # their_state leaves IDLE once h11 has parsed a complete request line and headers
        return self.conn.their_state is h11.IDLE and not self.transport.is_closing()


if LingeringCloseHttpTools is not None:
    class _HttpToolsTimer(_HeaderTimer, LingeringCloseHttpTools):
        # httptools parses each byte as it comes: a request has begun (on_message_begin, its first byte)
        # and its headers are not complete (on_headers_complete)
        _headers_done = False
        _head_bytes = 0  # bytes of the unfinished header block so far
        _body_bytes = 0  # body bytes of the data being parsed (a chunk may end one request, begin the next)

        def data_received(self, data: bytes) -> None:
            self._body_bytes = 0
            super().data_received(data)
            if not self.awaiting_headers():
                self._head_bytes = 0
                self._disarm()
                return
            self._head_bytes += len(data) - self._body_bytes
            if self._head_bytes > (self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE):
                self._disarm()
                self.logger.warning("Invalid HTTP request received.")  # as uvicorn answers h11's refusal
                self.send_400_response("Invalid HTTP request received.")
            elif self._header_timer is None:
                self._arm()  # the first byte of a later request on a kept-alive connection

        def on_message_begin(self) -> None:
            self._headers_done = False
            self._head_bytes = 0
            super().on_message_begin()

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            super().on_body(body)

        def on_headers_complete(self) -> None:
            self._headers_done = True
            super().on_headers_complete()

        def awaiting_headers(self) -> bool:
            return not self._headers_done and not self.transport.is_closing()

        def _expire(self) -> None:
            if self.awaiting_headers() and self.cycle is not None and not self.cycle.response_complete:
                # a pipelined request's headers stalled behind a response still being written: no 408
                # in the middle of it; the connection closes once that response is out
                self._header_timer = None
                self.cycle.keep_alive = False
                return
            super()._expire()


def with_header_timeout(seconds: float = HEADER_TIMEOUT, linger: float = LINGER, parser: str | None = None) -> type:
    """uvicorn's protocol with a ``seconds`` deadline on each request's headers (pass it as ``http=``),
    lingering at most ``linger`` seconds when it closes a connection whose body is still arriving.
    ``parser``: "httptools" or "h11" (default: httptools where it is installed, else h11)."""
    if not seconds > 0:
        raise ValueError(f"the header timeout must be > 0 seconds, got {seconds}")
    if not linger > 0:
        raise ValueError(f"the linger time must be > 0 seconds, got {linger}")
    parser = parser or PARSERS[-1]
    if parser not in PARSERS:
        raise ValueError(f"parser must be one of {', '.join(PARSERS)} (installed), got {parser!r}")
    base, name = (_HttpToolsTimer, "HeaderTimeoutHttpTools") if parser == "httptools" else (_H11Timer, "HeaderTimeoutH11")
    return type(name, (base,), {"header_timeout": float(seconds), "linger": float(linger)})
