"""The HTTP protocol of ``rubricsvc serve``: uvicorn's, writing each response once, and
bounding what one connection may hold.

One write per response. uvicorn writes a response's status line and headers when the app
starts the response, and its body when the app sends it: two writes, each a system call of
its own (uvloop sends a write at once when nothing waits before it), and on the client's side
two wake-ups for one answer. A reward answer is a few hundred bytes and RL frameworks ask for
them by the thousand, one rollout per request, so the second call was a sizeable part of each
one's cost on both sides (B8, docs/benchmarks.md).

``JoinedWrites`` holds a write until the next write or the end of the event loop's current
step, whichever comes first, and sends what it holds with the next as one. A response whose
body follows its headers in the same step, which is every response that is not streamed,
goes out in one system call; a streamed response's headers go out at the end of the step
they were written in, before anything else happens on the loop. ``close`` sends what is held
first; ``abort`` drops it, as an aborted transport drops its own buffer.

What a connection may hold (``ConnectionLimits``, from ``RUBRICSVC_API_...``, applied in each
server process by ``apply_limits``). uvicorn closes
a kept-alive connection idle between requests (``timeout_keep_alive``), but nothing else:
a connection that never sends a byte, or trickles its headers or its body, was held for ever,
and past the open-file limit the server accepted nothing, ``/healthz`` included. Here:

- a request's line and headers must arrive within ``header_timeout`` seconds of the
  connection opening (its first request: an idle connection is closed too) or of the
  request's first byte (a kept-alive connection's later requests); one still coming after
  ``max_header_bytes`` is refused (431: httptools itself would take any length);
- its body must arrive within ``body_timeout`` seconds plus one for every ``body_min_rate``
  bytes that arrived: a body sent at least that fast is never cut, a trickled one is cut
  about ``body_timeout`` seconds in. Time the server is not reading (the app has not asked
  for the body yet, or has not taken what was read) does not count;
- past a deadline, the client is answered 408 where it has a request and no answer yet, and the
  connection is closed;
- at ``max_connections`` open connections a new one is answered 503 (``Retry-After: 1``) and
  closed at once: it does not hold a file descriptor, and the connections already open, the
  slow ones among them, are bounded by the time-outs, so a server flooded with idle
  connections answers again (``/healthz`` too) as soon as they time out.

One timer per connection, armed when it opens and re-armed from its own callback at most
every ``min(header_timeout, body_timeout)`` seconds; a request only moves a deadline (a float)
and its phase, so the time-outs cost a request no timer of its own, and a clock read only
where it does not arrive whole in one read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from rubricsvc.api.errors import error_body
from rubricsvc.api.logs import LogTally
from rubricsvc.config import ApiSettings

# Descriptors a server process keeps for itself below the open-file limit (the database,
# judge models, logs, the listening socket): connections get the rest, at most.
FILES_KEPT = 128

# What a connection is reading: the deadline it is held to.
IDLE = 0  # nothing yet since it opened: the first request's headers, from the opening
HEAD = 1  # a request's line and headers, from its first byte
BODY = 2  # a request's body, by the amount that arrived
DONE = 3  # nothing: the app has the request (uvicorn's keep-alive time-out follows it)
UPGRADED = 4  # nothing: the connection is a WebSocket's

_log = logging.getLogger("uvicorn.error")
REFUSED = LogTally(
    _log, logging.WARNING, "connections refused: the server is at its cap of open connections"
)
TIMED_OUT = LogTally(
    _log, logging.INFO, "connections closed: a request's headers or body arrived too slowly"
)
TOO_LARGE = LogTally(_log, logging.INFO, "connections closed: request headers over the size limit")


class JoinedWrites:
    """An ``asyncio.Transport`` whose writes made back to back go out as one (see the
    module's docstring); everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is None:
            self._held = bytes(data)
            self._loop.call_soon(self._send_held)
            return
        held, self._held = self._held, None
        self._transport.write(held + data)

    def writelines(self, lines: Any) -> None:
        # Through ``write``: the wrapped transport's own would overtake what is held.
        self.write(b"".join(lines))

    def _send_held(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def write_eof(self) -> None:
        self._send_held()
        self._transport.write_eof()

    def close(self) -> None:
        self._send_held()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # Reading, pausing, extra info, set_protocol, is_closing: the wrapped transport's.
        return getattr(self._transport, name)


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may hold of a server process (see the module's docstring; the
    settings of the same names in ``ApiSettings``)."""

    header_timeout: float
    body_timeout: float
    body_min_rate: int  # bytes per second; 0: the whole body within body_timeout
    max_header_bytes: int
    max_connections: int  # lowered to fit the open-file limit (``connection_cap``)

    @classmethod
    def from_settings(cls, api: ApiSettings) -> ConnectionLimits:
        return cls(
            header_timeout=api.header_timeout,
            body_timeout=api.body_timeout,
            body_min_rate=api.body_min_rate,
            max_header_bytes=api.max_header_bytes,
            max_connections=connection_cap(api.max_connections)[0],
        )


def connection_cap(wanted: int) -> tuple[int, int | None]:
    """``wanted`` open connections, lowered to what the process's open-file limit leaves
    (``FILES_KEPT`` kept), and that limit (None: none known): past it, the server would fail
    to accept anything, its health check included."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # not on Unix
        return wanted, None
    if soft == resource.RLIM_INFINITY:
        return wanted, None
    return max(1, min(wanted, soft - FILES_KEPT)), soft


@lru_cache(maxsize=1)
def default_limits() -> ConnectionLimits:
    """The settings' defaults (no environment read): a protocol no server gave limits."""
    return ConnectionLimits.from_settings(ApiSettings.model_construct())


def apply_limits(api: ApiSettings) -> ConnectionLimits:
    """Hold this process's connections to ``api``'s limits: ``rubricsvc serve`` calls it in
    each server process (settings are read only where a process starts, not per connection)."""
    limits = ConnectionLimits.from_settings(api)
    JoinedWritesProtocol.limits = limits
    return limits


class JoinedWritesProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through ``JoinedWrites`` and holding each
    connection to ``limits`` (see the module's docstring). Passed to uvicorn as ``http=`` by
    ``rubricsvc serve``. httptools, not h11: the deadlines follow its request cycles."""

    # Set in each server process by ``apply_limits``; None: ``default_limits()``.
    limits: ClassVar[ConnectionLimits | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits = self.limits or default_limits()
        # The timer's longest sleep: a deadline set later is never earlier than its wake-up.
        self._period = min(limits.header_timeout, limits.body_timeout)
        self._reading = IDLE
        self._deadline = 0.0  # (loop time) when what is being read must be in
        self._head_bytes = 0
        self._body_since = 0.0
        self._body_bytes = 0
        self._watch: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        refuse = len(self.connections) >= self._limits.max_connections
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods; so
        # has JoinedWrites.
        joined = JoinedWrites(transport, self.loop)
        super().connection_made(cast(asyncio.Transport, joined))
        if refuse:
            self._reading = DONE
            REFUSED.note(
                "connection from %s refused: %d connections open, the cap",
                _peer(self.client),
                self._limits.max_connections,
            )
            self._answer_and_close(
                503,
                "unavailable",
                "the server has too many open connections: try again",
                b"retry-after: 1\r\n",
            )
            return
        self._deadline = self.loop.time() + self._limits.header_timeout
        self._watch = self.loop.call_later(self._period, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # The phase is told from uvicorn's state after each read (a new cycle: a request's
        # headers are in; its more_body: its body is not), not from the parser's callbacks:
        # overriding those cost a small request 2.4 us of the server's CPU, this 0.7 us
        # (measured in process: 7.5 us before either).
        cycle = self.cycle
        super().data_received(data)
        reading = self._reading
        if reading == UPGRADED:
            return
        if self.cycle is not cycle:  # a request's headers came in, and its body or some
            if self.cycle.more_body:
                self._reading = BODY
                self._body_since = now = self.loop.time()
                self._body_bytes = 0
                self._deadline = now + self._limits.body_timeout
            else:
                self._reading = DONE
        elif reading == BODY:
            if cycle.more_body:
                self._body_bytes += len(data)
            else:
                self._reading = DONE
        elif reading == DONE:  # a kept-alive connection's next request: from its first byte
            self._reading = HEAD
            self._head_bytes = len(data)
            self._deadline = self.loop.time() + self._limits.header_timeout
        else:  # more of a request's line and headers (the first's: from the opening)
            self._reading = HEAD
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_header_bytes and not self.transport.is_closing():
                self._refuse_headers()

    def _refuse_headers(self) -> None:
        limit = self._limits.max_header_bytes
        TOO_LARGE.note(
            "connection from %s closed: request headers over %d bytes", _peer(self.client), limit
        )
        self._reading = DONE
        self._answer_and_close(
            431, "headers_too_large", f"the request's line and headers are over {limit} bytes"
        )

    def handle_websocket_upgrade(self) -> None:
        # The connection is the WebSocket protocol's from here (it has its own time-outs).
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._reading = UPGRADED
        super().handle_websocket_upgrade()

    def _check(self) -> None:
        """The connection's timer: closes it when what it is reading is late, else sleeps
        till its deadline, or ``_period`` at most."""
        self._watch = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        reading = self._reading
        if reading == BODY:
            limits = self._limits
            cycle = self.cycle
            if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
                # The server is not reading (the app has not asked for the body yet, or has
                # not taken what was read): not the client's time. Counted afresh from here.
                self._body_since, self._body_bytes = now, 0
            allowed = limits.body_timeout
            if limits.body_min_rate:
                allowed += self._body_bytes / limits.body_min_rate
            self._deadline = self._body_since + allowed
        if reading == UPGRADED:
            return
        if reading == DONE:
            delay = self._period
        elif now < self._deadline:
            delay = min(self._period, self._deadline - now)
        else:
            self._time_out(reading)
            return
        self._watch = self.loop.call_later(delay, self._check)

    def _time_out(self, reading: int) -> None:
        limits = self._limits
        if reading == IDLE:  # no request began: nobody to answer
            TIMED_OUT.note(
                "connection from %s closed: no request in %g s",
                _peer(self.client),
                limits.header_timeout,
            )
            self.transport.close()
            return
        part = "headers" if reading == HEAD else "body"
        TIMED_OUT.note(
            "connection from %s closed: the request's %s arrived too slowly",
            _peer(self.client),
            part,
        )
        cycle = self.cycle
        if reading == HEAD:
            # Answered only where nothing else is being written (a pipelined request's head).
            answer = cycle is None or cycle.response_complete
            message = f"the request's headers did not arrive within {limits.header_timeout:g} s"
        else:
            answer = not cycle.response_started
            message = f"the request's body did not arrive within {limits.body_timeout:g} s"
            if limits.body_min_rate:
                message += f" and at {limits.body_min_rate} bytes a second"
            # The app reading it hears that the client is gone; its answer goes nowhere.
            cycle.disconnected = True
            cycle.message_event.set()
        self._reading = DONE
        if answer:
            self._answer_and_close(408, "request_timeout", message)
        else:
            self.transport.close()

    def _answer_and_close(self, status: int, code: str, message: str, *headers: bytes) -> None:
        """An error of the API's shape, from the server itself, and the connection closed."""
        body = json.dumps(error_body(status, code, message)).encode()
        parts = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            parts += [name, b": ", value, b"\r\n"]
        parts.append(b"content-type: application/json\r\nconnection: close\r\n")
        parts += [b"content-length: %d\r\n" % len(body), *headers, b"\r\n", body]
        self.transport.write(b"".join(parts))
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"
