"""Rubric rewards with TRL's reward-function signature.

``RubricReward(settings)(prompts=..., completions=..., **columns) -> list[float | None]``:
each prompt's rubric is found by the dataset's ``prompt_id`` column (a prompt's external id)
or, without one, by the hash of the prompt's messages. ``None`` where the score is masked
(judge failures below the coverage floor) or the prompt has no usable rubric: TRL then leaves
the completion out of the advantage baseline and gives it no advantage, so it does not move
the policy (``masked_reward: drop``, the default; ``mean`` or a number send a value instead).
A masked score never stops a run. Per-criterion pass rates, the masked share and the failed
judgments by class go to TRL's ``log_metric`` hook every step; a judge whose own replies fail
above ``judge_failure_alarm`` is logged as a warning. With ``criterion_dropout``, each
rollout group is rewarded on a random part of its judged criteria, re-drawn each step
(``trainer/dropout.py``); the full rubric's score is still what ``rubric/reward`` logs.
With ``evolution``, each prompt is scored under its evolved version and its group evolves
the rubric every ``every`` steps (``trainer/evolution.py``).

Instances are picklable (settings only; the judge loads on first call). ``AsyncRubricReward``
is the same reward as a coroutine, which TRL runs next to other async rewards.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from rubricsvc.judging.failures import FailureClass, empty_counts
from rubricsvc.scoring.rewards import RewardRequest, RewardResult, fill_masked
from trainer.config import ScorerSettings
from trainer.dropout import apply_dropout
from trainer.evolution import RubricEvolution
from trainer.scorers import Scorer, make_scorer

PROMPT_ID_COLUMN = "prompt_id"
# A criterion counts as passed at value >= 0.5 (a "Yes" verdict, or a probability above even).
PASS_VALUE = 0.5
LogMetric = Callable[[str, float], None]
log = logging.getLogger(__name__)


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string, or the content of its (last) assistant message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        content = completion[-1].get("content", "")
        if isinstance(content, list):  # content blocks
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return str(content)
    return ""


def completion_trajectory(completion: Any) -> tuple[dict[str, Any], ...] | None:
    """A multi-turn rollout's trajectory: TRL's tool-calling GRPO gives a completion as the list
    of messages it generated (assistant turns with ``tool_calls``, the ``tool`` results it
    appended, the final answer), which is the trajectory as trajectory criteria and checks read
    it. A plain-text completion has none."""
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        return tuple(completion)
    return None


def reward_requests(
    prompts: Sequence[Any], completions: Sequence[Any], prompt_ids: Sequence[Any] | None
) -> list[RewardRequest]:
    requests = []
    for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        prompt_id = prompt_ids[index] if prompt_ids is not None else None
        trajectory = completion_trajectory(completion)
        text = completion_text(completion)
        listed = None if trajectory is None else list(trajectory)
        if prompt_id:
            requests.append(RewardRequest(text, prompt_id=str(prompt_id), trajectory=listed))
        else:
            requests.append(RewardRequest(text, prompt=prompt, trajectory=listed))
    return requests


def criterion_pass_rates(results: Sequence[RewardResult]) -> dict[str, float]:
    """Per criterion text, the share of judged completions that met it (failed ones left out).
    The rows of modes that compare completions (pairwise: one per peer; group: one per
    shuffled repeat) name completions and orders, not criteria: they are left out, or every
    step would log metrics under new names."""
    met: dict[str, list[bool]] = defaultdict(list)
    for result in results:
        for criterion in result.criteria:
            value = criterion.get("value")
            if value is None or criterion.get("status") == "failed":
                continue
            if "peer" in criterion or "repeat" in criterion:
                continue
            met[str(criterion.get("text", ""))].append(float(value) >= PASS_VALUE)
    return {text: sum(flags) / len(flags) for text, flags in met.items() if flags}


def metric_name(criterion: str) -> str:
    """A metric name for a criterion: short, and free of the characters loggers mind."""
    short = " ".join(criterion.split())[:60]
    return "criteria/" + short.replace("/", "-")


def failure_counts(results: Sequence[RewardResult]) -> dict[str, int]:
    """Failed judgments behind a batch of rewards, by who caused them."""
    counts = empty_counts()
    for result in results:
        for name, n in result.failures.items():
            counts[name] = counts.get(name, 0) + n
    return counts


def judge_failure_share(results: Sequence[RewardResult]) -> float:
    """The share of a batch's judged criteria whose judgment failed on the judge's own reply."""
    judged = sum(1 for r in results for c in r.criteria if c.get("status") != "check")
    return failure_counts(results)[FailureClass.JUDGE.value] / judged if judged else 0.0


def log_rubric_metrics(results: Sequence[RewardResult], log_metric: LogMetric) -> None:
    rewards = [r.reward for r in results if r.reward is not None]
    if rewards:
        log_metric("rubric/reward", sum(rewards) / len(rewards))
    log_metric("rubric/masked_fraction", 1 - len(rewards) / max(len(results), 1))
    for name, count in failure_counts(results).items():
        log_metric(f"rubric/failures/{name}", float(count))
    for text, rate in criterion_pass_rates(results).items():
        log_metric(metric_name(text), rate)
    spreads = [1.0 - r.confidence for r in results if r.confidence is not None]
    if spreads:  # a jury's: how far apart its members' scores were, on average
        log_metric("rubric/jury_spread", sum(spreads) / len(spreads))


class RubricReward:
    """A rubric reward for TRL's GRPOTrainer (sync); see the module docstring."""

    __name__ = "rubric"  # the name TRL logs the reward under (rewards/rubric/mean)

    def __init__(
        self,
        settings: ScorerSettings | None = None,
        *,
        prompt_id_column: str = PROMPT_ID_COLUMN,
        scorer: Scorer | None = None,
        evolution_run: str = "trainer",
    ) -> None:
        """``evolution_run``: the evolution run's name unless ``evolution.run`` names one (the
        launcher gives the training run's name)."""
        self.scorer = scorer or make_scorer(settings or ScorerSettings())
        self.prompt_id_column = prompt_id_column
        self.last_results: list[RewardResult] = []
        self._calls = 0  # batches rewarded: the step of a criterion dropout draw outside TRL
        self._scored = 0  # batches scored: the step of an evolution outside TRL
        evolution = self.scorer.settings.evolution
        self.evolution = (
            RubricEvolution(self.scorer.settings, evolution.run or evolution_run)
            if evolution
            else None
        )

    def sample_extras(self, index: int) -> dict[str, Any]:
        """What samples.jsonl records of the last batch's ``index``-th completion beyond its
        reward: with evolving rubrics, the reward's persistent and evolved parts (None: no
        such criteria), so that each part's agreement with gold can be read off the run."""
        parts = self.evolution.last_parts if self.evolution is not None else []
        if index >= len(parts):
            return {}
        persistent, evolved = parts[index]
        return {"persistent_reward": persistent, "evolved_reward": evolved}

    def score(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[RewardResult]:
        """The full results (reward, status, per-criterion breakdown) of one batch."""
        requests = reward_requests(prompts, completions, kwargs.get(self.prompt_id_column))
        if self.evolution is not None:
            requests = self.evolution.route(requests)
        judged_by = self.scorer.settings  # a judge refresh swaps them between steps
        results = self.scorer.score(requests)
        self.last_results = results
        self._scored += 1
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            log_rubric_metrics(results, log_metric)
        if self.evolution is not None:
            state = kwargs.get("trainer_state")
            step = int(state.global_step) if state is not None else self._scored - 1
            self.evolution.step(requests, results, step, log_metric, judged_by)
        share = judge_failure_share(results)
        if share > self.scorer.settings.judge_failure_alarm:
            log.warning(
                "judge %s: %.0f%% of this step's judgments failed on the judge's own reply "
                "(unparseable or off its scale); their scores are masked",
                self.scorer.settings.judge,
                100 * share,
            )
        return results

    def dropped(
        self, results: Sequence[RewardResult], prompts: Sequence[Any], **kwargs: Any
    ) -> list[RewardResult]:
        """``results`` with each reward over its group's kept criteria under criterion
        dropout (``criterion_dropout``; unchanged when it is 0). A group is a prompt; the
        step is TRL's global step (or this reward's call count outside TRL)."""
        settings = self.scorer.settings
        self._calls += 1
        if not settings.criterion_dropout:
            return list(results)
        state = kwargs.get("trainer_state")
        step = int(state.global_step) if state is not None else self._calls - 1
        ids = kwargs.get(self.prompt_id_column)
        groups = [str(ids[i] if ids is not None else prompt) for i, prompt in enumerate(prompts)]
        kept = apply_dropout(
            results,
            groups,
            settings.criterion_dropout,
            seed=settings.dropout_seed,
            step=step,
            aggregation=settings.aggregation,
            min_coverage=settings.min_coverage,
        )
        rewards = [r.reward for r in kept if r.reward is not None]
        log_metric = kwargs.get("log_metric")
        if log_metric is not None and rewards:
            log_metric("rubric/dropout_reward", sum(rewards) / len(rewards))
        return kept

    def rewards(
        self,
        results: Sequence[RewardResult],
        completions: Sequence[Any] = (),
        log_metric: LogMetric | None = None,
    ) -> list[float | None]:
        """The rewards TRL gets: each result's reward less its completion's length penalty
        (``length_penalty``, when set); None for a masked score, or the configured value."""
        rewards = [r.reward for r in results]
        shaping = self.scorer.settings.length_penalty
        if shaping is not None and completions:
            penalties = [shaping.penalty(len(completion_text(c).split())) for c in completions]
            rewards = [
                None if reward is None else reward - penalty
                for reward, penalty in zip(rewards, penalties, strict=True)
            ]
            if log_metric is not None:
                log_metric("rubric/length_penalty", sum(penalties) / len(penalties))
        masked = self.scorer.settings.masked_reward
        if masked == "drop":
            return rewards
        return list(fill_masked(rewards, masked))

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        results = self.score(prompts, completions, **kwargs)
        kept = self.dropped(results, prompts, **kwargs)
        return self.rewards(kept, completions, kwargs.get("log_metric"))


class AsyncRubricReward(RubricReward):
    """The same reward as a coroutine: scoring runs in a thread, so TRL's loop stays free."""

    __name__ = "rubric_async"

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        results = await asyncio.to_thread(self.score, prompts, completions, **kwargs)
        kept = self.dropped(results, prompts, **kwargs)
        return self.rewards(kept, completions, kwargs.get("log_metric"))


class RandomControlReward:
    """The random-reward control: uniform rewards in [0, 1] for training, while the rubric
    reward is still computed and logged (rubric/reward), so the two runs compare on it."""

    __name__ = "random_control"

    def __init__(self, rubric: RubricReward, seed: int = 0) -> None:
        self.rubric = rubric
        self.seed = seed
        self._rng = random.Random(seed)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        if kwargs.get("environments") is not None:
            self.rubric(prompts, completions, **kwargs)  # a rollout's reward reads its environment
        else:
            self.rubric.score(prompts, completions, **kwargs)
        return [self._rng.random() for _ in completions]
