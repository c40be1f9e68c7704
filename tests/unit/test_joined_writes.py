"""Writes made back to back go out as one; a lone write goes out at the end of its step."""

from __future__ import annotations

import asyncio
from typing import Any

from rubricsvc.api.transport import JoinedWrites


class RecordingTransport:
    """The calls a transport was given, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def write_eof(self) -> None:
        self.calls.append(("write_eof", None))

    def close(self) -> None:
        self.closing = True
        self.calls.append(("close", None))

    def abort(self) -> None:
        self.closing = True
        self.calls.append(("abort", None))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000)}.get(name, default)


def joined() -> tuple[JoinedWrites, RecordingTransport]:
    inner = RecordingTransport()
    return JoinedWrites(inner, asyncio.get_running_loop()), inner  # type: ignore[arg-type]


def test_a_response_s_headers_and_body_go_out_in_one_write() -> None:
    async def main() -> list[tuple[str, Any]]:
        transport, inner = joined()
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert inner.calls == []  # held for what follows it
        assert transport.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b'{"rewards": [1.0]}')
        await asyncio.sleep(0)  # the held write's step ends: nothing is left to send
        return inner.calls

    assert asyncio.run(main()) == [("write", b'HTTP/1.1 200 OK\r\n\r\n{"rewards": [1.0]}')]


def test_a_lone_write_goes_out_when_its_step_ends() -> None:
    async def main() -> list[tuple[str, Any]]:
        transport, inner = joined()
        transport.write(b"headers of a streamed response")
        await asyncio.sleep(0)
        sent = list(inner.calls)
        transport.write(memoryview(b"first chunk"))
        await asyncio.sleep(0)
        return [*sent, *inner.calls[len(sent) :]]

    assert asyncio.run(main()) == [
        ("write", b"headers of a streamed response"),
        ("write", b"first chunk"),
    ]


def test_close_and_write_eof_send_what_is_held_first_and_abort_drops_it() -> None:
    async def main() -> tuple[list[tuple[str, Any]], ...]:
        closed, closed_inner = joined()
        closed.write(b"last answer")
        closed.close()
        ended, ended_inner = joined()
        ended.writelines([b"a", b"b"])
        ended.write_eof()
        aborted, aborted_inner = joined()
        aborted.write(b"never sent")
        aborted.abort()
        await asyncio.sleep(0)  # the held writes' steps end: nothing more goes out
        return closed_inner.calls, ended_inner.calls, aborted_inner.calls

    closed, ended, aborted = asyncio.run(main())
    assert closed == [("write", b"last answer"), ("close", None)]
    assert ended == [("write", b"ab"), ("write_eof", None)]
    assert aborted == [("abort", None)]


def test_everything_else_is_the_wrapped_transport_s() -> None:
    async def main() -> tuple[Any, bool]:
        transport, inner = joined()
        inner.closing = True
        return transport.get_extra_info("peername"), transport.is_closing()

    assert asyncio.run(main()) == (("127.0.0.1", 5000), True)
