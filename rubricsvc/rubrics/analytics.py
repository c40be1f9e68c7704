"""How each criterion of one rubric version behaves in the scores it produced.

A reviewer reads, per criterion:

- pass rate: the mean judged value (for a pitfall, how often it is present). Near 0 or 1 on
  every completion, it says little about which completion is better;
- spread: how far its values differ among the completions of one prompt. A criterion that
  never varies within a prompt (spread <= 0.05 everywhere) gives a policy no learning signal,
  however right it is: GRPO learns from differences between a prompt's completions;
- discrimination: its contribution on each prompt's best-scored completion minus on the
  worst, sign-adjusted by its weight, so positive means it favours the better completion and
  negative means it rewards the worse one (a wrong direction or a misleading wording);
- judge failures by class (infrastructure, judge, response; see ``judging.failures``): a
  criterion its judge often fails on is masked often, so it silently counts for less.

Everything is read from the ``scores`` rows of the version (their ``details["criteria"]``),
never from ``judgments.criterion_id``: a judgment is shared by cache key between versions with
identical criteria and names only the first version's criterion. The JSON entries are
expanded and grouped in the database, by criterion and by (criterion, prompt, judge), so the
cost follows the version's own scores (through the index on ``rubric_version_id``), not the
size of the database.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    Subquery,
    case,
    cast,
    column,
    distinct,
    func,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from rubricsvc.judging.failures import FailureClass
from rubricsvc.models import Completion, Criterion, RubricVersion, Score

# A criterion whose values differ by at most this within every prompt never varies.
NEVER_VARIES_SPREAD = 0.05
# A criterion failing on at least this share of its judgments is worth a look.
FAILURE_RATE_ALERT = 0.10
# A discrimination below this: the criterion rewards the worse completion.
REVERSED_DISCRIMINATION = -0.05

# Entry statuses whose value is a verdict (a judgment or a computed check). An "unjudgeable"
# entry carries the criterion's worst value, charged for a response failure: not a verdict.
_JUDGED = ("ok", "check")
_FAILED = "failed"

# What to do about a criterion that often fails, by the class of most of its failures.
_FAILURE_ADVICE = {
    FailureClass.JUDGE.value: "reword",
    FailureClass.RESPONSE.value: "the responses overflow the judge's context",
    FailureClass.INFRASTRUCTURE.value: "re-score when the backend is healthy",
}


@dataclass(frozen=True)
class CriterionStats:
    """One criterion's figures; None where there was nothing to compute them from."""

    criterion_id: int
    position: int
    text: str
    weight: float
    category: str
    values: int  # judged values (ok and check entries)
    pass_rate: float | None  # mean judged value, in [0, 1]
    mean_spread: float | None  # mean of max - min over each prompt's judged completions
    spread_prompts: int  # prompts (under one judge) with at least 2 judged completions
    never_varies: bool  # spread_prompts > 0 and every spread <= NEVER_VARIES_SPREAD
    discrimination: float | None  # in [-1, 1]; negative: rewards the worse completion
    failures: dict[str, int] = field(default_factory=dict)  # failure class -> count (> 0 only)
    failure_rate: float | None = None  # failed entries / all entries of the criterion
    suggestion: str | None = None


@dataclass(frozen=True)
class RubricAnalytics:
    version_id: int
    judge_config_ids: list[int]  # the judge configs whose scores were read
    completions: int  # distinct scored completions
    prompts: int  # distinct prompts of those completions
    criteria: list[CriterionStats]  # in position order


def rubric_analytics(
    session: Session, version: RubricVersion, judge_config_id: int | None = None
) -> RubricAnalytics:
    """The per-criterion analytics of ``version``'s stored scores (only ``judge_config_id``'s
    when given).

    Each (completion, judge config) counts once: when it was scored under several
    aggregations, its first stored score is read. Spread and discrimination compare the
    completions of one prompt under one judge config; discrimination uses the prompts with
    at least two scored (unmasked) completions, averaging the criterion over tied best or
    tied worst completions.
    """
    chosen = _chosen_scores(version.id, judge_config_id)
    entries = _criterion_entries(session, chosen)
    totals = session.execute(
        select(
            func.count(distinct(chosen.c.completion_id)), func.count(distinct(chosen.c.prompt_id))
        )
    ).one()
    judges = session.scalars(
        select(chosen.c.judge_config_id).distinct().order_by(chosen.c.judge_config_id)
    )
    criteria = session.scalars(
        select(Criterion).where(Criterion.version_id == version.id).order_by(Criterion.position)
    )
    counts = _counts(session, entries)
    groups = _groups(session, entries)
    return RubricAnalytics(
        version_id=version.id,
        judge_config_ids=list(judges),
        completions=int(totals[0]),
        prompts=int(totals[1]),
        criteria=[_stats(c, counts.get(c.id, _Counts()), groups.get(c.id, [])) for c in criteria],
    )


def chart_bars(analytics: RubricAnalytics) -> list[dict[str, Any]]:
    """Per criterion, what a bar chart draws: a short label (``#1`` for position 0, as the
    table numbers them), pass rate and spread in [0, 1], discrimination in [-1, 1]; None
    where the figure is unknown."""
    return [
        {
            "label": f"#{c.position + 1}",
            "pass_rate": _clamp(c.pass_rate, 0.0, 1.0),
            "spread": _clamp(c.mean_spread, 0.0, 1.0),
            "discrimination": _clamp(c.discrimination, -1.0, 1.0),
        }
        for c in analytics.criteria
    ]


# --- queries -------------------------------------------------------------------------------


def _chosen_scores(version_id: int, judge_config_id: int | None) -> Subquery:
    """One score row per (completion, judge config) of the version, with its completion's
    prompt and, per (prompt, judge config), the best and worst score and how many there are."""
    first = select(func.min(Score.id)).where(Score.rubric_version_id == version_id)
    if judge_config_id is not None:
        first = first.where(Score.judge_config_id == judge_config_id)
    first = first.group_by(Score.completion_id, Score.judge_config_id)
    group = (Completion.prompt_id, Score.judge_config_id)
    return (
        select(
            Score.completion_id,
            Score.judge_config_id,
            Completion.prompt_id,
            Score.details,
            Score.value.label("score"),
            func.max(Score.value).over(partition_by=group).label("best"),
            func.min(Score.value).over(partition_by=group).label("worst"),
            func.count(Score.value).over(partition_by=group).label("scored"),
        )
        .join(Completion, Completion.id == Score.completion_id)
        .where(Score.rubric_version_id == version_id, Score.id.in_(first))
        .subquery("chosen")
    )


def _criterion_entries(session: Session, chosen: Subquery) -> Subquery:
    """Each criterion entry of the chosen scores as a row: criterion id, judged value (None
    unless ok or check), failure class (None unless failed), and its score's columns."""
    if session.get_bind().dialect.name == "postgresql":
        expanded = func.jsonb_array_elements(chosen.c.details["criteria"]).table_valued(
            column("value", JSONB)
        )

        def field_of(name: str) -> ColumnElement[Any]:
            return func.jsonb_extract_path_text(expanded.c.value, name)

    else:  # SQLite
        expanded = func.json_each(chosen.c.details, "$.criteria").table_valued("value")

        def field_of(name: str) -> ColumnElement[Any]:
            return func.json_extract(expanded.c.value, f"$.{name}")

    status = field_of("status")
    failed_unclassified = case((status == _FAILED, FailureClass.INFRASTRUCTURE.value))
    return (
        select(
            cast(field_of("criterion_id"), Integer).label("criterion_id"),
            chosen.c.prompt_id,
            chosen.c.judge_config_id,
            case((status.in_(_JUDGED), cast(field_of("value"), Float))).label("value"),
            func.coalesce(field_of("failure"), failed_unclassified).label("failure"),
            chosen.c.score,
            chosen.c.best,
            chosen.c.worst,
            chosen.c.scored,
        )
        .select_from(chosen)
        .join(expanded, true())
        .subquery("entries")
    )


@dataclass
class _Counts:
    entries: int = 0
    values: int = 0
    total: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)


def _counts(session: Session, entries: Subquery) -> dict[int, _Counts]:
    """Per criterion: entries, judged values and their sum, failures by class."""
    rows = session.execute(
        select(
            entries.c.criterion_id,
            entries.c.failure,
            func.count(),
            func.count(entries.c.value),
            func.sum(entries.c.value),
        )
        .where(entries.c.criterion_id.is_not(None))
        .group_by(entries.c.criterion_id, entries.c.failure)
    )
    counts: dict[int, _Counts] = defaultdict(_Counts)
    for criterion_id, failure, n_entries, n_values, total in rows:
        found = counts[criterion_id]
        found.entries += n_entries
        found.values += n_values
        found.total += float(total or 0.0)
        if failure is not None:
            found.failures[str(failure)] = found.failures.get(str(failure), 0) + n_entries
    return counts


@dataclass(frozen=True)
class _Group:
    """One criterion under one prompt and judge config."""

    judged: int  # completions with a judged value
    spread: float | None  # max - min of those values
    scored: int  # completions with a score (not masked)
    on_best: float | None  # mean value on the best-scored completion(s)
    on_worst: float | None  # ... and on the worst-scored one(s)


def _groups(session: Session, entries: Subquery) -> dict[int, list[_Group]]:
    """Per criterion, its figures in each (prompt, judge config)."""
    value = entries.c.value
    rows = session.execute(
        select(
            entries.c.criterion_id,
            func.count(value),
            func.max(value) - func.min(value),
            func.max(entries.c.scored),
            func.avg(case((entries.c.score == entries.c.best, value))),
            func.avg(case((entries.c.score == entries.c.worst, value))),
        )
        .where(entries.c.criterion_id.is_not(None))
        .group_by(entries.c.criterion_id, entries.c.prompt_id, entries.c.judge_config_id)
    )
    groups: dict[int, list[_Group]] = defaultdict(list)
    for criterion_id, judged, spread, scored, on_best, on_worst in rows:
        groups[criterion_id].append(
            _Group(
                judged=int(judged),
                spread=_float(spread),
                scored=int(scored or 0),
                on_best=_float(on_best),
                on_worst=_float(on_worst),
            )
        )
    return groups


# --- figures -------------------------------------------------------------------------------


def _stats(criterion: Criterion, counts: _Counts, groups: Sequence[_Group]) -> CriterionStats:
    spreads = [g.spread for g in groups if g.judged >= 2 and g.spread is not None]
    gaps = [
        g.on_best - g.on_worst
        for g in groups
        if g.scored >= 2 and g.on_best is not None and g.on_worst is not None
    ]
    # A pitfall (negative weight) counts against a completion: present on the worst one is
    # what it is for.
    direction = -1.0 if criterion.weight < 0 else 1.0
    pass_rate = counts.total / counts.values if counts.values else None
    failed = sum(counts.failures.values())
    failures = dict(sorted(counts.failures.items(), key=lambda kv: _failure_order(kv[0])))
    stats = CriterionStats(
        criterion_id=criterion.id,
        position=criterion.position,
        text=criterion.text,
        weight=criterion.weight,
        category=criterion.category.value,
        values=counts.values,
        pass_rate=pass_rate,
        mean_spread=_mean(spreads),
        spread_prompts=len(spreads),
        never_varies=bool(spreads) and max(spreads) <= NEVER_VARIES_SPREAD,
        discrimination=None if not gaps else direction * math.fsum(gaps) / len(gaps),
        failures=failures,
        failure_rate=failed / counts.entries if counts.entries else None,
    )
    return _with_suggestion(stats)


def _with_suggestion(stats: CriterionStats) -> CriterionStats:
    """``stats`` with a plain-words suggestion for each problem its figures show, if any."""
    found: list[str] = []
    if stats.failure_rate is not None and stats.failure_rate >= FAILURE_RATE_ALERT:
        by_count = sorted(stats.failures, key=lambda name: -stats.failures[name])
        advice = _FAILURE_ADVICE.get(by_count[0], "look at its failed judgments")
        found.append(
            f"fails its judge {stats.failure_rate:.0%} of the time "
            f"({', '.join(by_count)}): {advice}"
        )
    if stats.never_varies and stats.pass_rate is not None:
        found.append(
            f"never varies (pass rate {stats.pass_rate:.2f} on {stats.values} values): "
            "sharpen or remove"
        )
    if stats.discrimination is not None and stats.discrimination < REVERSED_DISCRIMINATION:
        found.append(
            f"rewards the worse completion (discrimination {stats.discrimination:+.2f}): "
            "check its direction/weight"
        )
    suggestion = "; ".join(found) or None
    return replace(stats, suggestion=suggestion)


def _failure_order(name: str) -> tuple[int, str]:
    """The failure classes in their documented order, unknown ones after."""
    known = [c.value for c in FailureClass]
    return (known.index(name) if name in known else len(known), name)


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _clamp(value: float | None, low: float, high: float) -> float | None:
    return None if value is None else min(high, max(low, value))
