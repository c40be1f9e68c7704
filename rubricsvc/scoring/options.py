"""Score options from the scoring settings the boundary was given."""

from __future__ import annotations

from typing import Any

from rubricsvc.config import ScoringSettings
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.scoring.scorer import ScoreOptions


def score_options(settings: ScoringSettings, **given: Any) -> ScoreOptions:
    """``ScoreOptions`` with the failure policy of ``settings`` and ``given`` fields."""
    return ScoreOptions(
        response_failure=ResponseFailurePolicy(settings.response_failure),
        judge_failure_alarm=settings.judge_failure_alarm,
        checkpoint_seconds=settings.checkpoint_seconds,
        **given,
    )
