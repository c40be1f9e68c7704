"""How well a judge agrees with a label set (``rubricsvc judges evaluate``).

1. Group the set's labels into items (a completion x criterion, a pair of completions, a
   completion), each with its labellers' majority.
2. Have the judge judge what the items need through the ordinary scoring path, so every
   verdict already made comes from the cache (an imported judge's are only read).
3. Read each item's verdict back by its cache key and compare.

Intervals are prompt-clustered percentile bootstraps: items of one prompt are correlated (one
conversation, often one grader), so whole prompts are resampled, never single items.
Agreement counts only items the judge gave a valid verdict for (``n_judged``); the share of
all labelled items it got right, an unjudged one counting as wrong, is reported beside it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.backends import JudgeBackend, replays_only
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging import keys
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    JudgeEvaluation,
    Judgment,
    JudgmentStatus,
    Label,
    LabelKind,
    LabelSet,
    RubricVersion,
)
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.scorer import (
    ScoreOptions,
    ScoreReport,
    case_plan,
    score,
    score_aggregation,
)
from rubricsvc.scoring.selection import Selection, select_work
from rubricsvc.scoring.store import judgments_by_key
from rubricsvc.validation import metrics as m

MET, NOT_MET = "met", "not met"
PAIR_LABELS = ("first", "second", "tie")  # also the order that breaks a tie between them
TAG_MIN_ITEMS = 10  # a tag's own figures only with at least this many items
TAG_LIMIT = 20

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EvaluationOptions:
    resamples: int = 2000
    level: float = 0.95
    seed: int = 0
    bins: int = 10  # reliability bins


@dataclass(frozen=True)
class PointwiseObservation:
    """One completion x criterion: the labellers' majority and the judge's value."""

    prompt_id: int
    completion_id: int
    criterion_id: int
    label: float  # 1.0 met, 0.0 not met (the majority of the labellers)
    judged: float | None  # the judge's value (a probability for criterion-prob); None: failed
    response_length: int
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairObservation:
    """Two completions of one prompt: the labellers' majority and the judge's verdict."""

    prompt_id: int
    first_id: int
    second_id: int
    label: str  # first / second / tie
    judged: str | None  # the judge's verdict, both orders combined; None: no valid verdict
    first_wins: float | None  # the judge's chance that the first is better (a tie: half)
    # Each order's verdict (this order, then the other), seen from the first's side.
    orders: tuple[str | None, ...]
    length_difference: int  # characters of the first minus the second
    tags: tuple[str, ...] = ()
    # Per order (this order, then the other): judged, but without a valid verdict.
    failed: tuple[bool, ...] = (False, False)

    @property
    def consistent(self) -> bool | None:
        """Whether both orders gave the same verdict (None unless both were judged)."""
        if None in self.orders:
            return None
        return self.orders[0] == self.orders[1]


@dataclass(frozen=True)
class ScalarObservation:
    """One completion's score: the labellers' mean on its scale (to 0..1) and the judge's."""

    prompt_id: int
    completion_id: int
    label: float
    judged: float | None
    response_length: int
    tags: tuple[str, ...] = ()


@dataclass
class _Items:
    """A label set's labels by item, with the stored rows they point at."""

    pointwise: dict[tuple[int, int], list[Label]] = field(default_factory=dict)
    pairwise: dict[tuple[int, int], list[Label]] = field(default_factory=dict)
    scalar: dict[int, list[Label]] = field(default_factory=dict)
    completions: dict[int, Completion] = field(default_factory=dict)
    criteria: dict[int, Criterion] = field(default_factory=dict)


def _items(session: Session, label_set: LabelSet) -> _Items:
    items = _Items()
    labels = list(
        session.scalars(select(Label).where(Label.label_set_id == label_set.id).order_by(Label.id))
    )
    for label in labels:
        if label.kind == LabelKind.POINTWISE:
            assert label.criterion_id is not None
            items.pointwise.setdefault((label.completion_id, label.criterion_id), []).append(label)
        elif label.kind == LabelKind.PAIRWISE:
            assert label.other_completion_id is not None
            pair = (label.completion_id, label.other_completion_id)
            items.pairwise.setdefault(pair, []).append(label)
        else:
            items.scalar.setdefault(label.completion_id, []).append(label)
    ids = {label.completion_id for label in labels} | {
        label.other_completion_id for label in labels if label.other_completion_id is not None
    }
    query = select(Completion).where(Completion.id.in_(ids))
    items.completions = {
        c.id: c for c in session.scalars(query.options(selectinload(Completion.prompt)))
    }
    criterion_ids = {label.criterion_id for label in labels if label.criterion_id is not None}
    items.criteria = {
        c.id: c for c in session.scalars(select(Criterion).where(Criterion.id.in_(criterion_ids)))
    }
    return items


@dataclass(frozen=True)
class Judging:
    """The judge under evaluation, in one session: its spec and stored config, and how its
    scoring runs (a backend factory, progress and checkpoint callbacks)."""

    session: Session
    spec: JudgeSpec
    judge_row: JudgeConfig
    backend_factory: Callable[[], JudgeBackend]
    progress: Progress | None = None
    checkpoint: Callable[[], None] | None = None

    @property
    def imported(self) -> bool:
        """The judge's backend only replays stored verdicts (imported ones)."""
        return replays_only(self.spec.backend)

    def judge_what_is_missing(self, selection: Selection) -> ScoreReport | None:
        """Score the selection (the cache answers what is judged already); an imported judge
        judges nothing: its verdicts are only read (None)."""
        if self.imported:
            return None
        return score(
            self.session,
            self.spec,
            selection,
            _score_options(self.spec),
            self.backend_factory,
            progress=self.progress,
            checkpoint=self.checkpoint,
            judge_row=self.judge_row,
        )


def _score_options(spec: JudgeSpec) -> ScoreOptions:
    """The default scoring options, under the aggregation the judge's mode stores scores by."""
    return ScoreOptions(aggregation=score_aggregation(spec, ScoreOptions()))


def _either(names: Sequence[str]) -> str:
    """``a, b or c``."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


def _majority_met(labels: Sequence[Label]) -> float | None:
    verdict = m.majority([MET if label.value >= 0.5 else NOT_MET for label in labels])
    return None if verdict is None else float(verdict == MET)


def _tags(labels: Sequence[Label]) -> tuple[str, ...]:
    return tuple(sorted({tag for label in labels for tag in label.tags or []}))


def pointwise_observations(
    session: Session,
    spec: JudgeSpec,
    label_set: LabelSet,
    backend_factory: Callable[[], JudgeBackend],
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
    judge_row: JudgeConfig | None = None,
) -> list[PointwiseObservation]:
    """Each labelled completion x criterion with a majority, and the judge's value for it."""
    items = _items(session, label_set)
    judge_row = judge_row or ensure_judge_config(session, spec)
    judging = Judging(session, spec, judge_row, backend_factory, progress, checkpoint)
    return _pointwise(judging, items)


def _pointwise(judging: Judging, items: _Items) -> list[PointwiseObservation]:
    if not items.pointwise:
        return []
    session, spec = judging.session, judging.spec
    if get_mode(spec.mode).compares:
        raise ValidationFailed(
            f"judge {spec.name} compares completions ({spec.mode}); pointwise labels need a "
            f"judge of criteria: pass --mode {_either(modes_that(per_criterion=True))}"
        )
    versions = {items.criteria[c].version_id for _, c in items.pointwise}
    completion_ids = tuple(sorted({c for c, _ in items.pointwise}))
    selection = Selection(
        completion_ids=completion_ids, version_ids=tuple(sorted(versions)), include_drafts=True
    )
    judging.judge_what_is_missing(selection)
    version_rows = {
        v.id: v
        for v in session.scalars(
            select(RubricVersion)
            .where(RubricVersion.id.in_(versions))
            .options(selectinload(RubricVersion.criteria))
        )
    }
    key_of: dict[tuple[int, int], str] = {}
    for completion_id, criterion_id in items.pointwise:
        completion = items.completions[completion_id]
        version = version_rows[items.criteria[criterion_id].version_id]
        plan = case_plan(spec, judging.judge_row.config_hash, completion, version)
        if criterion_id not in plan.key_of:
            raise ValidationFailed(
                f"judge {spec.name} ({spec.mode}) does not judge criteria one by one; pointwise "
                "labels need criterion-prob, criterion-text or multi-criterion"
            )
        key_of[(completion_id, criterion_id)] = plan.key_of[criterion_id]
    judged = judgments_by_key(session, key_of.values())
    observations = []
    for (completion_id, criterion_id), labels in items.pointwise.items():
        label = _majority_met(labels)
        if label is None:
            continue  # the labellers split evenly: no majority to compare with
        judgment = judged.get(key_of[(completion_id, criterion_id)])
        completion = items.completions[completion_id]
        if judging.imported:
            value = _imported_verdict(judgment, labels[0].item, pairwise=False)[1]
        else:
            value = _value(judgment)
        observations.append(
            PointwiseObservation(
                completion.prompt_id,
                completion_id,
                criterion_id,
                label,
                value,
                len(completion.text),
                _tags(labels),
            )
        )
    return observations


def _value(judgment: Judgment | None) -> float | None:
    if judgment is None or judgment.status != JudgmentStatus.OK:
        return None
    return judgment.value


def _pair_probs(judgment: Judgment | None, mirrored: bool) -> dict[str, float] | None:
    """A pairwise judgment's probabilities of first / second / tie, seen from the side of the
    completion shown first in the forward order (``mirrored``: this judgment showed it second)."""
    if judgment is None or judgment.status != JudgmentStatus.OK:
        return None
    detail = judgment.detail or {}
    if "p_first" in detail:
        probs = {"first": detail["p_first"], "second": detail["p_second"], "tie": detail["p_tie"]}
    else:  # a verdict without probabilities (imported): all of it on the verdict
        probs = {name: float(judgment.verdict == name) for name in PAIR_LABELS}
    if mirrored:
        probs = {"first": probs["second"], "second": probs["first"], "tie": probs["tie"]}
    return probs


def _pair_versions(
    session: Session, label_set: LabelSet, items: _Items, completion_ids: Sequence[int]
) -> dict[int, RubricVersion]:
    """The rubric version each prompt's pairs are compared under: the label set's, else the
    prompt's own newest (drafts too; with several rubrics, the first made)."""
    prompt_ids = {items.completions[c].prompt_id for c in completion_ids}
    if label_set.rubric_version_id is not None:
        version = session.get(RubricVersion, label_set.rubric_version_id)
        assert version is not None
        return dict.fromkeys(prompt_ids, version)
    found, without = own_rubric_versions(session, completion_ids)
    if without:
        raise ValidationFailed(
            f"label set {label_set.name}: the prompt of completion {without[0].id} has no "
            "rubric to compare its pairs under (import the labels with --rubric NAME@N)"
        )
    return found


def own_rubric_versions(
    session: Session, completion_ids: Sequence[int]
) -> tuple[dict[int, RubricVersion], list[Completion]]:
    """Each prompt's own newest rubric version (drafts too; with several rubrics, the first
    made), by prompt id, and the completions whose prompt has none. The version pairs (and,
    for an imported judge, scalar verdicts) are compared under when the label set names none;
    ``judges import`` keys verdicts under the same one."""
    work, without = select_work(
        session, Selection(completion_ids=tuple(completion_ids), include_drafts=True)
    )
    found: dict[int, RubricVersion] = {}
    for completion, version in sorted(work, key=lambda cv: cv[1].rubric_id):
        found.setdefault(completion.prompt_id, version)
    return found, without


def _imported_verdict(judgment: Judgment | None, item: str, pairwise: bool) -> tuple[bool, Any]:
    """An imported judgment's verdict on one label item: (whether it holds one for the item,
    its verdict: a pairwise verdict or a value, None when the judge gave no valid verdict).

    A source that judged records with the same content more than once (sampling) may have
    said different things: the importers keep each record's verdict in ``detail.by_item``,
    and a judgment holding verdicts tied to items counts only for those items (the same pair
    shown in the other order on another record is that record's verdict, not this one's). A
    judgment with none is a verdict on its content, for every item on it."""
    if judgment is None:
        return False, None
    by_item = (judgment.detail or {}).get("by_item") or {}
    if by_item:
        return (True, by_item[item]) if item in by_item else (False, None)
    if judgment.status != JudgmentStatus.OK:
        return True, None
    return True, judgment.verdict if pairwise else judgment.value


def _order(
    judgment: Judgment | None, mirrored: bool, imported: bool, item: str
) -> tuple[dict[str, float] | None, bool]:
    """One order's probabilities of first / second / tie (seen as ``_pair_probs`` sees them)
    and whether that order was judged without a valid verdict (a failed judgment)."""
    if not imported:
        probs = _pair_probs(judgment, mirrored)
        return probs, judgment is not None and probs is None
    held, verdict = _imported_verdict(judgment, item, pairwise=True)
    if not held:
        return None, False
    if verdict is None:
        return None, True
    probs = {name: float(verdict == name) for name in PAIR_LABELS}
    if mirrored:
        probs = {"first": probs["second"], "second": probs["first"], "tie": probs["tie"]}
    return probs, False


def _argmax(probs: dict[str, float]) -> str:
    return max(PAIR_LABELS, key=lambda name: (probs[name], -PAIR_LABELS.index(name)))


def _pairwise(judging: Judging, label_set: LabelSet, items: _Items) -> list[PairObservation]:
    if not items.pairwise:
        return []
    session, spec = judging.session, judging.spec
    if not get_mode(spec.mode).judges_pairs:
        pair_modes = _either(modes_that(judges_pairs=True))
        raise ValidationFailed(
            f"pairwise labels need a judge in the {pair_modes} mode; judge {spec.name} is "
            f"{spec.mode}: pass --mode {pair_modes}"
        )
    pairs = tuple(sorted(items.pairwise))
    completion_ids = tuple(sorted({c for pair in pairs for c in pair}))
    version_of = _pair_versions(session, label_set, items, completion_ids)
    selection = Selection(
        completion_ids=completion_ids,
        version_ids=tuple(sorted({v.id for v in version_of.values()})),
        include_drafts=True,
        pairs=pairs,
    )
    judging.judge_what_is_missing(selection)
    order_keys: dict[tuple[int, int], tuple[str, str]] = {}
    for first_id, second_id in pairs:
        first, second = items.completions[first_id], items.completions[second_id]
        prompt_hash = first.prompt.content_hash
        version = version_of[first.prompt_id]
        order_keys[(first_id, second_id)] = keys.pair_keys(
            judging.judge_row.config_hash,
            version.content_hash,
            prompt_hash,
            first.content_hash,
            second.content_hash,
        )
    judged = judgments_by_key(session, [k for both in order_keys.values() for k in both])
    observations = []
    for pair, labels in items.pairwise.items():
        label = m.majority([lb.verdict or "" for lb in labels])
        if label is None:
            continue
        forward, backward = order_keys[pair]
        # An imported source's verdicts on this very record, in each order it was shown.
        imported = judging.imported
        read = [
            _order(judged.get(forward), False, imported, labels[0].item),
            _order(judged.get(backward), True, imported, labels[0].item),
        ]
        sides = [probs for probs, _ in read]
        seen = [probs for probs in sides if probs is not None]
        combined = (
            {name: math.fsum(p[name] for p in seen) / len(seen) for name in PAIR_LABELS}
            if seen
            else None
        )
        first, second = items.completions[pair[0]], items.completions[pair[1]]
        observations.append(
            PairObservation(
                first.prompt_id,
                pair[0],
                pair[1],
                label,
                _argmax(combined) if combined else None,
                combined["first"] + combined["tie"] / 2 if combined else None,
                tuple(_argmax(p) if p is not None else None for p in sides),
                len(first.text) - len(second.text),
                _tags(labels),
                tuple(failed for _, failed in read),
            )
        )
    return observations


def _scalar(judging: Judging, label_set: LabelSet, items: _Items) -> list[ScalarObservation]:
    if not items.scalar:
        return []
    completion_ids = tuple(sorted(items.scalar))
    selection = Selection(
        completion_ids=completion_ids,
        version_ids=(label_set.rubric_version_id,) if label_set.rubric_version_id else (),
        include_drafts=True,
    )
    if judging.imported:
        by_completion = _imported_scores(judging, label_set, items)
    else:
        report = judging.judge_what_is_missing(selection)
        assert report is not None  # not an imported judge
        by_completion = defaultdict(list)
        for scored in report.scores:
            if scored.value is not None:
                by_completion[scored.completion_id].append(scored.value)
    observations = []
    for completion_id, labels in items.scalar.items():
        values = [
            (lb.value - (lb.scale_min or 0.0)) / ((lb.scale_max or 1.0) - (lb.scale_min or 0.0))
            for lb in labels
        ]
        judged = by_completion.get(completion_id)
        completion = items.completions[completion_id]
        observations.append(
            ScalarObservation(
                completion.prompt_id,
                completion_id,
                math.fsum(values) / len(values),
                math.fsum(judged) / len(judged) if judged else None,
                len(completion.text),
                _tags(labels),
            )
        )
    return observations


def _imported_scores(
    judging: Judging, label_set: LabelSet, items: _Items
) -> dict[int, list[float]]:
    """An imported holistic judge's scores (its values, in [0, 1]) of the labelled
    completions, read under the version ``judges import`` keys them under: the label set's,
    else each prompt's own (``own_rubric_versions``)."""
    session, spec = judging.session, judging.spec
    mode = get_mode(spec.mode)
    if mode.per_criterion or mode.compares:
        whole = _either(modes_that(per_criterion=False, compares=False))
        raise ValidationFailed(
            f"judge {spec.name} holds imported {spec.mode} verdicts: scalar labels need a judge "
            f"that scores, or imported scalar verdicts (mode {whole})"
        )
    completion_ids = sorted(items.scalar)
    if label_set.rubric_version_id is not None:
        chosen = session.get(RubricVersion, label_set.rubric_version_id)
        assert chosen is not None
        version_of = {items.completions[c].prompt_id: chosen for c in completion_ids}
    else:
        version_of, _ = own_rubric_versions(session, completion_ids)
    key_of: dict[int, str] = {}
    for completion_id in completion_ids:
        completion = items.completions[completion_id]
        version = version_of.get(completion.prompt_id)
        if version is not None:
            plan = case_plan(spec, judging.judge_row.config_hash, completion, version)
            key_of[completion_id] = plan.items[0].key
    judged = judgments_by_key(session, key_of.values())
    scores: dict[int, list[float]] = defaultdict(list)
    for completion_id, key in key_of.items():
        item = items.scalar[completion_id][0].item
        value = _imported_verdict(judged.get(key), item, pairwise=False)[1]
        if value is not None:
            scores[completion_id].append(value)
    return scores


# --- figures --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Figures:
    options: EvaluationOptions

    def interval(
        self, clusters: Sequence[int], statistic: Callable[[Sequence[int]], float | None]
    ) -> list[float] | None:
        found = m.bootstrap_interval(
            clusters,
            statistic,
            resamples=self.options.resamples,
            level=self.options.level,
            seed=self.options.seed,
        )
        return list(found) if found is not None else None

    def with_interval(
        self,
        clusters: Sequence[int],
        statistic: Callable[[Sequence[int]], float | None],
    ) -> tuple[float | None, list[float] | None]:
        return statistic(range(len(clusters))), self.interval(clusters, statistic)


def _agreement_fields(
    figures: _Figures, clusters: Sequence[int], predicted: Sequence[str], truth: Sequence[str]
) -> dict[str, Any]:
    def agree(ix: Sequence[int]) -> float | None:
        return m.accuracy([predicted[i] for i in ix], [truth[i] for i in ix])

    def kappa(ix: Sequence[int]) -> float | None:
        return m.cohen_kappa([predicted[i] for i in ix], [truth[i] for i in ix])

    agreement, agreement_ci = figures.with_interval(clusters, agree)
    kappa_value, kappa_ci = figures.with_interval(clusters, kappa)
    return {
        "agreement": agreement,
        "agreement_ci": agreement_ci,
        "kappa": kappa_value,
        "kappa_ci": kappa_ci,
    }


def _length_bias(
    judged: Sequence[float], labelled: Sequence[float], lengths: Sequence[float]
) -> dict[str, Any]:
    return {
        "judge_vs_length_spearman": m.spearman(judged, lengths),
        "labels_vs_length_spearman": m.spearman(labelled, lengths),
    }


def _by_tag(
    tags: Sequence[tuple[str, ...]], statistic: Callable[[Sequence[int]], float | None]
) -> dict[str, dict[str, Any]]:
    indices: dict[str, list[int]] = defaultdict(list)
    for i, item_tags in enumerate(tags):
        for tag in item_tags:
            indices[tag].append(i)
    common = sorted(indices.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:TAG_LIMIT]
    return {
        tag: {"n": len(ix), "value": statistic(ix)}
        for tag, ix in common
        if len(ix) >= TAG_MIN_ITEMS
    }


def pointwise_figures(
    observations: Sequence[PointwiseObservation], options: EvaluationOptions
) -> dict[str, Any]:
    figures = _Figures(options)
    judged = [o for o in observations if o.judged is not None]
    predicted = [MET if (o.judged or 0.0) >= 0.5 else NOT_MET for o in judged]
    truth = [MET if o.label >= 0.5 else NOT_MET for o in judged]
    clusters = [o.prompt_id for o in judged]
    result: dict[str, Any] = {
        "kind": "pointwise",
        "n_labelled": len(observations),
        "n_judged": len(judged),
        **_agreement_fields(figures, clusters, predicted, truth),
    }

    def f1(ix: Sequence[int]) -> float | None:
        return m.f1([predicted[i] for i in ix], [truth[i] for i in ix], MET)

    result["f1"], result["f1_ci"] = figures.with_interval(clusters, f1)
    probs = [o.judged or 0.0 for o in judged]
    outcomes = [o.label for o in judged]

    def ece(ix: Sequence[int]) -> float | None:
        return m.expected_calibration_error(
            [probs[i] for i in ix], [outcomes[i] for i in ix], options.bins
        )

    result["ece"], result["ece_ci"] = figures.with_interval(clusters, ece)
    result["reliability"] = [
        {
            "low": b.low,
            "high": b.high,
            "count": b.count,
            "mean_prob": b.mean_prob,
            "frequency": b.frequency,
        }
        for b in m.reliability_bins(probs, outcomes, options.bins)
    ]
    result["label_base_rate"] = (math.fsum(outcomes) / len(outcomes)) if outcomes else None
    result["length_bias"] = _length_bias(
        probs, outcomes, [float(o.response_length) for o in judged]
    )
    result["by_tag"] = _by_tag(
        [o.tags for o in judged],
        lambda ix: m.accuracy([predicted[i] for i in ix], [truth[i] for i in ix]),
    )
    return result


def pairwise_figures(
    observations: Sequence[PairObservation], options: EvaluationOptions
) -> dict[str, Any]:
    figures = _Figures(options)
    judged = [o for o in observations if o.judged is not None]
    predicted = [o.judged or "" for o in judged]
    truth = [o.label for o in judged]
    clusters = [o.prompt_id for o in judged]
    result: dict[str, Any] = {
        "kind": "pairwise",
        "ties": "a third class, as PandaLM's evaluation counts them: a tie agrees only with a tie",
        "n_labelled": len(observations),
        "n_judged": len(judged),
        **_agreement_fields(figures, clusters, predicted, truth),
    }
    right = sum(1 for o in judged if o.judged == o.label)
    result["correct"] = right
    result["agreement_all"] = right / len(observations) if observations else None
    result["macro_f1"] = m.macro_f1(predicted, truth, PAIR_LABELS)
    both = [o for o in judged if o.consistent is not None]
    result["position"] = {
        "both_orders_judged": len(both),
        "consistency": (sum(1 for o in both if o.consistent) / len(both)) if both else None,
        "first_shown_wins": _first_shown_share(observations),
        "labels_first_wins": (
            sum(1 for o in observations if o.label == "first") / len(observations)
            if observations
            else None
        ),
    }
    if any(o.orders[1] is not None or o.failed[1] for o in observations):
        result.update(order_figures(observations))
    label_value = {"first": 1.0, "second": 0.0, "tie": 0.5}
    result["length_bias"] = _length_bias(
        [o.first_wins or 0.0 for o in judged],
        [label_value[o.label] for o in judged],
        [float(o.length_difference) for o in judged],
    )
    result["by_tag"] = _by_tag(
        [o.tags for o in judged],
        lambda ix: m.accuracy([predicted[i] for i in ix], [truth[i] for i in ix]),
    )
    return result


def order_figures(observations: Sequence[PairObservation]) -> dict[str, Any]:
    """Each order on its own, for a judge with verdicts in both orders: ``as_labelled`` shows
    the label's first response first, ``swapped`` its second. Per order, ``n`` counts the pairs
    with a valid verdict in that order, ``correct`` those whose verdict is the label (a tie
    agrees only with a tie) and ``failed`` the pairs judged in that order without a valid
    verdict (not in ``n``). Over the pairs with valid verdicts in both orders:
    ``both_orders_correct`` (both are the label) and ``position_consistency`` (both name the
    same response, or both a tie)."""
    orders: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(("as_labelled", "swapped")):
        valid = [o for o in observations if o.orders[index] is not None]
        correct = sum(1 for o in valid if o.orders[index] == o.label)
        orders[name] = {
            "n": len(valid),
            "correct": correct,
            "agreement": correct / len(valid) if valid else None,
            "failed": sum(1 for o in observations if o.failed[index]),
        }
    both = [o for o in observations if None not in o.orders]
    same = sum(1 for o in both if o.orders[0] == o.orders[1])
    return {
        "orders": orders,
        "both_orders_correct": {
            "n": len(both),
            "correct": sum(1 for o in both if o.orders[0] == o.orders[1] == o.label),
        },
        "position_consistency": {
            "n": len(both),
            "same": same,
            "share": same / len(both) if both else None,
        },
    }


def _first_shown_share(observations: Sequence[PairObservation]) -> float | None:
    """Of every order judged, the share whose verdict went to the response shown first."""
    shown_first = []
    for o in observations:
        for index, verdict in enumerate(o.orders):
            if verdict is None:
                continue
            # orders are seen from the forward first's side: in the mirrored order the one
            # shown first is the forward second.
            shown_first.append(verdict == ("first" if index == 0 else "second"))
    return sum(shown_first) / len(shown_first) if shown_first else None


def scalar_figures(
    observations: Sequence[ScalarObservation], options: EvaluationOptions
) -> dict[str, Any]:
    figures = _Figures(options)
    judged = [o for o in observations if o.judged is not None]
    x = [o.judged or 0.0 for o in judged]
    y = [o.label for o in judged]
    clusters = [o.prompt_id for o in judged]

    def concordance(ix: Sequence[int]) -> float | None:
        tau = m.kendall_tau_b([x[i] for i in ix], [y[i] for i in ix])
        return None if tau is None else (tau + 1) / 2

    result: dict[str, Any] = {
        "kind": "scalar",
        "agreement_is": "(Kendall's tau-b + 1) / 2: the share of pairs ordered as the labels",
        "n_labelled": len(observations),
        "n_judged": len(judged),
    }
    result["agreement"], result["agreement_ci"] = figures.with_interval(clusters, concordance)
    for name, fn in (
        ("pearson", m.pearson),
        ("spearman", m.spearman),
        ("kendall", m.kendall_tau_b),
    ):

        def stat(ix: Sequence[int], fn: Callable[..., float | None] = fn) -> float | None:
            return fn([x[i] for i in ix], [y[i] for i in ix])

        result[name], result[f"{name}_ci"] = figures.with_interval(clusters, stat)
    result["length_bias"] = _length_bias(x, y, [float(o.response_length) for o in judged])
    return result


# --- the evaluation -------------------------------------------------------------------------


def evaluate(
    session: Session,
    spec: JudgeSpec,
    label_set: LabelSet,
    backend_factory: Callable[[], JudgeBackend],
    options: EvaluationOptions | None = None,
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], JudgeEvaluation]:
    """The judge's figures on the label set, stored against its config and the set's hash."""
    options = options or EvaluationOptions()
    if spec.jury is not None:
        raise ValidationFailed(
            f"judge {spec.name} is a jury, which has no verdicts of its own to compare: "
            "evaluate its members (`rubricsvc judges show` names them)"
        )
    judge_row = ensure_judge_config(session, spec)
    judging = Judging(session, spec, judge_row, backend_factory, progress, checkpoint)
    items = _items(session, label_set)
    by_kind: dict[str, dict[str, Any]] = {}
    point = _pointwise(judging, items)
    if point:
        by_kind["pointwise"] = pointwise_figures(point, options)
    pairs = _pairwise(judging, label_set, items)
    if pairs:
        by_kind["pairwise"] = pairwise_figures(pairs, options)
    scalars = _scalar(judging, label_set, items)
    if scalars:
        by_kind["scalar"] = scalar_figures(scalars, options)
    if not by_kind:
        raise ValidationFailed(f"label set {label_set.name} has no item with a majority label")
    main = max(by_kind.values(), key=lambda figures: figures["n_labelled"])
    n_labelled, n_judged = main["n_labelled"], main["n_judged"]
    report: dict[str, Any] = {
        "judge": spec.name,
        "judge_config_hash": judge_row.config_hash,
        "mode": spec.mode,
        "labels": label_set.name,
        "label_set_hash": label_set.content_hash,
        "n_labelled": n_labelled,
        "n_judged": n_judged,
        "coverage": n_judged / n_labelled if n_labelled else None,
        **{k: v for k, v in main.items() if k not in {"n_labelled", "n_judged"}},
        "interval": {
            "level": options.level,
            "resamples": options.resamples,
            "seed": options.seed,
            "clusters": "prompts",
        },
    }
    if len(by_kind) > 1:
        report["by_kind"] = by_kind
    row = JudgeEvaluation(
        judge_config_id=judge_row.id,
        label_set_id=label_set.id,
        label_set_hash=label_set.content_hash,
        n_labelled=n_labelled,
        n_judged=n_judged,
        agreement=report.get("agreement"),
        report=report,
    )
    session.add(row)
    session.flush()
    return report, row


def evaluations_of(session: Session, judge_config_ids: Sequence[int]) -> list[JudgeEvaluation]:
    """Stored evaluations of these judge configs, newest first."""
    query = (
        select(JudgeEvaluation)
        .where(JudgeEvaluation.judge_config_id.in_(judge_config_ids))
        .options(selectinload(JudgeEvaluation.label_set))
        .order_by(JudgeEvaluation.id.desc())
    )
    return list(session.scalars(query))
