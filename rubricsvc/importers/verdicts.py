"""Verdicts that come with a data set: stored as judgments of the judge ``imported``, then scored.

The judge config ``imported`` has no backend: its judgments are only ever read. They are keyed
exactly as the scorer keys a criterion judgment, so ``score`` finds every one of them
in its cache and never calls a model.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError, ValidationFailed
from rubricsvc.importers.common import ImportReport
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.judging.keys import criterion_key
from rubricsvc.models import Completion, Criterion, JudgeConfig, JudgmentStatus, Prompt
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.store import judgments_by_key, save_judgments

# The graders are not named in the files imported so far: model "unknown". Criterion-text is
# the mode whose verdicts carry reasoning, as the imported ones do.
IMPORTED_JUDGE = JudgeSpec(
    name="imported", backend="imported", model="unknown", mode=VerdictMode.CRITERION_TEXT
)
SCORE_TOLERANCE = 1e-9  # sources round their scores (HealthBench: to 10 decimals)


def verdict_row(
    judge: JudgeConfig,
    judged: tuple[Prompt, Completion, Criterion],
    *,
    met: bool,
    reasoning: str | None,
    raw_output: str | None,
) -> dict[str, Any]:
    """A judgment row for one binary verdict, under the key the scorer looks up."""
    prompt, completion, criterion = judged
    key = criterion_key(
        judge.config_hash, criterion.content_hash, prompt.content_hash, completion.content_hash
    )
    return {
        "cache_key": key,
        "judge_config_id": judge.id,
        "completion_id": completion.id,
        "criterion_id": criterion.id,
        "status": JudgmentStatus.OK,
        "value": 1.0 if met else 0.0,
        "verdict": "yes" if met else "no",
        "reasoning": reasoning,
        "raw_output": raw_output,
        "attempts": 1,
    }


def store_verdicts(session: Session, rows: list[dict[str, Any]], report: ImportReport) -> None:
    """Store new verdicts; a stored one is counted, and refused if it says otherwise."""
    unique: dict[str, dict[str, Any]] = {}
    for row in rows:
        _refuse_other_verdict(unique.get(row["cache_key"]), row)
        unique[row["cache_key"]] = row
    stored = judgments_by_key(session, unique)
    for key, row in unique.items():
        known = stored.get(key)
        ok = known is not None and known.status == JudgmentStatus.OK
        if known is not None and ok:
            _refuse_other_verdict({"verdict": known.verdict, "value": known.value}, row)
        report.judgments.count(added=not ok)
    save_judgments(session, list(unique.values()))


def _refuse_other_verdict(known: dict[str, Any] | None, row: dict[str, Any]) -> None:
    # The same content judged twice by "imported" must agree: a silent choice would lose one.
    if known is not None and known["value"] != row["value"]:
        raise ConflictError(
            f"completion {row['completion_id']}, criterion {row['criterion_id']}: the imported "
            f"verdict {row['verdict']!r} contradicts the stored verdict {known['verdict']!r}"
        )


def _no_backend() -> NoReturn:
    raise ValidationFailed("judge 'imported' only replays imported verdicts: it has no backend")


def score_from_verdicts(
    session: Session, stated: dict[int, float | None], aggregation: str, report: ImportReport
) -> None:
    """Score the completions in ``stated`` from stored verdicts; compare with the stated scores."""
    selection = Selection(
        completion_ids=tuple(stated),
        rubric_ref=None,
        include_drafts=True,  # imported versions are drafts until someone reviews them
    )
    options = ScoreOptions(aggregation=aggregation)
    result = score(session, IMPORTED_JUDGE, selection, options, backend_factory=_no_backend)
    report.backend_requests = result.backend_requests
    if result.backend_requests or result.failed:
        raise ValidationFailed(
            f"{result.judgments - result.cached} judgment(s) needed for the scores are not among "
            "the imported verdicts (is another rubric version of these prompts in use?)"
        )
    report.scores = len(result.scores)
    for scored in result.scores:
        expected = stated.get(scored.completion_id)
        if expected is None or scored.value is None:
            continue
        report.scores_checked += 1
        report.scores_matching += math.isclose(scored.value, expected, abs_tol=SCORE_TOLERANCE)
