"""Reading verdicts from a judge's own output. Nothing here ever looks at the judged response.

Parsing is strict: an answer outside the offered verdicts is a failure of the judge
(retried, then stored as failed), never a low grade.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class VerdictParseError(Exception):
    """The judge's output does not contain a verdict in the required form."""


@dataclass(frozen=True)
class Verdict:
    value: float  # in [0, 1]
    label: str  # "yes", "no", an ordinal level, "7/10", ...
    reasoning: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


# A judge that puts less probability than this on all verdict tokens together did not
# answer the question (it started some other reply): a failure, not a verdict.
MIN_VERDICT_MASS = 0.01

YES_TOKENS = ("Yes", "yes")
NO_TOKENS = ("No", "no")


def binary_from_probs(probs: Mapping[str, float]) -> Verdict:
    p_yes = math.fsum(probs.get(t, 0.0) for t in YES_TOKENS)
    p_no = math.fsum(probs.get(t, 0.0) for t in NO_TOKENS)
    mass = p_yes + p_no
    if mass < MIN_VERDICT_MASS:
        raise VerdictParseError(f"the judge put only {mass:.4f} of its probability on Yes/No")
    value = p_yes / mass
    return Verdict(
        value, "yes" if value >= 0.5 else "no", detail={"p_yes": p_yes, "p_no": p_no, "mass": mass}
    )


def ordinal_from_probs(probs: Mapping[str, float], scores: Sequence[int]) -> Verdict:
    """The expected level under the judge's distribution over the level tokens, in [0, 1]."""
    weights = {s: probs.get(str(s), 0.0) for s in scores}
    mass = math.fsum(weights.values())
    if mass < MIN_VERDICT_MASS:
        raise VerdictParseError(f"the judge put only {mass:.4f} of its probability on the levels")
    low, high = min(scores), max(scores)
    expected = math.fsum(s * p for s, p in weights.items()) / mass
    best = max(weights, key=lambda s: weights[s])
    return Verdict(
        (expected - low) / (high - low),
        str(best),
        detail={"level_probs": {str(s): p for s, p in weights.items()}, "expected": expected},
    )


def ordinal_value(score: int, scores: Sequence[int]) -> float:
    low, high = min(scores), max(scores)
    return (score - low) / (high - low)


_VERDICT_LINE = re.compile(r"^\W*verdict\W*:\s*\**\s*([a-z0-9-]+)\s*\**\W*$", re.IGNORECASE)
_SCORE_LINE = re.compile(r"^\W*score\W*:\s*\**\s*(\d+)\s*(?:/\s*\d+)?\s*\**\W*$", re.IGNORECASE)


def _split_last_line(output: str) -> tuple[str, str]:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    if not lines:
        raise VerdictParseError("the judge returned no text")
    return "\n".join(lines[:-1]).strip(), lines[-1].strip()


def binary_from_text(output: str) -> Verdict:
    """``...reasoning...`` then a last line ``VERDICT: YES`` or ``VERDICT: NO``."""
    reasoning, last = _split_last_line(output)
    match = _VERDICT_LINE.match(last)
    if not match or match.group(1).lower() not in {"yes", "no"}:
        raise VerdictParseError(f"last line is not 'VERDICT: YES' or 'VERDICT: NO': {last[:80]!r}")
    label = match.group(1).lower()
    return Verdict(1.0 if label == "yes" else 0.0, label, reasoning or None)


def ordinal_from_text(output: str, scores: Sequence[int]) -> Verdict:
    reasoning, last = _split_last_line(output)
    match = _VERDICT_LINE.match(last)
    if not match or not re.fullmatch(r"-?\d+", match.group(1)) or int(match.group(1)) not in scores:
        raise VerdictParseError(
            f"last line is not 'VERDICT: <one of {list(scores)}>': {last[:80]!r}"
        )
    score = int(match.group(1))
    return Verdict(ordinal_value(score, scores), str(score), reasoning or None)


def likert_from_text(output: str, top: int) -> Verdict:
    reasoning, last = _split_last_line(output)
    match = _SCORE_LINE.match(last)
    if not match or not 1 <= int(match.group(1)) <= top:
        raise VerdictParseError(f"last line is not 'SCORE: <1..{top}>': {last[:80]!r}")
    score = int(match.group(1))
    return Verdict((score - 1) / (top - 1), f"{score}/{top}", reasoning or None)


def level_from_text(output: str, scores: Sequence[int]) -> Verdict:
    """``...reasoning...`` then a last line ``SCORE: <level>``, one of ``scores`` (a rubric's
    own scale, as holistic judging uses it), scaled to [0, 1]."""
    reasoning, last = _split_last_line(output)
    match = _SCORE_LINE.match(last)
    if not match or int(match.group(1)) not in scores:
        raise VerdictParseError(f"last line is not 'SCORE: <one of {list(scores)}>': {last[:80]!r}")
    score = int(match.group(1))
    return Verdict(ordinal_value(score, scores), f"{score}/{max(scores)}", reasoning or None)


def json_object(output: str) -> dict[str, Any]:
    """The judge's whole answer as one JSON object (a ```json fence around it is accepted)."""
    text = output.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise VerdictParseError(f"the answer is not a JSON object: {err.msg}") from None
    if not isinstance(value, dict):
        raise VerdictParseError(f"the answer is JSON {type(value).__name__}, not an object")
    return value


def expect_keys(answer: Mapping[str, Any], count: int) -> None:
    expected = {str(i) for i in range(1, count + 1)}
    if set(answer) != expected:
        missing = sorted(expected - set(answer), key=int)
        extra = sorted(set(answer) - expected)
        raise VerdictParseError(
            f"the answer must cover criteria 1..{count} exactly (missing {missing}, unexpected {extra})"
        )
