"""Deterministic criteria (kind ``check``): computed from the response text (or, for
``tool_loop`` and ``tool_errors_ignored``, the trajectory), no model involved.

The response is written by the policy being trained, so every check runs in time linear in its
length: regular expressions run on RE2 (no backtracking), ``contains`` is CPython's substring
search (linear since 3.10) and the counts are single passes.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import re2

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.readers.trajectory import (
    all_tool_calls,
    is_tool_result,
    looks_like_error,
    message_text,
    tool_calls,
)

# What RE2 lacks, by the start of its error message: lookarounds, backreferences, atomic and
# conditional groups, possessive quantifiers (all of which need backtracking), and a few of
# Python's own spellings.
_UNSUPPORTED = [
    ("invalid perl operator: (?=", "lookahead (?=...)"),
    ("invalid perl operator: (?!", "negative lookahead (?!...)"),
    ("invalid perl operator: (?<=", "lookbehind (?<=...)"),
    ("invalid perl operator: (?<!", "negative lookbehind (?<!...)"),
    ("invalid perl operator: (?>", "atomic group (?>...)"),
    ("invalid perl operator: (?(", "conditional group (?(...)...)"),
    ("invalid perl operator: (?P", "named backreference (?P=name)"),
    ("invalid perl operator: (?#", "comment group (?#...)"),
    ("invalid perl operator: (?x", "verbose flag (?x)"),
    ("invalid perl operator: (?", "group or flag"),  # RE2's inline flags are i, m, s and U
    ("invalid escape sequence: \\u", "escape \\uXXXX (write \\x{XXXX})"),
    ("invalid escape sequence: \\U", "escape \\UXXXXXXXX (write \\x{XXXXXXXX})"),
    ("invalid escape sequence: \\N", "named character \\N{...} (write the character)"),
]
_BACKREFERENCE = re.compile(r"invalid escape sequence: (\\[1-9])")
_POSSESSIVE = re.compile(r"bad repetition operator: (\S+\+)$")
_UP_TO = re.compile(r"\{,\d+\}")


class UnsupportedPattern(ValueError):
    """A pattern RE2 cannot compile; ``str(err)`` is one line naming what it lacks."""


def _re2_syntax(pattern: str) -> tuple[str, bool]:
    """``pattern`` in RE2's syntax where Python's differs, and whether it anchors at the very end
    of the text: Python's ``\\Z`` is RE2's ``\\z``, and Python's ``{,n}`` (RE2 reads it as
    text) is ``{0,n}``."""
    out: list[str] = []
    anchors_end = in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escape = pattern[i : i + 2]
            if escape in {"\\Z", "\\z"} and not in_class:
                escape, anchors_end = "\\z", True
            out.append(escape)
            i += 2
            continue
        if in_class:
            # A ']' right after '[' or '[^' is a member, not the end of the class.
            in_class = not (char == "]" and out[-1] not in {"[", "[^"})
        elif char == "[":
            in_class = True
            if pattern.startswith("^", i + 1):
                char, i = "[^", i + 1
        elif char == "{" and _UP_TO.match(pattern, i):
            char = "{0"
        out.append(char)
        i += 1
    return "".join(out), anchors_end


def _describe(error: re2.error) -> str:
    """One line: the construct RE2 lacks, or RE2's own message for a malformed pattern."""
    arg = error.args[0] if error.args else ""
    message = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
    construct = None
    if found := _BACKREFERENCE.match(message):
        construct = f"backreference {found[1]}"
    elif found := _POSSESSIVE.match(message):
        construct = f"possessive quantifier {found[1]}"
    else:
        construct = next((name for start, name in _UNSUPPORTED if message.startswith(start)), None)
        if construct == "group or flag":
            construct += f" {message.removeprefix('invalid perl operator: ')} (flags: i, m, s, U)"
    if construct is None:
        return message or "RE2 cannot compile it"
    return f"{construct} is not supported: checks run on RE2, which matches in linear time"


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str, ignore_case: bool = False) -> tuple[re2._Regexp, bool]:
    """``pattern`` compiled with RE2, and whether it anchors at the very end of the text.

    Raises :class:`UnsupportedPattern` with one line naming the construct RE2 lacks
    (lookarounds, backreferences, atomic groups, possessive quantifiers, ...)."""
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.never_capture = True  # a check needs whether it matches, not where: the DFA alone
    options.log_errors = False  # the caller reports the error, on one line
    translated, anchors_end = _re2_syntax(pattern)
    try:
        return re2.compile(translated, options), anchors_end
    except re2.error as err:
        raise UnsupportedPattern(f"invalid regular expression: {_describe(err)}") from None


def regex_found(pattern: str, response: str, ignore_case: bool = False) -> bool:
    """Whether ``pattern`` matches anywhere in ``response``, as ``re.search`` would say.

    Without (?m), ``^`` and ``$`` anchor the whole response; as in Python, ``$`` also matches
    before a final newline (RE2's only at the very end, so a response ending in one is
    searched again without it).
    """
    regex, anchors_end = compile_pattern(pattern, ignore_case)
    if regex.search(response) is not None:
        return True
    if anchors_end or not response.endswith("\n"):
        return False
    return regex.search(response[:-1]) is not None


def word_count(text: str) -> int:
    return len(text.split())  # the same runs of non-whitespace as re's \S+, in one pass


def run_check(check: dict[str, Any], response: str) -> bool:
    """Whether ``response`` meets ``check`` (a validated spec from the rubric schema)."""
    kind = check["type"]
    if kind == "regex":
        try:
            found = regex_found(check["pattern"], response, bool(check.get("ignore_case")))
        except UnsupportedPattern as err:  # saved before checks ran on RE2
            raise ValidationFailed(
                f"check pattern {check['pattern']!r}: {err}; save a new version of the rubric "
                "with a pattern RE2 supports"
            ) from None
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


# Checks computed on the trajectory rather than the final answer.
TRAJECTORY_CHECKS = frozenset({"tool_loop", "tool_errors_ignored"})

# An answer "acknowledges" a failed tool call when it says so in words like these.
_ACKNOWLEDGMENTS = (
    "error",
    "fail",
    "unable",
    "could not",
    "couldn't",
    "cannot",
    "can't",
    "unavailable",
    "not available",
    "did not work",
    "didn't work",
    "no result",
)


def tool_loop_found(messages: Sequence[dict[str, Any]], min_repeats: int = 3) -> bool:
    """Whether one tool call (same name, same arguments once canonicalized) occurs at least
    ``min_repeats`` times anywhere in the trajectory. Counted overall, not only back to back:
    an agent that loops often alternates (search, read, search, read, ...)."""
    counts: Counter[tuple[str, str]] = Counter()
    for call in all_tool_calls(messages):
        counts[call] += 1
        if counts[call] >= min_repeats:
            return True
    return False


def tool_error_ignored(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether a tool result that looks like an error (see ``looks_like_error``) is followed by
    an assistant message with no tool call (a final answer, no retry) whose text says nothing of
    the failure (none of the acknowledgment words). An error followed by another tool call, or
    by no assistant message at all, is not ignored."""
    pending_error = False
    for message in messages:
        if is_tool_result(message):
            pending_error = pending_error or looks_like_error(message)
        elif message.get("role") == "assistant" and pending_error:
            if tool_calls(message):
                pending_error = False  # retried or moved on with another call
                continue
            answer = message_text(message).casefold()
            if not any(word in answer for word in _ACKNOWLEDGMENTS):
                return True
            pending_error = False
    return False


def run_trajectory_check(check: dict[str, Any], messages: Sequence[dict[str, Any]]) -> bool:
    """Whether the trajectory meets ``check`` (one of ``TRAJECTORY_CHECKS``): pass means no
    loop, no ignored error."""
    kind = check["type"]
    if kind == "tool_loop":
        return not tool_loop_found(messages, int(check.get("min_repeats", 3)))
    if kind == "tool_errors_ignored":
        return not tool_error_ignored(messages)
    raise ValueError(f"unknown trajectory check type {kind!r}")
