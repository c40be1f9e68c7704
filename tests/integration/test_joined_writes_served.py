"""uvicorn on ``JoinedWritesProtocol`` (what ``rubricsvc serve`` runs) answers every kind of
response whole and in order: small ones on a kept-alive connection, HEAD, a streamed one
whose headers and first chunk arrive before its next chunk is made, and a closed connection."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from rubricsvc.api.transport import JoinedWritesProtocol  # noqa: E402
from tests.servers import free_port  # noqa: E402

NEXT_CHUNK = threading.Event()  # set by the test once it has read the first chunk


async def answer(request: Request) -> Response:
    return JSONResponse({"reward": int(request.query_params.get("n", "0")) / 10})


async def stream(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"first;"
        await asyncio.to_thread(NEXT_CHUNK.wait, 30)
        yield b"second"

    return StreamingResponse(chunks(), media_type="text/plain")


async def short_stream(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"one;"
        yield b"two;"
        yield b"three"

    return StreamingResponse(chunks(), media_type="text/plain")


APP = Starlette(
    routes=[
        Route("/answer", answer, methods=["GET", "HEAD"]),
        Route("/stream", stream),
        Route("/short-stream", short_stream),
    ]
)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(
        APP, host="127.0.0.1", port=port, http=JoinedWritesProtocol, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def test_small_answers_on_one_kept_alive_connection_arrive_whole_and_in_order(
    base_url: str,
) -> None:
    with httpx.Client(base_url=base_url) as client:
        for n in range(50):
            response = client.get("/answer", params={"n": n})
            assert response.status_code == 200
            assert response.json() == {"reward": n / 10}
        head = client.head("/answer")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(b'{"reward":0.0}'))
        assert client.get("/answer", params={"n": 3}).json() == {"reward": 0.3}


def test_a_streamed_response_s_headers_are_not_held_for_its_next_chunk(base_url: str) -> None:
    NEXT_CHUNK.clear()
    port = int(base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: test\r\n\r\n")
        received = b""
        while b"first;" not in received:  # times out (10 s) if held for the next chunk
            data = sock.recv(4096)
            assert data, "the server closed the connection"
            received += data
        assert received.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"second" not in received
        NEXT_CHUNK.set()
        while not received.endswith(b"0\r\n\r\n"):
            data = sock.recv(4096)
            assert data, "the server closed the connection"
            received += data
    assert b"second" in received


def read_until_closed(port: int, path: str) -> bytes:
    """The whole answer to GET ``path`` sent with ``Connection: close``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while data := sock.recv(4096):  # until the server closes the connection
            received += data
    return received


def test_a_connection_closed_after_its_answer_gets_the_whole_answer_first(base_url: str) -> None:
    port = int(base_url.rsplit(":", 1)[1])
    answer = read_until_closed(port, "/answer?n=7")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b'{"reward":0.7}')
    # Five writes in one step (the headers, three chunks, their end): the last is still held
    # when the connection closes.
    streamed = read_until_closed(port, "/short-stream")
    assert streamed.startswith(b"HTTP/1.1 200 OK\r\n")
    assert streamed.endswith(b"4\r\none;\r\n4\r\ntwo;\r\n5\r\nthree\r\n0\r\n\r\n")
