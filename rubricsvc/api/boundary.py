"""Request input held to the input policy (``rubricsvc.inputpolicy``) before a route's schema
sees it, refused with 422 naming the field: a JSON body's text, keys, numbers and nesting,
every query and path parameter's text, and a query parameter given twice.

Python's JSON parser accepts much that no route can use: lone surrogates (``"\\ud800"``),
NUL, ``NaN`` and ``Infinity`` (or a literal such as ``1e999`` that overflows to it), integers
past 64 bits, a key given twice. They would otherwise get as far as a content hash, the
database (SQLite cannot bind an integer past 2**63, PostgreSQL refuses NaN and NUL) or a
score. ``CheckedRoute`` parses a JSON body once, checks it, and hands the parsed body on to
FastAPI, which then validates it against the route's schema as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from rubricsvc.inputpolicy import (
    GIVEN_TWICE,
    MAX_DEPTH,
    find_refusal,
    loads_json,
    repeated_name,
    text_problem,
)


def refused(location: tuple[str | int, ...], message: str) -> RequestValidationError:
    """The 422 of refused input at ``location`` (``("body", "items", 0, "completion")``)."""
    return RequestValidationError(
        [{"type": "input_policy", "loc": location, "msg": message, "input": None}]
    )


def check_data(data: Any, location: tuple[str | int, ...]) -> None:
    """Raise the 422 of the first refused input in ``data`` (parsed JSON, found at
    ``location``)."""
    found = find_refusal(data)
    if found is not None:
        raise refused((*location, *found.where), found.message)


def check_parameters(request: Request) -> None:
    """Raise the 422 of the first query or path parameter whose text the policy refuses, or
    of a query parameter given twice (``inputpolicy.repeated_name``)."""
    query = request.query_params.multi_items()
    for kind, items in (("path", list(request.path_params.items())), ("query", query)):
        for name, value in items:
            problem = text_problem(value) if isinstance(value, str) else None
            if problem is not None:
                raise refused((kind, name), problem)
    repeated = repeated_name(query)
    if repeated is not None:
        raise refused(("query", repeated), GIVEN_TWICE)


def is_json(content_type: str | bytes | None) -> bool:
    """Whether a body of this content type is read as JSON (FastAPI reads one without a
    content type as JSON)."""
    if not content_type:
        return True
    if isinstance(content_type, bytes):
        content_type = content_type.decode("latin-1")
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class CheckedRoute(APIRoute):
    """A route whose parameters, and JSON body, are held to the input policy before the
    route's schema sees them."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        has_body = self.body_field is not None

        async def checked(request: Request) -> Response:
            check_parameters(request)
            if has_body and is_json(request.headers.get("content-type")):
                body = await request.body()
                if body:
                    try:
                        data = loads_json(body)
                    except RecursionError:
                        raise refused(
                            ("body",), f"holds values nested more than {MAX_DEPTH} levels deep"
                        ) from None
                    except ValueError:
                        pass  # FastAPI parses it again and reports the error as it does
                    else:
                        check_data(data, ("body",))
                        request._json = data  # parsed once: FastAPI's request.json() returns it
            return await handler(request)

        return checked
