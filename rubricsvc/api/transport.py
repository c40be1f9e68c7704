"""One write per response: uvicorn's HTTP protocol on a transport that joins its writes.

uvicorn writes a response's status line and headers when the app starts the response, and
its body when the app sends it: two writes, each a system call of its own (uvloop sends a
write at once when nothing waits before it), and on the client's side two wake-ups for one
answer. A reward answer is a few hundred bytes and RL frameworks ask for them by the
thousand, one rollout per request, so the second call was a sizeable part of each one's
cost on both sides (B8, docs/benchmarks.md).

``JoinedWrites`` holds a write until the next write or the end of the event loop's current
step, whichever comes first, and sends what it holds with the next as one. A response whose
body follows its headers in the same step, which is every response that is not streamed,
goes out in one system call; a streamed response's headers go out at the end of the step
they were written in, before anything else happens on the loop. ``close`` sends what is held
first; ``abort`` drops it, as an aborted transport drops its own buffer.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.auto import AutoHTTPProtocol


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


class JoinedWritesProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """The HTTP protocol uvicorn would choose (httptools where installed, else h11), writing
    through ``JoinedWrites``. Passed to uvicorn as ``http=`` by ``rubricsvc serve``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        joined = JoinedWrites(cast(asyncio.Transport, transport), asyncio.get_running_loop())
        super().connection_made(joined)
