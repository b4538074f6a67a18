"""Closing a connection whose request body was not read to its end: the answer (a 408 or 413) is sent,
then the connection is closed for good, after a short lingering read so that the client can read it.

Two faults of a plain close, both seen in a fault probe. After a 408 for a body that trickles in
(``Content-Length: 8000000``, a byte every few seconds) uvicorn kept the connection: each byte that
arrived cancelled its keep-alive timer, so 50 such clients held 50 sockets. And a connection closed
while the client is still sending its body (a 413 for an 8 MB JSON body, a 9 MB upload) is answered by
the kernel with a TCP reset, which throws away the 413 before the client has read it.

So the 408 and 413 of the body middlewares say ``Connection: close``, and when uvicorn then closes a
connection whose request body its parser has not seen the end of, this transport sends the answer, shuts
its side down (the client reads the answer and then end of file) and reads and drops whatever still comes,
until the client closes or at most ``linger`` seconds have passed, then closes. The time is for the
whole lingering read: bytes that keep coming do not extend it.

Both of uvicorn's HTTP/1.1 protocols get it: ``LingeringClose`` (h11, pure Python) and
``LingeringCloseHttpTools`` (httptools, the C parser, where it is installed: serve/header_timeout.py
says which one the server runs).
"""
from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

LINGER = 2.0  # seconds a closed connection goes on reading (and dropping) what its client still sends


class _LingeringTransport:
    """The connection's transport as uvicorn's protocol sees it: ``close`` lingers when the request body
    is still arriving; everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, protocol: _Lingering):
        self._transport, self._protocol = transport, protocol
        self._closing = False
        self.draining = False
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not (self._protocol.body_unread() and self._transport.can_write_eof()):  # TLS cannot half-close
            self._transport.close()
            return
        self.draining = True
        self._transport.write_eof()  # after the answer still buffered: the client reads it, then EOF
        self._transport.resume_reading()  # uvicorn pauses reading while a body waits for the app
        self._timer = self._protocol.loop.call_later(self._protocol.linger, self._transport.close)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Lingering:
    """The lingering close over one of uvicorn's protocols (a mixin before it in the bases); the
    protocol says whether the request body is still arriving (``body_unread``)."""

    linger = LINGER
    transport: _LingeringTransport
    loop: asyncio.AbstractEventLoop

    def body_unread(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport) -> None:
        super().connection_made(_LingeringTransport(transport, self))

    def data_received(self, data: bytes) -> None:
        if self.transport.draining:  # the answer is sent: what still comes is dropped unread
            return
        super().data_received(data)

    def eof_received(self) -> None:
        if self.transport.draining:  # the client has sent its last byte: the socket can go now
            self.transport.cancel_timer()
            self.transport._transport.close()
            return
        super().eof_received()

    def connection_lost(self, exc) -> None:
        self.transport.cancel_timer()
        super().connection_lost(exc)


class LingeringClose(_Lingering, H11Protocol):
    """uvicorn's h11 protocol whose close after an unread body lingers (module doc)."""

    def body_unread(self) -> bool:
        return self.conn.their_state is h11.SEND_BODY


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: the h11 protocol serves
    LingeringCloseHttpTools = None
else:
    class LingeringCloseHttpTools(_Lingering, HttpToolsProtocol):
        """uvicorn's httptools protocol whose close after an unread body lingers (module doc): the body is
        unread from the end of a request's headers to the end of its message."""

        _body_open = False

        def on_headers_complete(self) -> None:
            self._body_open = True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._body_open = False
            super().on_message_complete()

        def body_unread(self) -> bool:
            return self._body_open
