"""Numbers no route can use, refused with 422 naming where they are: ``NaN``, ``Infinity``
(or a literal such as ``1e999`` that overflows to it) and integers outside 64 bits.

Python's JSON parser accepts all of them, and they would otherwise get as far as the database
(SQLite cannot bind an integer past 2**63, PostgreSQL refuses NaN in JSON) or into a score.
``CheckedRoute`` parses a JSON body once, checks every number in it, and hands the parsed
body on to FastAPI, which then validates it against the route's schema as usual.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

INT64_MAX = 2**63 - 1


def bad_number(data: Any) -> tuple[tuple[str | int, ...], str] | None:
    """Where the first unusable number in parsed JSON is, and why; None if there is none."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                return where, f"must be a finite number, got {value}"
        elif isinstance(value, int):
            if not -INT64_MAX - 1 <= value <= INT64_MAX:
                return where, "integer out of range (more than 64 bits)"
        elif isinstance(value, dict):
            stack.extend(((*where, key), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*where, i), item) for i, item in reversed(list(enumerate(value))))
    return None


def check_numbers(data: Any, location: tuple[str | int, ...]) -> None:
    """Raise the 422 of the first unusable number in ``data`` (found at ``location``)."""
    found = bad_number(data)
    if found is not None:
        where, message = found
        raise RequestValidationError(
            [{"type": "finite_number", "loc": (*location, *where), "msg": message, "input": None}]
        )


def _is_json(request: Request) -> bool:
    content_type = request.headers.get("content-type")
    if not content_type:
        return True  # FastAPI reads a body without a content type as JSON
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class CheckedRoute(APIRoute):
    """A route whose JSON body has its numbers checked before the route's schema sees it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked(request: Request) -> Response:
            if _is_json(request):
                body = await request.body()
                if body:
                    try:
                        data = json.loads(body)
                    except (ValueError, RecursionError):
                        pass  # FastAPI parses it again and reports the error as it does
                    else:
                        check_numbers(data, ("body",))
                        request._json = data  # parsed once: FastAPI's request.json() returns it
            return await handler(request)

        return checked
