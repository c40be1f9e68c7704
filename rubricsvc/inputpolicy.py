"""What every door accepts: one rule for text and data that arrive from outside (API bodies,
query strings, files, importers, the review pages' forms). docs/api.md ("Input policy") says it
for users; this module is the only place that decides it.

Text is kept exactly as given (no normalization, no replacement: content hashes are over the
exact characters) unless it cannot be stored exactly, and then it is refused, naming the field:

- a lone surrogate (U+D800-U+DFFF on its own) is not Unicode text: it cannot be encoded as
  UTF-8, so it can be neither hashed nor stored;
- NUL (U+0000) cannot be stored by PostgreSQL (text or JSON), so it is refused on every
  database alike.

Every other character is data: other control characters, bidirectional overrides, non-NFC
forms and look-alike letters are stored, hashed and judged as given (the judge's neutralizer
deals with special tokens; the review pages render everything as text, and show each
character that renders as nothing, ``INVISIBLE``, as a visible marker).

Structured data is JSON's: an object naming a key twice is refused (parsers disagree on which
one wins), as are values nested more than ``MAX_DEPTH`` levels deep, numbers that are not
finite or do not fit 64 bits, and (from YAML) values JSON has no type for, such as dates. A
query string naming a parameter twice is refused for the same reason (``repeated_name``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rubricsvc.errors import ValidationFailed

MAX_DEPTH = 100  # levels of nested objects and lists
INT64_MAX = 2**63 - 1
# The characters refused in any text: lone surrogates and NUL.
_REFUSED = re.compile("[\ud800-\udfff\x00]")
# Characters that render as nothing, or only steer how the text around them is laid out:
# soft hyphen, combining grapheme joiner, Arabic letter mark, fillers, Mongolian vowel
# separator and variation selectors, zero-width space, non-joiner and joiner, left-to-right
# and right-to-left marks, bidirectional embeddings, overrides and isolates, word joiner and
# invisible operators, deprecated format characters, byte-order mark (zero-width no-break
# space), tag characters. Kept like any other character (data), but one definition for the
# places that must not let them pass unseen: the review pages show each as a visible marker
# (``rubricsvc.ui.templating``), the judge's neutralizer ignores them where it looks for frame
# tags (``rubricsvc.neutral``, whose VERSION changes with this list).
INVISIBLE_CHARACTERS = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f"
)
INVISIBLE = re.compile(f"[{INVISIBLE_CHARACTERS}]")
# What a field path shows of a key escaped, so that an error message is always printable.
_UNPRINTABLE = re.compile("[\ud800-\udfff\x00-\x1f\x7f]")
# How many parts of a too-deep value's path an error names (the path itself is that deep).
_DEPTH_PATH_PARTS = 4

Where = tuple[str | int, ...]


def text_problem(text: str) -> str | None:
    """Why ``text`` is refused (what, and at which character, counting from 1), or None."""
    found = _REFUSED.search(text)
    if found is None:
        return None
    char, position = found.group(), found.start() + 1
    if char == "\x00":
        return (
            f"contains a NUL character (U+0000) at character {position}; "
            "text may not hold NUL (PostgreSQL cannot store it)"
        )
    return (
        f"contains a lone surrogate (U+{ord(char):04X}) at character {position}; "
        "text must be valid Unicode"
    )


# Why a query parameter named twice is refused, after its name (``repeated_name``).
GIVEN_TWICE = "is given more than once: give it once"


def repeated_name(items: Iterable[tuple[str, Any]]) -> str | None:
    """The first name given twice among a query string's ``(name, value)`` pairs, or None.
    Servers, proxies and frameworks disagree on which value of such a name counts (Starlette
    takes the last, others the first): a check could pass on one value while the route acts
    on the other."""
    seen: set[str] = set()
    for name, _value in items:
        if name in seen:
            return name
        seen.add(name)
    return None


def check_text(text: str, field: str) -> str:
    """``text``, or ``ValidationFailed`` naming ``field`` and what is wrong with it."""
    problem = text_problem(text)
    if problem is not None:
        raise ValidationFailed(f"{field}: {problem}")
    return text


def printable(key: str) -> str:
    """``key`` with the characters an error message cannot carry escaped (``\\ud800``)."""
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", key)


@dataclass(frozen=True)
class Refusal:
    """Where in a value (keys and list indexes from its root) the first refused input is, and
    why: ``message`` reads after the field's name."""

    where: Where
    message: str


class RepeatedKeys(dict[str, Any]):
    """A parsed JSON object that named ``repeated`` more than once (the last value is kept
    here, but ``find_refusal`` refuses the object)."""

    repeated: str


def json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: the object, marked if it repeats a key."""
    built = dict(pairs)
    if len(built) == len(pairs):
        return built
    seen: set[str] = set()
    marked = RepeatedKeys(built)
    for key, _ in pairs:
        if key in seen:
            marked.repeated = key
            break
        seen.add(key)
    return marked


# One decoder for every call: ``json.loads`` given a hook builds a new one each time, which
# cost an API request body of one rollout 5.3 us to parse instead of 3.3 us.
_DECODER = json.JSONDecoder(object_pairs_hook=json_object)


def loads_json(text: str | bytes) -> Any:
    """``json.loads`` that keeps the mark of an object repeating a key (see ``find_refusal``);
    bytes are decoded and a leading byte-order mark refused as ``json.loads`` does."""
    if isinstance(text, bytes | bytearray):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    elif text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _number_problem(value: float | int) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else f"must be a finite number, got {value}"
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        return "integer out of range (more than 64 bits)"
    return None


# Where a value sits, as a chain of (parent, key or index, whether it is a key) made into a
# ``Where`` only for the value refused: most input is fine, and an API body is checked on
# every request.
_Path = tuple[Any, Any, bool] | None


def _where(path: _Path) -> Where:
    parts: list[str | int] = []
    while path is not None:
        path, part, is_key = path
        parts.append(_part(part) if is_key else part)
    return tuple(reversed(parts))


def find_refusal(
    data: Any, *, max_depth: int = MAX_DEPTH, leaf_types: tuple[type, ...] = ()
) -> Refusal | None:
    """The first input in ``data`` (parsed JSON or YAML) that the policy refuses, or None:
    refused text in a value or a key, a repeated key, nesting past ``max_depth``, a number
    that is not finite or past 64 bits, a value of a type JSON does not have (other than
    ``leaf_types``, a YAML loader's own tags, left to its reader).

    A list or mapping met twice (a YAML alias) is checked once."""
    stack: list[tuple[Any, int, _Path]] = [(data, 0, None)]
    seen: set[int] = set()
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem is not None:
                return Refusal(_where(path), problem)
        elif isinstance(value, bool) or value is None or isinstance(value, leaf_types):
            continue
        elif isinstance(value, int | float):
            problem = _number_problem(value)
            if problem is not None:
                return Refusal(_where(path), problem)
        elif isinstance(value, dict | list | tuple):
            if depth >= max_depth:
                return Refusal(
                    _where(path)[:_DEPTH_PATH_PARTS],
                    f"holds values nested more than {max_depth} levels deep",
                )
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, dict):
                refusal = _key_refusal(path, value)
                if refusal is not None:
                    return refusal
                stack.extend((v, depth + 1, (path, k, True)) for k, v in reversed(value.items()))
            else:
                stack.extend(
                    (value[i], depth + 1, (path, i, False)) for i in range(len(value) - 1, -1, -1)
                )
        else:
            kind = type(value).__name__
            return Refusal(_where(path), f"a {kind} value is not JSON data (in YAML, quote it)")
    return None


def _part(key: Any) -> str | int:
    return printable(key) if isinstance(key, str) else str(key)


def _key_refusal(path: _Path, mapping: dict[Any, Any]) -> Refusal | None:
    if isinstance(mapping, RepeatedKeys):
        return Refusal(
            (*_where(path), printable(mapping.repeated)),
            "the key is given more than once in one object",
        )
    for key in mapping:
        if isinstance(key, str):
            problem = text_problem(key)
            if problem is not None:
                return Refusal((*_where(path), printable(key)), f"the key {problem}")
        elif not isinstance(key, int | float | bool | None):
            return Refusal(
                _where(path), f"a {type(key).__name__} key is not JSON data (in YAML, quote it)"
            )
    return None


def format_where(where: Where) -> str:
    """``("criteria", 0, "text")`` -> ``criteria[0].text`` (how files' errors name fields)."""
    out = ""
    for part in where:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def describe_refusal(refusal: Refusal) -> str:
    """``field: message``, or the message alone for the value as a whole."""
    field = format_where(refusal.where)
    return f"{field}: {refusal.message}" if field else refusal.message
