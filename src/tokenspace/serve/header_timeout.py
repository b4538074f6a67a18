"""A deadline on reading a request's headers: a connection that opens and never finishes its request line
and headers (slowloris) is answered 408 and closed instead of being held forever.

uvicorn has no such timeout: its ``timeout_keep_alive`` runs only between requests (it starts after a
response and is cancelled by the first byte of the next request), ``limit_concurrency`` counts only
connections whose headers are complete, and h11's ``max_incomplete_event_size`` bounds the size of the
headers, not their time (200 half-sent requests stayed open in a fault probe). So this is uvicorn's h11
protocol with one timer: armed when a connection opens and when the first byte of a later request on a
kept-alive connection arrives, cancelled once the headers are complete (the body then has the app's own
deadline, body_timeout.py). The deadline is for the whole header block, not per byte, so trickling
bytes does not extend it. ``server_config`` always names this protocol, so installing httptools (which
uvicorn's "auto" would pick) cannot drop the timeout. The protocol also closes a connection whose body
was refused unread, after a lingering read (serve/lingering.py).
"""
from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from tokenspace.serve.lingering import LINGER, LingeringClose

HEADER_TIMEOUT = 10.0  # seconds from a request's first byte (or the connection) to its last header
_MESSAGE = b"the request headers did not arrive in time\n"
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(_MESSAGE), _MESSAGE))


def with_header_timeout(seconds: float = HEADER_TIMEOUT, linger: float = LINGER) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a ``seconds`` deadline on each request's headers (pass it as ``http=``),
    lingering at most ``linger`` seconds when it closes a connection whose body is still arriving."""
    if not seconds > 0:
        raise ValueError(f"the header timeout must be > 0 seconds, got {seconds}")
    if not linger > 0:
        raise ValueError(f"the linger time must be > 0 seconds, got {linger}")

    linger_s = linger

    class HeaderTimeoutH11(LingeringClose):
        header_timeout = float(seconds)
        linger = float(linger_s)
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._awaiting_headers():
                self._arm()  # the first byte of a later request on a kept-alive connection
            super().data_received(data)
            if not self._awaiting_headers():
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _awaiting_headers(self) -> bool:
            # their_state leaves IDLE once h11 has parsed a complete request line and headers
            return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(self.header_timeout, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if self._awaiting_headers():
                # written raw: h11 cannot send a response before it has a request; the connection ends here
                self.transport.write(TIMEOUT_RESPONSE)
                self.transport.close()

    return HeaderTimeoutH11
