"""The encoders built once write exactly what ``json.dumps`` writes with the same options."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from rubricsvc import jsontext
from rubricsvc.hashing import canonical_json

VALUES: list[Any] = [
    {"Yes": 0.9, "No": 0.1},
    {"b": [1, 2.5, -0.0, 1e300, 10**30], "a": {"z": None, "y": True, "x": False}},
    {"text": 'café \u2028 \U0001f600 "quoted" \\ \n\t', "k\u00e9y": ["\x00", ""]},
    [math.inf, -math.inf, math.nan],
    ("a", "tuple"),
    "a plain string: é",
    12,
    None,
    {3: "int key", 2.5: "float key", True: "bool key", None: "none key"},
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_is_json_dumps(value: Any) -> None:
    assert jsontext.dumps(value) == json.dumps(value)


@pytest.mark.parametrize("value", VALUES)
def test_canonical_json_is_json_dumps_sorted_and_compact(value: Any) -> None:
    def outcome(encode: Callable[[Any], str]) -> object:
        try:
            return encode(value)
        except TypeError as err:  # keys of mixed types cannot be sorted
            return (TypeError, str(err))

    def stdlib(v: Any) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    assert outcome(canonical_json) == outcome(stdlib)


def test_what_json_cannot_encode_is_refused_as_json_dumps_refuses_it() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsontext.dumps({"when": object()})
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(RecursionError):  # no circular check: see the module's docstring
        jsontext.dumps(looped)


def test_without_the_c_encoder_it_falls_back_to_the_same_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An interpreter without json's C accelerator gets the stdlib's Python encoder."""
    monkeypatch.setattr(jsontext.stdlib_encoder, "c_make_encoder", None)
    dumps = jsontext.make_encoder()
    canonical = jsontext.make_encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for value in VALUES[:8]:  # the last one's keys cannot be sorted
        assert dumps(value) == json.dumps(value)
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert canonical(value) == expected
