"""Prometheus metrics of one app: requests, latency, judgments, cache hits, failures.

Each app has its own registry (several apps in one process, as in tests, do not collide).
Route labels are route templates (``/v1/rubrics/{name}``), never raw paths, so the number
of series stays bounded whatever clients send.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import quote

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rubricsvc.api.logs import LogTally

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The status a request is counted with when its client went away before it was answered
# (nginx's "client closed request"): nothing was sent.
CLIENT_GONE = 499
# One line, never a traceback, for a client that goes mid-request: at a client's pace, so
# tallied (``LogTally``).
GONE = LogTally(
    logging.getLogger("uvicorn.error"),
    logging.INFO,
    "clients gone before their request was answered",
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "rubricsvc_http_requests",
            "HTTP requests by route template, method and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "rubricsvc_http_request_duration_seconds",
            "Time to answer an HTTP request.",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        self.judgments = Counter(
            "rubricsvc_judgments",
            "Judgments needed by requests served here, by judge and outcome "
            "(computed, cached: a cache hit, failed).",
            ["judge", "outcome"],
            registry=self.registry,
        )
        self.failures = Counter(
            "rubricsvc_judgment_failures",
            "Failed judgments by judge and by who caused them (infrastructure, judge, response).",
            ["judge", "failure_class"],
            registry=self.registry,
        )
        self.rewards = Counter(
            "rubricsvc_rewards",
            "Rewards returned, by judge and whether they have a value (ok) or are null.",
            ["judge", "outcome"],
            registry=self.registry,
        )

    def count_judgments(self, judge: str, computed: int, cached: int, failed: int) -> None:
        for outcome, n in (("computed", computed), ("cached", cached), ("failed", failed)):
            if n:
                self.judgments.labels(judge, outcome).inc(n)

    def count_failures(self, judge: str, failures: dict[str, int]) -> None:
        for name, n in failures.items():
            if n:
                self.failures.labels(judge, name).inc(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every request by its route template (pure ASGI: no body buffering).

    The app's outermost layer, so also where a client gone mid-request ends: starlette's
    ``ClientDisconnect`` (raised where a route reads a body the client stopped sending) stops
    here, and such a request, like one the app left unanswered because its client went
    (the direct reward path), is counted as 499 and written as one short line instead of
    uvicorn's "Exception in ASGI application" and its traceback."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0  # no answer yet

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except ClientDisconnect:
            pass  # the client is gone: nobody to answer, nothing to report but a line
        except BaseException:
            status = status or 500  # the server's answer (starlette's error middleware)
            raise
        finally:
            if not status:
                status = CLIENT_GONE
                GONE.note(
                    '%s - "%s %s" %d: the client went away before it was answered',
                    _client(scope),
                    scope.get("method", ""),
                    quote(scope.get("path", "")),
                    CLIENT_GONE,
                )
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "(unmatched)"
            count, latency = self._series(scope.get("method", ""), template, status)
            count.inc()
            latency.observe(time.perf_counter() - started)

    def _series(self, method: str, template: str, status: int) -> tuple[Any, Any]:
        """The request counter's and the latency histogram's series of a request, looked up
        once per (method, route, status): ``labels()`` checks its arguments and takes a lock
        each time, a good part of a small request's own time. Bounded as the series are."""
        key = (method, template, status)
        series = self._children.get(key)
        if series is None:
            series = (
                self.metrics.requests.labels(method, template, str(status)),
                self.metrics.latency.labels(method, template),
            )
            self._children[key] = series
        return series


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "a client"
