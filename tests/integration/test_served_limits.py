"""What a client can hold of a real `rubricsvc serve`, and what it can make it write: a
connection that sends nothing, trickles its headers or its body, or idles between requests is
closed after its time-out; connections past the cap are refused at once, and /healthz answers
again once the idle ones are timed out; a client that hangs up mid-body costs one short log
line, never a traceback; and every kind of response says ``X-Content-Type-Options: nosniff``.

One server for the module, its limits small (a second, a few connections) so that it runs in
seconds; loopback only, every loop bounded.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import httpx  # noqa: E402

from rubricsvc.apikeys import create_key  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from tests.servers import RubricsvcServer  # noqa: E402

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
BODY_MIN_RATE = 1000  # bytes per second
KEEP_ALIVE_TIMEOUT = 1
MAX_CONNECTIONS = 16
SLACK = 1.5  # what a busy test machine may add to a time-out, at most
LIMITS = {
    "RUBRICSVC_API_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
    "RUBRICSVC_API_BODY_TIMEOUT": str(BODY_TIMEOUT),
    "RUBRICSVC_API_BODY_MIN_RATE": str(BODY_MIN_RATE),
    "RUBRICSVC_API_KEEP_ALIVE_TIMEOUT": str(KEEP_ALIVE_TIMEOUT),
    "RUBRICSVC_API_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
}


@dataclass
class Served:
    server: RubricsvcServer
    port: int
    secret: str

    def log_size(self) -> int:
        return self.server.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with self.server.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")


@pytest.fixture(scope="module")
def served(
    migrated_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("served-limits")
    shutil.copy(migrated_sqlite_template, folder / "rubricsvc.sqlite")
    url = f"sqlite:///{folder / 'rubricsvc.sqlite'}"
    engine = make_engine(url)
    with session_scope(engine) as session:
        secret = create_key(session, "limits-admin", ["admin"]).secret
    engine.dispose()
    server = RubricsvcServer(url, log_path=folder / "serve.log", env=LIMITS)
    server.start()
    try:
        yield Served(server, server.port, secret)
    finally:
        server.stop()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(0.1)
    return sock


def read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, float | None]:
    """What the server sent until it closed the connection, and how long that took from now
    (None: still open after ``within`` seconds)."""
    started = time.monotonic()
    received = b""
    while time.monotonic() - started < within:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received, time.monotonic() - started
        if not data:
            return received, time.monotonic() - started
        received += data
    return received, None


def trickle(sock: socket.socket, data: bytes, every: float, within: float) -> tuple[bytes, float]:
    """Send ``data`` a byte every ``every`` seconds, reading what comes back, until the
    server closes the connection; what it sent, and when it closed (from now). Fails if it
    is still open after ``within`` seconds."""
    started = time.monotonic()
    received = b""
    for byte in data:
        if time.monotonic() - started > within:
            break
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return received, time.monotonic() - started
        rest, closed = read_until_closed(sock, every)
        received += rest
        if closed is not None:
            return received, time.monotonic() - started
    raise AssertionError(f"still open after {time.monotonic() - started:.1f} s: {received!r}")


def request_head(method: str, path: str, secret: str | None = None, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    if secret:
        lines.append(f"Authorization: Bearer {secret}")
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_of(received: bytes) -> int | None:
    if not received.startswith(b"HTTP/1.1 "):
        return None
    return int(received[9:12])


def nosniff(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    return [value for name, value in headers if name.lower() == b"x-content-type-options"]


def raw_headers(received: bytes) -> list[tuple[bytes, bytes]]:
    head = received.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
    pairs = [line.split(b":", 1) for line in head]
    return [(name.strip(), value.strip()) for name, value in pairs]


def wait_until_healthy(port: int, within: float) -> float | None:
    """Seconds until /healthz answers 200 (None: not within ``within``)."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)
            if response.status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return None


def test_a_connection_that_sends_nothing_is_closed_after_the_header_time_out(
    served: Served,
) -> None:
    with connect(served.port) as sock:
        received, closed = read_until_closed(sock, HEADER_TIMEOUT + SLACK)
    assert closed is not None, "an idle connection was still open"
    assert closed >= HEADER_TIMEOUT - 0.2
    assert received == b""  # no request began: nothing to answer


def test_headers_trickled_a_byte_at_a_time_are_cut_at_the_header_time_out(
    served: Served,
) -> None:
    head = request_head("GET", "/healthz", X_Padding="a" * 200)
    with connect(served.port) as sock:
        received, closed = trickle(sock, head, every=0.1, within=HEADER_TIMEOUT + SLACK)
    assert HEADER_TIMEOUT - 0.2 <= closed <= HEADER_TIMEOUT + SLACK
    assert status_of(received) in {408, None}, received  # 408 where it could be sent
    if received:
        assert nosniff(raw_headers(received)) == [b"nosniff"]


def test_headers_that_keep_coming_past_the_size_limit_are_refused_with_431(
    served: Served,
) -> None:
    # A head that never ends, sent as fast as it goes, against 64 KiB (the default): the
    # server holds no more of it than that (and one read).
    head = request_head("GET", "/healthz")[:-2] + b"X-Padding: "
    received, closed = b"", None
    with connect(served.port) as sock:
        sock.sendall(head)
        for _ in range(64):  # 512 KiB at most
            try:
                sock.sendall(b"a" * 8192)
            except (BrokenPipeError, ConnectionResetError):
                break
            received, closed = read_until_closed(sock, 0.01)
            if closed is not None:
                break
        if closed is None:
            received, closed = read_until_closed(sock, 5)
    assert closed is not None, "a head of 512 KiB was still being read"
    assert status_of(received) in {431, None}, received[:200]
    if received:
        assert nosniff(raw_headers(received)) == [b"nosniff"]


def reward_head(served: Served, body: bytes) -> bytes:
    """The line and headers of a /v1/rewards request whose body is ``body``."""
    return request_head(
        "POST",
        "/v1/rewards",
        served.secret,
        Content_Type="application/json",
        Content_Length=str(len(body)),
    )


def test_a_body_trickled_below_the_minimum_rate_is_cut_with_408(served: Served) -> None:
    body = b'{"items": [{"prompt_id": "nope", "completion": "' + b"x" * 300 + b'"}]}'
    head = reward_head(served, body)
    with connect(served.port) as sock:
        sock.sendall(head)
        # 10 bytes a second against 1000: cut about BODY_TIMEOUT seconds in.
        received, closed = trickle(sock, body, every=0.1, within=BODY_TIMEOUT + SLACK)
    assert closed <= BODY_TIMEOUT + SLACK
    assert status_of(received) in {408, None}, received
    if received:
        assert nosniff(raw_headers(received)) == [b"nosniff"]


def test_a_slow_body_above_the_minimum_rate_is_read_whole(served: Served) -> None:
    # About 1500 bytes a second for 2 s: longer than BODY_TIMEOUT, faster than the minimum.
    body = b'{"items": [{"prompt_id": "nope", "completion": "' + b"x" * 3000 + b'"}]}'
    head = reward_head(served, body)
    started = time.monotonic()
    with connect(served.port) as sock:
        sock.sendall(head)
        for at in range(0, len(body), 100):
            sock.sendall(body[at : at + 100])
            time.sleep(0.066)
        received = b""
        while b"\r\n\r\n" not in received and time.monotonic() - started < 10:
            try:
                received += sock.recv(65536)
            except TimeoutError:
                continue
    assert time.monotonic() - started > BODY_TIMEOUT
    assert status_of(received) == 404, received  # the route's own answer: no such prompt


def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_time_out(
    served: Served,
) -> None:
    with connect(served.port) as sock:
        sock.sendall(request_head("GET", "/healthz"))
        received = b""
        deadline = time.monotonic() + 5
        while not received.endswith(b"}") and time.monotonic() < deadline:
            try:
                received += sock.recv(65536)
            except TimeoutError:
                continue
        assert status_of(received) == 200, received
        rest, closed = read_until_closed(sock, KEEP_ALIVE_TIMEOUT + SLACK)
    assert closed is not None, "an idle kept-alive connection was still open"
    assert closed >= KEEP_ALIVE_TIMEOUT - 0.2
    assert rest == b""


def test_connections_past_the_cap_are_refused_at_once_and_healthz_answers_once_idle_ones_time_out(
    served: Served,
) -> None:
    assert wait_until_healthy(served.port, 5) is not None
    idle = [connect(served.port) for _ in range(MAX_CONNECTIONS)]
    opened = time.monotonic()
    try:
        # Past the cap, each new connection is answered 503 and closed at once: it is not
        # left to hold a file descriptor until it times out.
        for _ in range(50):
            with connect(served.port) as sock:
                received, closed = read_until_closed(sock, 0.5)
            assert closed is not None and closed < 0.5, "a connection past the cap was held"
            assert status_of(received) in {503, None}, received
            if received:
                assert nosniff(raw_headers(received)) == [b"nosniff"]
                assert b"retry-after:" in received.lower()
        # /healthz too, for as long as the idle connections hold their places ...
        assert wait_until_healthy(served.port, 0.2) is None
        # ... which ends when they time out.
        healthy = wait_until_healthy(served.port, HEADER_TIMEOUT + SLACK)
        assert healthy is not None, "/healthz did not answer once the idle connections timed out"
        assert time.monotonic() - opened >= HEADER_TIMEOUT - 0.2
        for sock in idle:
            rest, closed = read_until_closed(sock, 0.5)
            assert closed is not None and rest == b""
    finally:
        for sock in idle:
            sock.close()


def test_clients_that_hang_up_mid_body_cost_a_short_line_each_at_most(served: Served) -> None:
    offset = served.log_size()
    routes = [
        ("/v1/rewards", "application/json"),  # the direct reward path
        ("/v1/rewards", "text/plain"),  # FastAPI's route
        ("/v1/prompts", "application/json"),
        ("/v1/score-jobs", "application/json"),
        ("/ui/login", "application/x-www-form-urlencoded"),
    ]
    dropped = 0
    for _ in range(4):
        for path, content_type in routes:
            head = request_head(
                "POST", path, served.secret, Content_Type=content_type, Content_Length="1000"
            )
            with connect(served.port) as sock:
                sock.sendall(head + b'{"items": [')
                time.sleep(0.05)  # the app is reading the body when the client goes
            dropped += 1
    assert wait_until_healthy(served.port, 5) is not None
    time.sleep(0.3)
    log = served.log_since(offset)
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[:3000]
    lines = [
        line
        for line in log.splitlines()
        if line.strip() and "GET /healthz" not in line  # the access log's lines of the check
    ]
    assert len(lines) <= dropped, "\n".join(lines)
    assert all(len(line) < 200 for line in lines), "\n".join(lines)


def test_every_kind_of_response_says_nosniff(served: Served) -> None:
    key = {"Authorization": f"Bearer {served.secret}"}
    with httpx.Client(base_url=served.server.base_url, timeout=10) as client:
        answers = {
            "healthz": client.get("/healthz"),
            "json": client.get("/v1/prompts", headers=key),
            "not found": client.get("/nowhere"),
            "no key (the gate)": client.get("/v1/prompts"),
            "docs page": client.get("/docs"),
            "review page": client.get("/ui/login"),
            "redirect": client.get("/ui/", follow_redirects=False),
            "direct reward": client.post(
                "/v1/rewards", json={"items": [{"prompt_id": "nope", "completion": "x"}]},
                headers=key,
            ),
            "invalid body": client.post("/v1/rewards", json={"items": "no"}, headers=key),
        }  # fmt: skip
    seen = {
        name: response.headers.get_list("x-content-type-options")
        for name, response in answers.items()
    }
    assert seen == {name: ["nosniff"] for name in answers}, seen
    statuses = {name: response.status_code for name, response in answers.items()}
    assert statuses["no key (the gate)"] == 401
    assert statuses["direct reward"] == 404 and statuses["invalid body"] == 422
    # A body declared over the size limit (refused before it is read), and the server's own
    # answer to a request it cannot parse.
    too_large = request_head(
        "POST", "/v1/prompts", served.secret, Content_Type="application/json",
        Content_Length="999999999",
    )  # fmt: skip
    for request, status in ((too_large, 413), (b"NOT HTTP AT ALL\r\n\r\n", 400)):
        with connect(served.port) as sock:
            sock.sendall(request)
            received = b""
            deadline = time.monotonic() + 5
            while b"\r\n\r\n" not in received and time.monotonic() < deadline:
                try:
                    received += sock.recv(65536)
                except TimeoutError:
                    continue
        assert status_of(received) == status, received
        assert nosniff(raw_headers(received)) == [b"nosniff"], received
