"""JSON text exactly as ``json.dumps`` writes it, from an encoder built once.

``json.dumps`` and ``JSONEncoder.encode`` build CPython's C encoder anew on every call, which
costs more than encoding the small objects written for every judgment (a verdict's
probabilities, a stored row's detail, a cache key's fields): ``{"Yes": 0.9, "No": 0.1}`` took
2.5 us through ``json.dumps`` and 1.2 us through an encoder built once (timeit, CPython 3.11).

These encoders skip the check for circular references: that check keeps state per call, and
an encoder built once is shared by threads. A value that contains itself raises
``RecursionError`` instead of ``ValueError``; what they encode is data, never a graph.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from json import encoder as stdlib_encoder
from typing import Any

Encode = Callable[[Any], str]


def make_encoder(
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    ensure_ascii: bool = True,
) -> Encode:
    """A function giving ``json.dumps(value, sort_keys=..., separators=..., ensure_ascii=...)``."""
    python = json.JSONEncoder(
        sort_keys=sort_keys, separators=separators, ensure_ascii=ensure_ascii, check_circular=False
    )
    build = getattr(stdlib_encoder, "c_make_encoder", None)
    if build is None:  # an interpreter without json's C accelerator
        return python.encode
    item_separator, key_separator = separators
    strings = (
        stdlib_encoder.encode_basestring_ascii if ensure_ascii else stdlib_encoder.encode_basestring
    )
    # The arguments ``JSONEncoder.iterencode`` builds it with: markers (None: no circular
    # check), default, string encoder, indent, separators, sort_keys, skipkeys, allow_nan.
    encode = build(
        None, python.default, strings, None, key_separator, item_separator, sort_keys, False, True
    )

    # A partial, not a closure: psycopg keys the JSON dumper it builds for a function by the
    # function's code, and logs a warning about a possible leak for every closure it is given
    # (once per PostgreSQL engine); a partial has no code and is keyed by itself.
    return partial(_joined, encode)


def _joined(encode: Callable[[Any, int], Any], value: Any) -> str:
    return "".join(encode(value, 0))


# ``json.dumps(value)``: the stored JSON columns' text and a verdict's raw probabilities.
dumps = make_encoder()
