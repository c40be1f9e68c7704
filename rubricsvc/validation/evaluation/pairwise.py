"""Pairwise labels: which of two completions of one prompt is better (or a tie), against the
judge's verdicts in both orders: agreement, position consistency and each order's figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging import keys
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.models import Judgment, JudgmentStatus, LabelSet, RubricVersion
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.store import judgments_by_key
from rubricsvc.validation import metrics as m
from rubricsvc.validation.evaluation.common import (
    EvaluationOptions,
    Judging,
    _agreement_fields,
    _by_tag,
    _either,
    _Figures,
    _imported_verdict,
    _Items,
    _length_bias,
    _tags,
    own_rubric_versions,
)
from rubricsvc.validation.evaluation.scores import scores_of

PAIR_LABELS = ("first", "second", "tie")  # also the order that breaks a tie between them


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
    item: str = ""  # the label item (a benchmark's record and pair)
    # A judge that scores completions: the two completions' scores (first, second), as the
    # judge gave them (an imported reward model's own numbers); the verdict is their order.
    scores: tuple[float, float] | None = None

    @property
    def consistent(self) -> bool | None:
        """Whether both orders gave the same verdict (None unless both were judged)."""
        if None in self.orders:
            return None
        return self.orders[0] == self.orders[1]


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
    mode = get_mode(spec.mode)
    if not mode.judges_pairs and mode.compares:
        pair_modes = _either(modes_that(judges_pairs=True))
        raise ValidationFailed(
            f"pairwise labels need a judge in the {pair_modes} mode, or one that scores each "
            f"completion; judge {spec.name} is {spec.mode}: pass --mode {pair_modes}"
        )
    pairs = tuple(sorted(items.pairwise))
    completion_ids = tuple(sorted({c for pair in pairs for c in pair}))
    version_of = _pair_versions(session, label_set, items, completion_ids)
    if not mode.judges_pairs:
        return _pairs_by_scores(judging, items, completion_ids, version_of)
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
                labels[0].item,
            )
        )
    return observations


def _pairs_by_scores(
    judging: Judging,
    items: _Items,
    completion_ids: Sequence[int],
    version_of: dict[int, RubricVersion],
) -> list[PairObservation]:
    """Pairs compared by a judge that scores each completion on its own (a reward model's
    imported scores, a rubric judge's aggregate): the one with the higher score is its
    verdict, equal scores a tie. Nothing is shown in an order, so there are no per-order
    figures, and a pair lacking either score has no verdict."""
    completions = [items.completions[c] for c in completion_ids]
    scores = scores_of(judging, completions, version_of)
    observations = []
    for (first_id, second_id), labels in items.pairwise.items():
        label = m.majority([lb.verdict or "" for lb in labels])
        if label is None:
            continue
        first, second = items.completions[first_id], items.completions[second_id]
        a, b = scores.get(first_id), scores.get(second_id)
        judged = None
        if a is not None and b is not None:
            judged = "first" if a.raw > b.raw else "second" if a.raw < b.raw else "tie"
        observations.append(
            PairObservation(
                first.prompt_id,
                first_id,
                second_id,
                label,
                judged,
                {"first": 1.0, "second": 0.0, "tie": 0.5}[judged] if judged else None,
                (None, None),
                len(first.text) - len(second.text),
                _tags(labels),
                (False, False),
                labels[0].item,
                (a.raw, b.raw) if a is not None and b is not None else None,
            )
        )
    return observations


# --- figures --------------------------------------------------------------------------------


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
        # A judge that scores completions is compared by its two scores (no order shown).
        "compared_by": "scores" if any(o.scores is not None for o in observations) else "verdicts",
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
