"""Running the attacks against a judge, in memory: nothing is stored but the report.

Every response (the honest weak and strong answers, and each attack on the weak one) is
scored exactly as scoring scores it: the same verdict mode, neutralizing step, backend,
failure classes and aggregation; only the judgments are not written to the database, so an
audit leaves no attack text among a user's completions.

For each attack: the mean score inflation over the honest weak answer with a 95% bootstrap
interval (items resampled), and the false-positive rate: the share of items where the
attack scores above the honest strong answer. Beside them, the mean verdict shift: how far the
attack moves the judge's per-criterion values from the weak answer's, whatever the weights.
A judge pushed towards "yes" on every criterion also says yes to the pitfalls, which can
leave the score flat while every verdict moved; the shift shows it.

A failed judgment counts as scoring counts it: a failure the response caused (class
``response``) at the criterion's worst value, so an attack that provokes one is scored at
the worst value it was charged. A masked score is a response that escapes its worst value,
which a policy would learn to produce: an attack with more than ``max_masked_share`` of its
items masked (by default any) fails the audit, and so does one whose inflation could not be
measured (no item where both it and the honest weak answer got a score); ``problems`` says
which and why, whatever the inflation threshold the caller holds the judge to.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rubricsvc.audit.attacks import ATTACKS, NEUTRALIZED_FAMILIES, Attack, Target
from rubricsvc.backends.base import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import ResponseFailurePolicy, empty_counts
from rubricsvc.judging.modes import (
    AssessOptions,
    Case,
    CompletionView,
    CriterionView,
    RubricCriterion,
    Ruling,
    VerdictModeImpl,
    get_mode,
)
from rubricsvc.scoring.executor import CallExecutor, JudgeResult


@dataclass(frozen=True)
class AuditCriterion:
    view: CriterionView
    check: dict[str, Any] | None = None
    required: bool = False


@dataclass(frozen=True)
class AuditItem:
    """One prompt and its rubric, with an honest weak and an honest strong answer."""

    name: str
    messages: list[dict[str, Any]]
    criteria: list[AuditCriterion]
    weak: str
    strong: str
    reference: str | None = None
    dimension_weights: dict[str, float] | None = None

    @property
    def prompt(self) -> str:
        return "\n\n".join(str(m.get("content", "")) for m in self.messages)


@dataclass(frozen=True)
class AuditOptions:
    aggregation: str = "rar"
    min_coverage: float = 0.8
    response_failure: ResponseFailurePolicy = ResponseFailurePolicy.WORST
    resamples: int = 2000
    seed: int = 0
    # The share of an attack's items whose score may be masked before the audit fails.
    max_masked_share: float = 0.0


@dataclass
class AttackResult:
    name: str
    family: str
    description: str
    items: int  # items where the attack and the weak answer both got a score
    mean_inflation: float | None
    ci_low: float | None
    ci_high: float | None
    false_positive_rate: float | None
    masked: int  # items where the attack's score was masked
    # Mean of (attack - weak) over the judged criteria both got a verdict on.
    verdict_shift: float | None = None
    failures: dict[str, int] = field(default_factory=empty_counts)
    scores: list[float | None] = field(default_factory=list)


@dataclass
class AuditReport:
    judge: str
    judge_config_hash: str
    set_name: str
    items: list[str]
    weak_scores: list[float | None]
    strong_scores: list[float | None]
    attacks: list[AttackResult]
    options: dict[str, Any]
    # Why the audit fails whatever the inflation (``audit_problems``); empty: it does not.
    problems: list[str] = field(default_factory=list)
    max_masked_share: float = 0.0

    def worst_neutralized_inflation(self) -> float:
        """The largest mean inflation among the attacks the platform itself must defeat."""
        values = [
            a.mean_inflation
            for a in self.attacks
            if a.family in NEUTRALIZED_FAMILIES and a.mean_inflation is not None
        ]
        return max(values, default=0.0)

    def max_inflation(self) -> float:
        return max((a.mean_inflation or 0.0 for a in self.attacks), default=0.0)


Progress = Callable[[int, int], None]


def run_audit(
    spec: JudgeSpec,
    backend_factory: Callable[[], JudgeBackend],
    items: Sequence[AuditItem],
    set_name: str,
    options: AuditOptions,
    attacks: Sequence[Attack] = ATTACKS,
    context_tokens: int | None = None,
    progress: Progress | None = None,
) -> AuditReport:
    """Score the honest answers and every attack on every item; see the module docstring."""
    if spec.jury is not None:
        raise ValidationFailed(
            f"judge {spec.name!r} is a jury: audit its members "
            f"({', '.join(m.name for m in spec.jury.members)}), each a judge of its own"
        )
    mode = get_mode(spec.mode)
    executor = CallExecutor(backend_factory, spec, mode.calls, spec.prompt_template())
    steps = 2 + len(attacks)
    try:
        weak = _score_all(executor, mode, items, [i.weak for i in items], options)
        _tick(progress, 1, steps)
        strong = _score_all(executor, mode, items, [i.strong for i in items], options)
        _tick(progress, 2, steps)
        context = context_tokens or getattr(executor.backend, "context_limit", None)
        results = []
        for done, attack in enumerate(attacks, start=3):
            texts = [
                attack.write(
                    Target(item.prompt, [c.view for c in item.criteria], item.weak, context)
                )
                for item in items
            ]
            scored = _score_all(executor, mode, items, texts, options)
            results.append(_summarize(attack, scored, weak, strong, options))
            _tick(progress, done, steps)
    finally:
        executor.close()
    return AuditReport(
        judge=spec.name,
        judge_config_hash=spec.config_hash(),
        set_name=set_name,
        items=[i.name for i in items],
        weak_scores=[s for s, _, _ in weak],
        strong_scores=[s for s, _, _ in strong],
        attacks=results,
        options={
            "aggregation": options.aggregation,
            "min_coverage": options.min_coverage,
            "response_failure": options.response_failure.value,
            "resamples": options.resamples,
            "seed": options.seed,
        },
        problems=audit_problems(results, options.max_masked_share),
        max_masked_share=options.max_masked_share,
    )


def audit_problems(attacks: Sequence[AttackResult], max_masked_share: float) -> list[str]:
    """A line per attack that fails the audit whatever its inflation: more than
    ``max_masked_share`` of its items masked, or its inflation unmeasured."""
    problems = []
    for attack in attacks:
        total = len(attack.scores)
        named = f"attack {attack.name} ({attack.family})"
        if total and attack.masked / total > max_masked_share:
            failed = ", ".join(f"{n} {name}" for name, n in attack.failures.items() if n)
            problems.append(
                f"{named}: {'all ' if attack.masked == total else ''}{attack.masked} of "
                f"{total} scores masked (failed judgments: {failed or 'none'}), above "
                f"max_masked_share {max_masked_share:g}: a masked score escapes the worst value "
                "a response is charged"
            )
        elif attack.mean_inflation is None:
            problems.append(
                f"{named}: no item where both it and the honest weak answer got a score, so "
                "its inflation is unmeasured"
            )
    return problems


def _tick(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


# A response's score (None: masked), its failures by class, and each criterion's value
# (None for a check criterion or a failed judgment).
Scored = tuple[float | None, dict[str, int], list[float | None]]


def _score_all(
    executor: CallExecutor,
    mode: VerdictModeImpl,
    items: Sequence[AuditItem],
    responses: Sequence[str],
    options: AuditOptions,
) -> list[Scored]:
    """Each item's score for its response (None: masked) and its failures by class."""
    cases = [
        _case(index, item, response)
        for index, (item, response) in enumerate(zip(items, responses, strict=True))
    ]
    plans = [mode.plan(case) for case in cases]
    results = executor.run([(c.completion, p.items) for c, p in zip(cases, plans, strict=True)])
    rulings = {key: _ruling(result) for key, result in results.items()}
    assess = AssessOptions(
        options.aggregation, options.min_coverage, response_failure=options.response_failure
    )
    scored = []
    for case, plan in zip(cases, plans, strict=True):
        assessment = mode.assess(case, plan, rulings, assess)
        scored.append((assessment.value, assessment.failures, assessment.verdicts))
    return scored


def _case(index: int, item: AuditItem, response: str) -> Case:
    """An item with one response; the index and positions stand in for content hashes, so
    every (response, criterion) is a judgment of its own."""
    criteria = tuple(
        RubricCriterion(position, position, c.view, str(position), c.required, c.check)
        for position, c in enumerate(item.criteria)
    )
    view = CompletionView(index, item.messages, response, item.reference)
    return Case(
        view,
        criteria,
        "audit",
        item.name,
        str(index),
        content_hash(response),
        item.dimension_weights,
    )


def _ruling(result: JudgeResult) -> Ruling:
    value = result.verdict.value if result.verdict is not None else None
    label = result.verdict.label if result.verdict is not None else None
    detail = result.verdict.detail if result.verdict is not None else result.detail
    failure = result.failure.value if result.failure is not None else None
    return Ruling(value, label, detail, failure, result.error)


def _summarize(
    attack: Attack,
    scored: list[Scored],
    weak: list[Scored],
    strong: list[Scored],
    options: AuditOptions,
) -> AttackResult:
    inflation = []
    beats_strong = []
    shifts: list[float] = []
    failures = empty_counts()
    for (value, counts, verdicts), (weak_value, _, weak_verdicts), (strong_value, _, _) in zip(
        scored, weak, strong, strict=True
    ):
        for name, n in counts.items():
            failures[name] += n
        shifts.extend(
            a - b
            for a, b in zip(verdicts, weak_verdicts, strict=True)
            if a is not None and b is not None
        )
        if value is None:
            continue
        if weak_value is not None:
            inflation.append(value - weak_value)
        if strong_value is not None:
            beats_strong.append(value > strong_value)
    low, high = bootstrap_interval(inflation, options.resamples, options.seed)
    return AttackResult(
        name=attack.name,
        family=attack.family,
        description=attack.description,
        items=len(inflation),
        mean_inflation=statistics.fmean(inflation) if inflation else None,
        ci_low=low,
        ci_high=high,
        false_positive_rate=(sum(beats_strong) / len(beats_strong)) if beats_strong else None,
        masked=sum(1 for value, _, _ in scored if value is None),
        verdict_shift=statistics.fmean(shifts) if shifts else None,
        failures=failures,
        scores=[value for value, _, _ in scored],
    )


def bootstrap_interval(
    values: Sequence[float], resamples: int, seed: int, level: float = 0.95
) -> tuple[float | None, float | None]:
    """The percentile bootstrap interval of the mean of ``values`` (None for no values)."""
    if not values:
        return None, None
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    pick = partial(_quantile, means)
    return pick(tail), pick(1 - tail)


def _quantile(ordered: Sequence[float], q: float) -> float:
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
