"""What a deep-research policy does with its tools, per rollout and over a set of questions:
the figures of ``rubricsvc train eval-agent`` (trainer/agent_eval.py), with percentile
bootstrap intervals that resample questions.

A rollout's figures come from the same functions the training run's per-step agent metrics
use (``trainer.agent_reward.call_stats``) and from the question's ``gold`` rubric's checks
(``DeepResearchTask.gold_verdicts``, the checks the gold scorer runs, no judge), so a policy's
rollouts, a run's stored samples and a file of demonstrations are measured by one code path:

- ``tool_call_rate``: the share of rollouts with at least one tool call the parser read (a
  call TRL would run);
- ``valid_call_rate``: of every call the policy wrote, the share whose result reported no
  error. Written calls are the parsed ones and the ``<tool_call>`` blocks the parser could not
  read (TRL takes such a reply as answer text, and runs nothing); a parsed call that was not
  run (past the tool-turn limit) has no result and is not valid either;
- ``documents_opened``: distinct documents opened per rollout (before the research ended);
- ``citation_precision``: of the distinct labels the answers cite, the share naming a
  document the rollout opened. Opened, not judged: whether the opened document supports the
  claim is the ``citations`` rubric's question, which needs a judge;
- ``gold_criteria_met``: the share of the gold checks met (key facts, supporting documents
  cited); ``gold_score``: the gold rubric's score (the met checks' share of the weight).

Rates pool the rollouts (calls, citations and checks summed over them, then divided), so a
question counts by what its rollouts did; with the same number of rollouts per question, a
per-rollout figure's pooled value is the mean of the questions'. Each interval resamples the
questions with their rollouts (``rubricsvc.validation.metrics.bootstrap_interval``, seeded),
as the questions are what another evaluation would draw anew; a resample where a ratio has no
denominator (no call, no citation) is left out of its interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.judging.readers.trajectory import message_text
from rubricsvc.validation.metrics import bootstrap_interval
from trainer.agent_reward import call_stats
from trainer.deepresearch_tasks import DeepResearchTask, gold_score
from trainer.environments.rollouts import Rollout

# How the tool format writes a call: a block that opens with this and that the parser could
# not read is a call the policy wrote that nothing ran.
CALL_OPENING = "<tool_call>"
RESAMPLES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class RolloutMetrics:
    prompt_id: str
    sample: int  # the rollout's index among its question's
    tool_calls: int  # parsed
    unparsed_calls: int  # <tool_call> blocks left in the assistant's text
    valid_calls: int  # tool results that reported no error
    documents_opened: int
    cited: int  # distinct labels the answer cites
    cited_opened: int  # of them, those naming a document the rollout opened
    answered: bool  # a final answer was written
    gold_met: int
    gold_criteria: int
    gold_score: float


def unparsed_calls(generated: Sequence[dict[str, Any]]) -> int:
    """The ``<tool_call>`` blocks in the text of the assistant's replies: what the parser
    could not read as a call (a parsed reply's calls are not in its text)."""
    return sum(
        message_text(m).count(CALL_OPENING) for m in generated if m.get("role") == "assistant"
    )


def measure(
    task: DeepResearchTask,
    ids: dict[str, str],
    rollout: Rollout,
    generated: Sequence[dict[str, Any]],
    sample: int = 0,
) -> RolloutMetrics:
    """The figures of one rollout of ``task``: ``rollout`` as the environment's reader made it,
    ``generated`` every message the policy generated (calls after the research ended count
    as calls, invalid ones); ``ids``: the corpus ids by title."""
    stats = call_stats(rollout, generated)
    met = task.gold_verdicts(rollout.text, ids)
    return RolloutMetrics(
        prompt_id=task.id,
        sample=sample,
        tool_calls=stats.tool_calls,
        unparsed_calls=unparsed_calls(generated),
        valid_calls=stats.valid_calls,
        documents_opened=stats.documents_opened,
        cited=stats.cited_labels,
        cited_opened=stats.cited_opened,
        answered=bool(rollout.text.strip()),
        gold_met=sum(met),
        gold_criteria=len(met),
        gold_score=gold_score(task, met, ids),
    )


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


Statistic = Callable[[Sequence[RolloutMetrics]], float | None]


@dataclass(frozen=True)
class Measure:
    name: str
    label: str  # how reports name it
    of: Statistic
    rate: bool  # in [0, 1]


MEASURES: tuple[Measure, ...] = (
    Measure(
        "tool_call_rate",
        "tool-call rate (rollouts with a parsed tool call)",
        lambda ms: _ratio(sum(1 for m in ms if m.tool_calls), len(ms)),
        True,
    ),
    Measure(
        "valid_call_rate",
        "valid-call rate (written calls whose result reported no error)",
        lambda ms: _ratio(
            sum(m.valid_calls for m in ms), sum(m.tool_calls + m.unparsed_calls for m in ms)
        ),
        True,
    ),
    Measure(
        "documents_opened",
        "documents opened per rollout",
        lambda ms: _mean([m.documents_opened for m in ms]),
        False,
    ),
    Measure(
        "citation_precision",
        "citation precision (cited labels naming an opened document)",
        lambda ms: _ratio(sum(m.cited_opened for m in ms), sum(m.cited for m in ms)),
        True,
    ),
    Measure(
        "gold_criteria_met",
        "gold criteria met (share of the gold checks)",
        lambda ms: _ratio(sum(m.gold_met for m in ms), sum(m.gold_criteria for m in ms)),
        True,
    ),
    Measure(
        "gold_score",
        "gold score (the gold rubric's weighted score)",
        lambda ms: _mean([m.gold_score for m in ms]),
        True,
    ),
    Measure(
        "answered_rate",
        "rollouts with a written answer",
        lambda ms: _ratio(sum(1 for m in ms if m.answered), len(ms)),
        True,
    ),
    Measure(
        "tool_calls",
        "tool calls written per rollout (parsed and not)",
        lambda ms: _mean([m.tool_calls + m.unparsed_calls for m in ms]),
        False,
    ),
    Measure(
        "citations", "cited labels per rollout", lambda ms: _mean([m.cited for m in ms]), False
    ),
)
BY_NAME = {m.name: m for m in MEASURES}


@dataclass(frozen=True)
class Figure:
    value: float | None
    interval: tuple[float, float] | None

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "interval": list(self.interval) if self.interval else None}


def question_interval(
    metrics: Sequence[RolloutMetrics], statistic: Statistic, seed: int
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of ``statistic`` over ``metrics``, resampling their
    questions (None with fewer than two questions)."""
    clusters = [m.prompt_id for m in metrics]
    if len(set(clusters)) < 2:
        return None
    return bootstrap_interval(
        clusters,
        lambda drawn: statistic([metrics[i] for i in drawn]),
        resamples=RESAMPLES,
        level=LEVEL,
        seed=seed,
    )


def overall(metrics: Sequence[RolloutMetrics], seed: int) -> dict[str, Figure]:
    """Every measure over all rollouts, with its interval."""
    return {m.name: Figure(m.of(metrics), question_interval(metrics, m.of, seed)) for m in MEASURES}


def by_question(metrics: Sequence[RolloutMetrics]) -> dict[str, dict[str, Any]]:
    """Each question's rollouts and measures (no intervals), in the order first seen."""
    grouped: dict[str, list[RolloutMetrics]] = {}
    for m in metrics:
        grouped.setdefault(m.prompt_id, []).append(m)
    return {
        pid: {"rollouts": len(ms), **{m.name: m.of(ms) for m in MEASURES}}
        for pid, ms in grouped.items()
    }


def paired_difference(
    base: Sequence[RolloutMetrics], other: Sequence[RolloutMetrics], measure: Measure, seed: int
) -> tuple[Figure, int]:
    """``measure`` of ``other`` minus that of ``base`` on the questions both evaluated, with
    an interval that resamples those questions once for both (paired), and how many there
    are."""
    shared = {m.prompt_id for m in base} & {m.prompt_id for m in other}
    items = [(0, m) for m in base if m.prompt_id in shared]
    items += [(1, m) for m in other if m.prompt_id in shared]

    def difference(drawn: Sequence[int]) -> float | None:
        a = measure.of([items[i][1] for i in drawn if items[i][0] == 0])
        b = measure.of([items[i][1] for i in drawn if items[i][0] == 1])
        return None if a is None or b is None else b - a

    value = difference(range(len(items)))
    interval = None
    if len(shared) >= 2:
        interval = bootstrap_interval(
            [m.prompt_id for _, m in items],
            difference,
            resamples=RESAMPLES,
            level=LEVEL,
            seed=seed,
        )
    return Figure(value, interval), len(shared)
