"""Deterministic criteria (kind ``check``): computed from the response text, no model involved."""

from __future__ import annotations

import re
from typing import Any


def word_count(text: str) -> int:
    return len(re.findall(r"\S+", text))


def run_check(check: dict[str, Any], response: str) -> bool:
    """Whether ``response`` meets ``check`` (a validated spec from the rubric schema)."""
    kind = check["type"]
    if kind == "regex":
        # No MULTILINE: ^ and $ anchor the whole response; a pattern can opt in with (?m).
        flags = re.IGNORECASE if check.get("ignore_case") else 0
        found = re.search(check["pattern"], response, flags) is not None
        return found if check.get("must_match", True) else not found
    if kind in {"contains", "not_contains"}:
        needle, haystack = check["text"], response
        if check.get("ignore_case", True):
            needle, haystack = needle.casefold(), haystack.casefold()
        return bool((needle in haystack) == (kind == "contains"))
    if kind in {"word_count", "char_count"}:
        size = word_count(response) if kind == "word_count" else len(response)
        low, high = check.get("min"), check.get("max")
        return (low is None or size >= low) and (high is None or size <= high)
    raise ValueError(f"unknown check type {kind!r}")
