"""Several judges against one label set (``rubricsvc judges compare``).

Judges are compared on the same items only: the items every one of them gave a valid verdict
for. On those, each judge's figures are exactly what ``judges evaluate`` reports for them, and
each pair's difference in agreement gets a paired bootstrap interval over prompts: every
replicate draws prompts once and computes both judges' agreement on that same draw, so what the
two judges have in common (easy prompts, hard prompts) cancels out of the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import combinations
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.backends import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import LabelKind, LabelSet
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.validation import evaluation as ev
from rubricsvc.validation import metrics as m
from rubricsvc.validation.evaluation.common import _Items, _items
from rubricsvc.validation.evaluation.pairwise import _pairwise
from rubricsvc.validation.evaluation.pointwise import _pointwise
from rubricsvc.validation.evaluation.scalar import _scalar

Observation = ev.PointwiseObservation | ev.PairObservation | ev.ScalarObservation


def _item_key(observation: Observation) -> Hashable:
    if isinstance(observation, ev.PointwiseObservation):
        return ("pointwise", observation.completion_id, observation.criterion_id)
    if isinstance(observation, ev.PairObservation):
        return ("pairwise", observation.first_id, observation.second_id)
    return ("scalar", observation.completion_id)


def agreement_statistic(
    kind: LabelKind, observations: Sequence[Observation]
) -> Callable[[Sequence[int]], float | None]:
    """The agreement ``judges evaluate`` reports for this kind, over item indices of
    ``observations`` (all with a verdict): the share right (pointwise, pairwise) or the
    concordance (scalar)."""
    if kind == LabelKind.SCALAR:
        x = [o.judged or 0.0 for o in observations if isinstance(o, ev.ScalarObservation)]
        y = [o.label for o in observations if isinstance(o, ev.ScalarObservation)]

        def concordance(ix: Sequence[int]) -> float | None:
            tau = m.kendall_tau_b([x[i] for i in ix], [y[i] for i in ix])
            return None if tau is None else (tau + 1) / 2

        return concordance
    right: list[bool] = []
    for o in observations:
        if isinstance(o, ev.PointwiseObservation):
            right.append(((o.judged or 0.0) >= 0.5) == (o.label >= 0.5))
        elif isinstance(o, ev.PairObservation):
            right.append(o.judged == o.label)

    def share(ix: Sequence[int]) -> float | None:
        return sum(1 for i in ix if right[i]) / len(ix) if ix else None

    return share


def _kind(items: _Items) -> LabelKind:
    """The kind with the most labelled items (the one ``judges evaluate`` reports first)."""
    sizes = [
        (LabelKind.POINTWISE, len(items.pointwise)),
        (LabelKind.PAIRWISE, len(items.pairwise)),
        (LabelKind.SCALAR, len(items.scalar)),
    ]
    return max(sizes, key=lambda ks: ks[1])[0]


def compare(
    session: Session,
    specs: Sequence[JudgeSpec],
    label_set: LabelSet,
    backend_factories: Sequence[Callable[[], JudgeBackend]],
    options: ev.EvaluationOptions | None = None,
    progress: ev.Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Every judge's figures on the items all of them judged, and each pair's difference in
    agreement with a paired prompt bootstrap interval (nothing is stored)."""
    options = options or ev.EvaluationOptions()
    if len(specs) < 2:
        raise ValidationFailed("judges compare needs at least two judges")
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValidationFailed(f"a judge is named twice: {', '.join(names)}")
    items = _items(session, label_set)
    kind = _kind(items)
    per_judge: list[list[Observation]] = []
    for spec, factory in zip(specs, backend_factories, strict=True):
        if spec.jury is not None:
            raise ValidationFailed(
                f"judge {spec.name} is a jury, which has no verdicts of its own to compare"
            )
        row = ensure_judge_config(session, spec)
        judging = ev.Judging(session, spec, row, factory, progress, checkpoint)
        found: Sequence[Observation]
        if kind == LabelKind.POINTWISE:
            found = _pointwise(judging, items)
        elif kind == LabelKind.PAIRWISE:
            found = _pairwise(judging, label_set, items)
        else:
            found = _scalar(judging, label_set, items)
        per_judge.append(list(found))
    if not per_judge[0]:
        raise ValidationFailed(f"label set {label_set.name} has no item with a majority label")
    judged_keys = [{_item_key(o) for o in obs if o.judged is not None} for obs in per_judge]
    common = set.intersection(*judged_keys)
    # The label set's order (every judge's observations come in it), so each judge's subset
    # lines up item for item with the others'.
    order = [_item_key(o) for o in per_judge[0] if _item_key(o) in common]
    subsets: list[list[Observation]] = []
    for obs in per_judge:
        by_key = {_item_key(o): o for o in obs}
        subsets.append([by_key[key] for key in order])
    figures_of: dict[LabelKind, Callable[..., dict[str, Any]]] = {
        LabelKind.POINTWISE: ev.pointwise_figures,
        LabelKind.PAIRWISE: ev.pairwise_figures,
        LabelKind.SCALAR: ev.scalar_figures,
    }
    judges: list[dict[str, Any]] = []
    for spec, subset, keys in zip(specs, subsets, judged_keys, strict=True):
        figures = figures_of[kind](subset, options) if subset else {}
        judges.append(
            {
                "judge": spec.name,
                "mode": spec.mode,
                "judge_config_hash": ensure_judge_config(session, spec).config_hash,
                "n_judged_in_set": len(keys),
                **{k: v for k, v in figures.items() if k not in {"kind", "n_labelled"}},
            }
        )
    clusters = [o.prompt_id for o in subsets[0]]
    statistics = [agreement_statistic(kind, subset) for subset in subsets]
    differences = []
    for (i, a), (j, b) in combinations(enumerate(names), 2):

        def difference(
            ix: Sequence[int],
            first: Callable[[Sequence[int]], float | None] = statistics[i],
            second: Callable[[Sequence[int]], float | None] = statistics[j],
        ) -> float | None:
            x, y = first(ix), second(ix)
            return None if x is None or y is None else x - y

        value = difference(range(len(clusters))) if clusters else None
        interval = (
            m.bootstrap_interval(
                clusters,
                difference,
                resamples=options.resamples,
                level=options.level,
                seed=options.seed,
            )
            if clusters
            else None
        )
        differences.append(
            {
                "a": a,
                "b": b,
                "difference": value,
                "difference_ci": list(interval) if interval is not None else None,
                "excludes_zero": interval is not None and (interval[0] > 0 or interval[1] < 0),
            }
        )
    return {
        "labels": label_set.name,
        "label_set_hash": label_set.content_hash,
        "kind": kind.value,
        "n_labelled": len(per_judge[0]),
        "n_common": len(order),
        "n_prompts": len(set(clusters)),
        "judges": judges,
        "differences": differences,
        "interval": {
            "level": options.level,
            "resamples": options.resamples,
            "seed": options.seed,
            "clusters": "prompts",
            "paired": "each replicate draws prompts once, for both judges",
        },
    }
