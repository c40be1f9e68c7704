"""Deterministic check criteria."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.readers.checks import (
    UnsupportedPattern,
    compile_pattern,
    regex_found,
    run_check,
    word_count,
)

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


# -- regular expressions run on RE2: linear in the response, whatever the pattern -----------

PATHOLOGICAL = r"^(\w+\s?)+$"  # exponential for a backtracking engine on "aaa...a!"

_BOUND_SCRIPT = """
import sys
from rubricsvc.judging.readers.checks import run_check
from rubricsvc.rubrics.schemas import RubricSpec

pattern = sys.argv[1]
spec = RubricSpec.model_validate(
    {"name": "t", "criteria": [
        {"text": "words", "weight": 1, "kind": "check", "check": {"type": "regex", "pattern": pattern}}
    ]}
)
check = spec.criteria[0].check.model_dump()
response = "a" * 100_000 + "!"
print(run_check(check, response), run_check(check, response + "\\n"), run_check(check, "a" * 100_000))
"""


def test_a_pathological_pattern_is_decided_within_a_bound() -> None:
    # In a child process, so that a backtracking engine fails by the timeout instead of
    # hanging the run (a regex engine does not return to Python to take a signal).
    try:
        result = subprocess.run(
            [sys.executable, "-c", _BOUND_SCRIPT, PATHOLOGICAL],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{PATHOLOGICAL!r} on 100,000 characters did not finish in 60 s")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "True"]


@pytest.mark.parametrize(
    ("pattern", "response", "found"),
    [
        (r"end\.$", "The end.\n", True),  # $ before a final newline, as in Python
        (r"end\.$", "The end.\n\n", False),
        (r"end\.\Z", "The end.\n", False),  # \Z: the very end only
        (r"end\.\Z", "The end.", True),
        (r"end\.\z", "The end.\n", False),
        (r"^second$", "first\nsecond\nthird", False),  # ^ and $ anchor the whole response
        (r"(?m)^second$", "first\nsecond\nthird", True),
        (r"(?s)first.second", "first\nsecond", True),
        (r"first.second", "first\nsecond", False),
        (r"^ab{,2}c$", "abbc", True),  # Python's {,n} is {0,n}
        (r"^ab{,2}c$", "abbbc", False),
        (r"[{,2}]", ",", True),  # ...but not inside a class
        (r"\bsources?\b", "See the sources.", True),
        (r"\\Z", "a\\Z", True),  # an escaped backslash, then Z
        (r"(?P<word>\w+) again", "hello again", True),
        (r"(?i)PARIS", "paris", True),
    ],
)
def test_regex_semantics(pattern: str, response: str, found: bool) -> None:
    assert regex_found(pattern, response) is found
    assert run_check({"type": "regex", "pattern": pattern}, response) is found


def test_ignore_case_maps_to_re2() -> None:
    assert regex_found("as an ai", "As An AI", ignore_case=True)
    assert not regex_found("as an ai", "As An AI")
    assert run_check({"type": "regex", "pattern": "ÉTÉ", "ignore_case": True}, "un été") is True


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(?=.*sources)", "lookahead (?=...)"),
        (r"^(?!As an AI)", "negative lookahead (?!...)"),
        (r"(?<=\$)\d+", "lookbehind (?<=...)"),
        (r"(?<!not )good", "negative lookbehind (?<!...)"),
        (r"(\w+) \1", r"backreference \1"),
        (r"(?P<w>\w+) (?P=w)", "named backreference (?P=name)"),
        (r"(?>a+)b", "atomic group (?>...)"),
        (r"a++b", "possessive quantifier ++"),
        (r"a{2,3}+", "possessive quantifier {2,3}+"),
        (r"(?x) a b", "verbose flag (?x)"),
        (r"\u00e9", r"escape \uXXXX"),
    ],
)
def test_constructs_re2_lacks_are_named(pattern: str, construct: str) -> None:
    with pytest.raises(UnsupportedPattern) as caught:
        compile_pattern(pattern)
    message = str(caught.value)
    assert message.startswith(f"invalid regular expression: {construct}")
    assert "linear time" in message and "\n" not in message


def test_a_stored_pattern_re2_cannot_run_stops_with_one_line() -> None:
    # Saved before checks ran on RE2: the run stops rather than backtrack on a response.
    with pytest.raises(ValidationFailed, match=r"lookahead .* save a new version") as caught:
        run_check({"type": "regex", "pattern": "(?=x)"}, "x")
    assert "\n" not in str(caught.value)


def test_word_count_is_runs_of_non_whitespace() -> None:
    text = "one\u00a0two\tthree\u2003four  five\n\u3000six"
    assert word_count(text) == len(re.findall(r"\S+", text)) == 6
