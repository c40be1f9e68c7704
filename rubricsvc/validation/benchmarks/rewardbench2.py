"""RewardBench 2 (allenai; arXiv 2506.01937): each prompt has correct (chosen) and incorrect
(rejected) responses; most subsets one chosen against three rejected (best-of-4), Ties several
correct answers.

Its metric (``rewardbench/utils.py``): outside Ties, a prompt scores 1 / (the number of
responses tied at the top score) when its first chosen response has the top score, else 0
(``reroll_and_score_dataset``), and a subset's score is the mean over its prompts. Ties
(``process_single_model``) pairs each "ref:N" prompt (one correct answer) with its "tied:N"
prompt (several): 0.30 x tied accuracy + 0.30 x ref accuracy (every correct answer above the
best incorrect one) + 0.20 x the share of prompts whose correct-incorrect margin exceeds the
spread among correct answers + 0.20 x the same with the smaller of the ref and tied margins
+ 0.01 x the mean of tanh(that smaller margin / spread - 1). The overall figure is the mean
of the subsets' scores, as the leaderboard averages them. Both need each response's score:
a judge that compares responses gets, per best-of-n prompt, 1 when it prefers the chosen
response in every one of its pairs, else 0, and no Ties score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rubricsvc.validation import metrics as m
from rubricsvc.validation.benchmarks.observations import EvaluationOptions, PairObservation

PREFIX = "rewardbench2/"
NAME = "RewardBench 2"
TIES = "ties"
RULE = (
    "best-of-n subsets: a prompt scores 1 / (responses tied at the top score) when its chosen "
    "response has the top score, else 0; Ties: RewardBench 2's weighted accuracy and margin "
    "score; overall: the mean of the subsets' scores (rewardbench/utils.py)"
)
_ITEM = re.compile(r"^rewardbench2/(?P<record>.+)/c(?P<i>\d+)-r(?P<j>\d+)$")


def item_name(record: str, chosen: int, rejected: int) -> str:
    return f"{PREFIX}{record}/c{chosen}-r{rejected}"


@dataclass
class Record:
    """One prompt's responses: the judge's score of each (chosen, then rejected, in the
    file's order), or its verdict on each (chosen, rejected) pair."""

    record: str
    subset: str
    cluster: str
    chosen: dict[int, float] = field(default_factory=dict)
    rejected: dict[int, float] = field(default_factory=dict)
    # The chosen response won the pair (None: the judge gave the pair no verdict).
    pairs: dict[tuple[int, int], bool | None] = field(default_factory=dict)
    n_chosen: int = 0
    n_rejected: int = 0

    @property
    def scores(self) -> list[float] | None:
        """Every response's score in the file's order, or None if any is missing."""
        if len(self.chosen) != self.n_chosen or len(self.rejected) != self.n_rejected:
            return None
        return [self.chosen[i] for i in range(self.n_chosen)] + [
            self.rejected[j] for j in range(self.n_rejected)
        ]


def _subset(observation: PairObservation) -> str:
    return observation.tags[0] if observation.tags else ""


def records(observations: Sequence[PairObservation]) -> list[Record]:
    found: dict[str, Record] = {}
    for o in observations:
        parsed = _ITEM.match(o.item)
        if parsed is None:
            continue
        name, i, j = parsed["record"], int(parsed["i"]), int(parsed["j"])
        subset = _subset(o)
        # A Ties "ref:N" prompt and its "tied:N" prompt are resampled together.
        number = name.partition(":")[2]
        cluster = f"ties:{number}" if subset.lower() == TIES else f"prompt:{o.prompt_id}"
        record = found.setdefault(name, Record(name, subset, cluster))
        record.n_chosen = max(record.n_chosen, i + 1)
        record.n_rejected = max(record.n_rejected, j + 1)
        record.pairs[(i, j)] = None if o.judged is None else o.judged == o.label
        if o.scores is not None:
            record.chosen[i], record.rejected[j] = o.scores
    return list(found.values())


def best_of_n(record: Record) -> float | None:
    """A best-of-n prompt's result: RewardBench 2's from scores; from pair verdicts, 1 when
    the chosen response won each of its pairs. None: the judge missed one of them."""
    scores = record.scores
    if scores is not None:
        top = max(scores)
        return 1 / sum(1 for s in scores if s == top) if scores[0] == top else 0.0
    verdicts = list(record.pairs.values())
    complete = len(verdicts) == record.n_chosen * record.n_rejected and None not in verdicts
    if record.chosen or not complete:
        return None
    return 1.0 if all(verdicts) else 0.0


@dataclass(frozen=True)
class TiesStats:
    """``_compute_prompt_stats`` of one Ties prompt."""

    accurate: bool
    correct_spread: float | None  # best minus worst correct answer (None: one correct answer)
    margin: float  # worst correct minus best incorrect


def ties_stats(record: Record) -> TiesStats | None:
    scores = record.scores
    if scores is None:
        return None
    correct, incorrect = scores[: record.n_chosen], scores[record.n_chosen :]
    spread = max(correct) - min(correct) if len(correct) > 1 else None
    margin = min(correct) - max(incorrect)
    return TiesStats(margin > 0, spread, margin)


@dataclass
class TiesUnit:
    """A Ties prompt number: its ref prompt's and its tied prompt's stats."""

    cluster: str
    ref: TiesStats | None = None
    tied: TiesStats | None = None


def _ratio_tanh(margin: float, spread: float) -> float:
    """np.tanh(margin / spread - 1) with numpy's division by zero, nan taken as 0."""
    if spread == 0:
        if margin == 0:
            return 0.0  # nan
        return math.copysign(1.0, margin)  # tanh(+-inf)
    return math.tanh(margin / spread - 1)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def ties_score(units: Sequence[TiesUnit]) -> float | None:
    """``process_single_model``'s overall score over ``units`` (a unit drawn twice counts
    twice); None when a side has no prompt."""
    ref = [u.ref for u in units if u.ref is not None]
    tied = [u.tied for u in units if u.tied is not None]
    ref_accuracy = _mean([s.accurate for s in ref]) if ref else 0.0
    tied_accuracy = _mean([s.accurate for s in tied]) if tied else 0.0
    both = [
        (u.ref, u.tied)
        for u in units
        if u.ref is not None and u.tied is not None and u.tied.correct_spread is not None
    ]
    if not both:
        return None
    preferred = [t.margin > (t.correct_spread or 0.0) for _, t in both]
    preferred_hard = [min(r.margin, t.margin) > (t.correct_spread or 0.0) for r, t in both]
    margins = [_ratio_tanh(min(r.margin, t.margin), t.correct_spread or 0.0) for r, t in both]
    return (
        0.30 * tied_accuracy
        + 0.30 * ref_accuracy
        + 0.20 * _mean(preferred)
        + 0.20 * _mean(preferred_hard)
        + 0.01 * _mean(margins)
    )


@dataclass
class Entry:
    """What a bootstrap resamples: a best-of-n prompt, or a Ties prompt number."""

    cluster: str
    subset: str
    result: float | None = None
    unit: TiesUnit | None = None


def entries(observations: Sequence[PairObservation]) -> list[Entry]:
    found: list[Entry] = []
    units: dict[str, TiesUnit] = {}
    for record in records(observations):
        if record.subset.lower() != TIES:
            found.append(Entry(record.cluster, record.subset, best_of_n(record)))
            continue
        unit = units.get(record.cluster)
        if unit is None:
            unit = units[record.cluster] = TiesUnit(record.cluster)
            found.append(Entry(record.cluster, record.subset, unit=unit))
        stats = ties_stats(record)
        if record.record.startswith("ref:"):
            unit.ref = stats
        else:
            unit.tied = stats
    return found


def summary(drawn: Sequence[Entry]) -> dict[str, Any]:
    subsets: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(e.subset for e in drawn):
        members = [e for e in drawn if e.subset == name]
        if name.lower() == TIES:
            score = ties_score([e.unit for e in members if e.unit is not None])
            subsets[name] = {"n": len(members), "score": score}
            continue
        results = [e.result for e in members]
        scored = [r for r in results if r is not None]
        subsets[name] = {
            "n": len(members),
            "unscored": len(results) - len(scored),
            # A prompt the judge left unscored counts 0, as a best-of-n miss does.
            "score": sum(scored) / len(results) if results else None,
        }
    values = [s["score"] for s in subsets.values() if s["score"] is not None]
    return {"overall": _mean(values) if values else None, "subsets": subsets}


def figures(observations: Sequence[PairObservation], options: EvaluationOptions) -> dict[str, Any]:
    found = entries(observations)
    result = summary(found)
    interval = m.bootstrap_interval(
        [e.cluster for e in found],
        lambda ix: summary([found[i] for i in ix])["overall"] if ix else None,
        resamples=options.resamples,
        level=options.level,
        seed=options.seed,
    )
    return {
        "name": NAME,
        "metric": RULE,
        "compared_by": "scores" if any(o.scores is not None for o in observations) else "verdicts",
        "n_prompts": len(records(observations)),
        "overall": result["overall"],
        "overall_ci": list(interval) if interval is not None else None,
        "subsets": result["subsets"],
    }
