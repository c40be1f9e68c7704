"""Looking registered things up by what they can do: the verdict modes and the judge backends
each declare their capabilities as attributes, and are found by them the same way."""

from __future__ import annotations

from collections.abc import Mapping


def names_with(registered: Mapping[str, object], wanted: Mapping[str, bool | None]) -> list[str]:
    """The names of the ``registered`` entries with each capability in ``wanted`` as asked
    (None: either), sorted."""
    return sorted(
        name
        for name, entry in registered.items()
        if all(getattr(entry, c) == value for c, value in wanted.items() if value is not None)
    )
