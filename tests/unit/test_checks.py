"""Deterministic check criteria."""

from __future__ import annotations

import pytest

from rubricsvc.judging.checks import run_check

HAIKU = "Maple leaves let go\nthe cold wind carries them home\nbare branches at dusk"


@pytest.mark.parametrize(
    ("check", "response", "expected"),
    [
        ({"type": "regex", "pattern": r"^[^\n]+\n[^\n]+\n[^\n]+$"}, HAIKU, True),
        ({"type": "regex", "pattern": r"^[^\n]+\n[^\n]+\n[^\n]+$"}, HAIKU + "\n\nA note.", False),
        (
            {"type": "regex", "pattern": r"as an ai", "must_match": False, "ignore_case": True},
            "As an AI, I",
            False,
        ),
        ({"type": "regex", "pattern": r"as an ai", "must_match": False}, "As an AI, I", True),
        ({"type": "contains", "text": "PARIS"}, "The capital is Paris.", True),
        (
            {"type": "contains", "text": "PARIS", "ignore_case": False},
            "The capital is Paris.",
            False,
        ),
        ({"type": "not_contains", "text": "sorry"}, "Sorry, I cannot.", False),
        ({"type": "word_count", "max": 3}, "one two  three\n", True),
        ({"type": "word_count", "min": 4}, "one two three", False),
        ({"type": "char_count", "min": 3, "max": 5}, "abcd", True),
        ({"type": "char_count", "max": 3}, "abcd", False),
    ],
)
def test_check(check: dict[str, object], response: str, expected: bool) -> None:
    assert run_check(check, response) is expected
