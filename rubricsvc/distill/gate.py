"""The promotion gate: a student judge is a reward only once it has shown, on prompts it never
saw, that it agrees with its teacher well enough and better than the model it was made from.

Both the student and its base judge the held-out items (stored as a label set, so the usual
``judges evaluate`` figures with prompt-clustered intervals are stored for each); the gain is
their paired difference in agreement, with a cluster bootstrap interval over the held-out
prompts. Approved: the student's verdicts cover at least ``min_coverage`` of the held-out
labels (agreement and gain are measured only where a judge answered: a student that fails on
the hard items would be measured on the easy ones), its agreement reaches ``min_agreement``
and the interval's lower end is above ``min_gain``. Either way the decision and its figures
are stored (``judge_gates``).

The same figures are also taken within criteria: on the held-out criteria that some completions
meet and others do not. Only there does agreement take reading the completion; a criterion
that every completion meets (or none does) is matched by a judge that answers it the same
whatever the text says. A group-relative reward ranks by exactly these contrasts, so with
``within_criteria`` (a judge refresh's default) the gain there must be above ``min_gain`` too,
and a held-out set with no contrast at all is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.backends.base import JudgeBackend
from rubricsvc.distill.examples import Target
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    JudgeGate,
    JudgeGateStatus,
    LabelKind,
    LabelSet,
)
from rubricsvc.validation import metrics as m
from rubricsvc.validation.evaluation import (
    EvaluationOptions,
    PointwiseObservation,
    Progress,
    evaluate,
    pointwise_observations,
)
from rubricsvc.validation.labelsets import LabelInput, save_label_set

FactoryOf = Callable[[JudgeSpec], Callable[[], JudgeBackend]]

# What the gate is measured against, in its reasons: a distilled student's base model, or the
# judge a later training stage started from (``judges reinforce``: the SFT judge).
BASE_MODEL = "the base model"


class GateSettings(Protocol):
    """The thresholds a gate decides by (``DistillSettings``, ``ReinforceSettings``)."""

    @property
    def min_agreement(self) -> float: ...
    @property
    def min_gain(self) -> float: ...
    @property
    def min_coverage(self) -> float: ...
    @property
    def within_criteria(self) -> bool: ...


def held_out_label_set(
    session: Session, name: str, source: str, labeller: str, targets: Sequence[Target]
) -> LabelSet:
    """The held-out targets as a pointwise label set (the teacher as labeller)."""
    completions = {
        c.id: c
        for c in session.scalars(
            select(Completion)
            .where(Completion.id.in_({t.completion_id for t in targets}))
            .options(selectinload(Completion.prompt))
        )
    }
    criteria = {
        c.id: c
        for c in session.scalars(
            select(Criterion).where(Criterion.id.in_({t.criterion_id for t in targets}))
        )
    }
    labels = [
        LabelInput(
            kind=LabelKind.POINTWISE,
            item=f"{t.completion_id}/{t.criterion_id}",
            prompt=completions[t.completion_id].prompt,
            completion=completions[t.completion_id],
            labeller=labeller,
            value=t.value,
            criterion=criteria[t.criterion_id],
        )
        for t in targets
    ]
    report = save_label_set(
        session,
        name,
        source,
        "the held-out prompts of a distillation, labelled by its teacher",
        labels,
    )
    label_set = session.get(LabelSet, report.label_set_id)
    assert label_set is not None
    return label_set


def run_gate(
    session: Session,
    student: JudgeSpec,
    base: JudgeSpec,
    held_out: LabelSet,
    factory_of: FactoryOf,
    settings: GateSettings,
    options: EvaluationOptions | None = None,
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
    reference: str = BASE_MODEL,
) -> dict[str, Any]:
    """Evaluate base and student on ``held_out``, decide, and store the decision. ``base`` is
    what the student must beat; ``reference`` names it in the reasons."""
    options = options or EvaluationOptions()
    judged: dict[str, dict[str, Any]] = {}
    observed: dict[str, list[PointwiseObservation]] = {}
    for role, spec in (("base", base), ("student", student)):
        report, row = evaluate(
            session, spec, held_out, factory_of(spec), options, progress, checkpoint
        )
        judged[role] = {
            "judge": spec.name,
            "config_hash": report["judge_config_hash"],
            "evaluation_id": row.id,
            **{
                k: report.get(k)
                for k in (
                    "n_labelled",
                    "n_judged",
                    "coverage",
                    "agreement",
                    "agreement_ci",
                    "kappa",
                    "kappa_ci",
                )
            },
        }
        # Judged already: the cache answers, no model is called.
        observed[role] = pointwise_observations(session, spec, held_out, factory_of(spec))
    gain, gain_ci = paired_gain(observed["student"], observed["base"], options)
    within = within_criteria(observed["student"], observed["base"], options)
    decision, reasons = decide(
        judged["student"]["agreement"],
        gain_ci,
        settings,
        within,
        coverage=judged["student"]["coverage"],
        reference=reference,
    )
    report = {
        "labels": held_out.name,
        "label_set_hash": held_out.content_hash,
        "base": judged["base"],
        "student": judged["student"],
        "gain": gain,
        "gain_ci": gain_ci,
        "min_agreement": settings.min_agreement,
        "min_gain": settings.min_gain,
        "min_coverage": settings.min_coverage,
        "within_criteria": within,
        "gated_within_criteria": settings.within_criteria,
        "decision": decision.value,
        "reasons": reasons,
    }
    config = session.scalar(
        select(JudgeConfig).where(JudgeConfig.config_hash == judged["student"]["config_hash"])
    )
    assert config is not None  # evaluate stored it
    session.add(JudgeGate(judge_config_id=config.id, status=decision, report=report))
    session.flush()
    return report


def paired_gain(
    student: Sequence[PointwiseObservation],
    base: Sequence[PointwiseObservation],
    options: EvaluationOptions,
) -> tuple[float | None, list[float] | None]:
    """The student's agreement minus the base's on the items both judged, and its interval
    (resampling prompts, both judges' verdicts on a prompt drawn together)."""
    base_of = {(o.completion_id, o.criterion_id): o for o in base if o.judged is not None}
    pairs = [
        (s, base_of[(s.completion_id, s.criterion_id)])
        for s in student
        if s.judged is not None and (s.completion_id, s.criterion_id) in base_of
    ]
    if not pairs:
        return None, None
    differences = [_hit(s) - _hit(b) for s, b in pairs]

    def mean_gain(ix: Sequence[int]) -> float | None:
        return sum(differences[i] for i in ix) / len(ix) if ix else None

    interval = m.bootstrap_interval(
        [s.prompt_id for s, _ in pairs],
        mean_gain,
        resamples=options.resamples,
        level=options.level,
        seed=options.seed,
    )
    return mean_gain(range(len(pairs))), list(interval) if interval is not None else None


def _hit(o: PointwiseObservation) -> float:
    return float(((o.judged or 0.0) >= 0.5) == (o.label >= 0.5))


def verdicts_by_criterion(labels: Iterable[tuple[int, float]]) -> dict[int, set[bool]]:
    """Per criterion id, the verdicts (met: 0.5 or more) its (criterion id, label) pairs hold:
    one verdict where every completion got the same, both where they differ."""
    seen: dict[int, set[bool]] = {}
    for criterion_id, value in labels:
        seen.setdefault(criterion_id, set()).add(value >= 0.5)
    return seen


def contrasted(observations: Sequence[PointwiseObservation]) -> list[PointwiseObservation]:
    """The observations of criteria whose labels differ between completions (met on some, not
    met on others): where agreeing with the labels takes reading the completion."""
    seen = verdicts_by_criterion((o.criterion_id, o.label) for o in observations)
    return [o for o in observations if len(seen[o.criterion_id]) == 2]


def within_criteria(
    student: Sequence[PointwiseObservation],
    base: Sequence[PointwiseObservation],
    options: EvaluationOptions,
) -> dict[str, Any]:
    """The gate's figures on the contrasted criteria only (``contrasted``): how many criteria,
    labels and prompts, each judge's agreement there, and the student's paired gain with its
    interval. Every figure is None where no held-out criterion has both labels. The interval
    resamples prompts, so it is only as narrow as the prompts the contrasts come from allow."""
    kept = contrasted(student)
    keys = {(o.completion_id, o.criterion_id) for o in kept}
    kept_base = [o for o in base if (o.completion_id, o.criterion_id) in keys]
    gain, gain_ci = paired_gain(kept, kept_base, options)

    def agreement(observations: Sequence[PointwiseObservation]) -> float | None:
        judged = [_hit(o) for o in observations if o.judged is not None]
        return sum(judged) / len(judged) if judged else None

    return {
        "criteria": len({o.criterion_id for o in kept}),
        "labels": len(kept),
        "prompts": len({o.prompt_id for o in kept}),
        "base_agreement": agreement(kept_base),
        "student_agreement": agreement(kept),
        "gain": gain,
        "gain_ci": gain_ci,
    }


def decide(
    agreement: float | None,
    gain_ci: list[float] | None,
    settings: GateSettings,
    within: dict[str, Any] | None = None,
    *,
    coverage: float | None,
    reference: str = BASE_MODEL,
) -> tuple[JudgeGateStatus, list[str]]:
    """Approve or reject, with the reasons. ``within`` (``within_criteria``'s figures) is
    gated only where ``settings.within_criteria`` asks for it. ``coverage``: the share of the
    held-out labels the student gave a verdict on (None: no label). ``reference``: what the
    gain is over, as the reasons name it."""
    reasons = []
    if coverage is None or coverage < settings.min_coverage:
        shown = "none" if coverage is None else f"{coverage:.3f}"
        reasons.append(
            f"the student's verdicts cover {shown} of the held-out labels, below min_coverage "
            f"{settings.min_coverage}: its agreement is measured only where it answered"
        )
    if agreement is None or agreement < settings.min_agreement:
        shown = "none" if agreement is None else f"{agreement:.3f}"
        reasons.append(
            f"agreement with the teacher {shown} is below min_agreement {settings.min_agreement}"
        )
    if gain_ci is None or gain_ci[0] <= settings.min_gain:
        shown = "none" if gain_ci is None else f"[{gain_ci[0]:.3f}, {gain_ci[1]:.3f}]"
        reasons.append(
            f"the gain over {reference} (95% interval {shown}) is not above "
            f"min_gain {settings.min_gain}"
        )
    within_ci = (within or {}).get("gain_ci")
    if settings.within_criteria:
        if not within or not within.get("labels"):
            reasons.append(
                "no held-out criterion is met by some completions and not by others: the "
                "labels cannot tell a judge that reads the completion from one that answers "
                "each criterion the same whatever it says (within_criteria)"
            )
        elif within_ci is None or within_ci[0] <= settings.min_gain:
            shown = "none" if within_ci is None else f"[{within_ci[0]:.3f}, {within_ci[1]:.3f}]"
            reasons.append(
                f"within criteria (the {within['labels']} labels of the {within['criteria']} "
                "held-out criteria that some completions meet and others do not), the gain "
                f"over {reference} (95% interval {shown}) is not above min_gain "
                f"{settings.min_gain}"
            )
    if reasons:
        return JudgeGateStatus.REJECTED, reasons
    assert agreement is not None and gain_ci is not None and coverage is not None
    # "Beats the base model" only where min_gain is 0 or more: a negative one lets a student
    # a little worse than the base model through, and the reason says what was checked.
    reason = (
        f"agreement {agreement:.3f} reaches min_agreement {settings.min_agreement}; the gain "
        f"over {reference} (95% interval [{gain_ci[0]:.3f}, {gain_ci[1]:.3f}]) is above "
        f"min_gain {settings.min_gain}"
    )
    if settings.within_criteria and within and within_ci is not None:
        reason += (
            f", and within criteria ({within['labels']} labels of {within['criteria']} "
            f"criteria) too ([{within_ci[0]:.3f}, {within_ci[1]:.3f}])"
        )
    reason += (
        f"; its verdicts cover {coverage:.3f} of the held-out labels (min_coverage "
        f"{settings.min_coverage})"
    )
    return JudgeGateStatus.APPROVED, [reason]
