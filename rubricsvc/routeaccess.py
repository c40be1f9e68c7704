"""Routes declared open: reachable without an API key, and why.

The API's key gate (``rubricsvc.api.auth``) admits a request to a route only with a key
holding the route's scope, unless the route declares itself open here: with the dependency
``OpenCheck(reason)`` (``rubricsvc.api.deps.public``), or ``mark_open`` for a route that has no
dependencies (FastAPI's docs pages, a static mount). The review pages declare themselves open
to the gate because each checks its own signed-in session; they import this module, not the
API package, which imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Open:
    """A route the gate lets through without a key, and why (say who may use it)."""

    reason: str


# Where ``mark_open`` records a route's ``Open`` when it has no dependencies to declare it in.
_OPEN_ATTRIBUTE = "rubricsvc_open"


class OpenCheck:
    """The dependency that declares a route open; it checks nothing."""

    def __init__(self, reason: str) -> None:
        if not reason.strip():
            raise ValueError("say why the route is open: who may use it without a key")
        self.open = Open(reason)

    async def __call__(self) -> None:
        return None


def mark_open(route: Any, reason: str) -> None:
    """Declare open a route that has no dependencies (the docs pages, a static mount)."""
    setattr(route, _OPEN_ATTRIBUTE, Open(reason))


def declared_open(route: Any) -> Open | None:
    """The ``Open`` that ``mark_open`` gave ``route``, if any."""
    marked = getattr(route, _OPEN_ATTRIBUTE, None)
    return marked if isinstance(marked, Open) else None
