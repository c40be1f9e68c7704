"""What every label kind's evaluation shares: a label set's labels grouped into items, the
judge under evaluation (``Judging``), the options, and the figures all kinds report (intervals,
agreement, length bias, by tag)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.backends import JudgeBackend, replays_only
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    Judgment,
    JudgmentStatus,
    Label,
    LabelKind,
    LabelSet,
    RubricVersion,
)
from rubricsvc.scoring.scorer import ScoreOptions, ScoreReport, score, score_aggregation
from rubricsvc.scoring.selection import Selection, select_work
from rubricsvc.validation import metrics as m

TAG_MIN_ITEMS = 10  # a tag's own figures only with at least this many items
TAG_LIMIT = 20
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EvaluationOptions:
    resamples: int = 2000
    level: float = 0.95
    seed: int = 0
    bins: int = 10  # reliability bins


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


def _tags(labels: Sequence[Label]) -> tuple[str, ...]:
    return tuple(sorted({tag for label in labels for tag in label.tags or []}))


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
