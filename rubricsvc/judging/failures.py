"""Who caused a failed judgment, and what a score does with it.

A masked judgment gives no reward at all (advantage 0 in GRPO), so a failure the response
itself can provoke must not be masked: a policy would learn to overflow the judge's context
rather than answer well. Every failure is put in one of three classes:

- ``infrastructure``: transport errors, HTTP 5xx and 429, time-outs, a crashed backend,
  a lost worker, a judge that cannot judge this item as configured (a reference-relative
  judge with no reference). Retried where that may help, then masked.
- ``judge``: the judge's own reply is unparseable or off its scale. Retried, then masked and
  counted; a rate above the alarm threshold is reported (the judge, or an attack on it,
  needs a look).
- ``response``: the response cannot be judged because of its content (it overflows the
  judge's context). Never retried, never masked: by default it gets the criterion's worst
  value (0 for a criterion to meet, 1 for a pitfall), so provoking it never pays.
"""

from __future__ import annotations

import enum

from rubricsvc.backends.base import BackendError, ContextLengthError


class FailureClass(enum.StrEnum):
    INFRASTRUCTURE = "infrastructure"
    JUDGE = "judge"
    RESPONSE = "response"


class ResponseFailurePolicy(enum.StrEnum):
    WORST = "worst"  # the criterion's worst value: the response pays for it
    MASK = "mask"  # left out like any other failure


# The share of a run's judgments whose failures are the judge's own above which the run
# reports an alarm (configurable per run).
DEFAULT_JUDGE_FAILURE_ALARM = 0.05


def classify_backend_error(error: BackendError) -> FailureClass:
    """A backend error's class: the response's when the request cannot fit the judge."""
    if isinstance(error, ContextLengthError):
        return FailureClass.RESPONSE
    return FailureClass.INFRASTRUCTURE


def worst_value(weight: float) -> float:
    """The value that counts most against a response: not met, or a pitfall present."""
    return 1.0 if weight < 0 else 0.0


def empty_counts() -> dict[str, int]:
    return {c.value: 0 for c in FailureClass}
