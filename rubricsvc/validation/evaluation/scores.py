"""A judge's score of each labelled completion: what scalar labels are compared with, and what
pairs are compared by when the judge scores completions instead of comparing them (a reward
model's imported scores, a rubric judge's aggregate)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.models import Completion, RubricVersion
from rubricsvc.scoring.scorer import case_plan
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.store import judgments_by_key
from rubricsvc.validation.evaluation.common import Judging, _either, _imported_verdict


@dataclass(frozen=True)
class CompletionScore:
    """One completion's score: ``value`` in [0, 1] as the platform stores it, and ``raw``
    the number the judge gave (an imported reward model's own score; else the value)."""

    value: float
    raw: float


def scores_of(
    judging: Judging,
    completions: Sequence[Completion],
    version_of: Mapping[int, RubricVersion],
    item_of: Mapping[int, str] | None = None,
) -> dict[int, CompletionScore]:
    """Each completion's score under its prompt's version in ``version_of`` (None-free: a
    completion the judge gave no valid score is left out). A judge that scores is made to
    score what is missing (the cache answers the rest); an imported judge's verdicts are only
    read, each for the label item ``item_of`` names (verdicts that name no item hold for every
    item on their content)."""
    if judging.imported:
        return _imported_scores(judging, completions, version_of, item_of or {})
    selection = Selection(
        completion_ids=tuple(sorted(c.id for c in completions)),
        version_ids=tuple(sorted({v.id for v in version_of.values()})),
        include_drafts=True,
    )
    report = judging.judge_what_is_missing(selection)
    assert report is not None  # not an imported judge
    refs = {c.id: version_of[c.prompt_id].ref for c in completions if c.prompt_id in version_of}
    values: dict[int, list[float]] = defaultdict(list)
    for scored in report.scores:
        if scored.value is not None and refs.get(scored.completion_id) == scored.rubric:
            values[scored.completion_id].append(scored.value)
    found = {}
    for completion_id, listed in values.items():
        mean = math.fsum(listed) / len(listed)
        found[completion_id] = CompletionScore(mean, mean)
    return found


def _imported_scores(
    judging: Judging,
    completions: Sequence[Completion],
    version_of: Mapping[int, RubricVersion],
    item_of: Mapping[int, str],
) -> dict[int, CompletionScore]:
    """An imported holistic judge's scores, read under the versions ``judges import`` keys
    them under (the label set's, else each prompt's own)."""
    spec = judging.spec
    mode = get_mode(spec.mode)
    if mode.per_criterion or mode.compares:
        whole = _either(modes_that(per_criterion=False, compares=False))
        raise ValidationFailed(
            f"judge {spec.name} holds imported {spec.mode} verdicts: scalar labels (and pairs "
            f"compared by scores) need a judge that scores, or imported scalar verdicts (mode "
            f"{whole})"
        )
    key_of: dict[int, str] = {}
    for completion in completions:
        version = version_of.get(completion.prompt_id)
        if version is not None:
            plan = case_plan(spec, judging.judge_row.config_hash, completion, version)
            key_of[completion.id] = plan.items[0].key
    judged = judgments_by_key(judging.session, key_of.values())
    found = {}
    for completion_id, key in key_of.items():
        judgment = judged.get(key)
        item = item_of.get(completion_id, "")
        value = _imported_verdict(judgment, item, pairwise=False)[1]
        if value is None or judgment is None:
            continue
        detail = judgment.detail or {}
        # The source's own number, when the verdict is the judgment's (not an item's own).
        raw = detail.get("score") if not detail.get("by_item") else None
        found[completion_id] = CompletionScore(
            float(value), float(raw) if isinstance(raw, int | float) else float(value)
        )
    return found
