"""The reward TRL calls during a run: the rubric (or control) reward, plus what the run keeps.

Around the reward it writes samples.jsonl (prompts, completions, rewards per step) and logs
length and repetition through TRL's ``log_metric`` hook, so they land in metrics.jsonl with
the step they belong to. With a gold scorer, the same completions are scored by it too
(``gold/train_reward``, and each sample's ``gold_reward``): proxy and gold side by side on the
training prompts, every ``gold_every`` steps. Each step's reward names the judge config that
scored it (``judge_at``; each sample's ``judge_config_hash``): a judge refresh may swap it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rubricsvc.scoring.rewards import RewardResult
from trainer.monitors import GoldMonitor, mean_reward
from trainer.rewards import RandomControlReward, RubricReward, completion_text, reward_requests
from trainer.rundir import SAMPLES, RunDirectory
from trainer.scoredby import ScoredBy, scored_by
from trainer.scorers import Scorer
from trainer.textstats import text_stats

# Told each step's scored completions: the step, prompt ids, texts and the reward's results.
ScoredObserver = Callable[[int, Sequence[Any], Sequence[str], Sequence[RewardResult]], None]


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list) and prompt:
        return str(prompt[-1].get("content", ""))
    return str(prompt)


class RecordingReward:
    """Calls ``inner`` and keeps samples and text statistics for the run directory."""

    def __init__(
        self,
        inner: RubricReward | RandomControlReward,
        run: RunDirectory,
        samples_per_step: int = 8,
        ngram: int = 3,
        gold: Scorer | None = None,
        gold_every: int = 1,
        monitor: GoldMonitor | None = None,
    ) -> None:
        self.inner = inner
        self.gold = gold
        self.monitor = monitor  # told every completion scored by both, for its test
        self.gold_every = gold_every
        self.run = run
        self.samples_per_step = samples_per_step
        self.ngram = ngram
        self.__name__ = inner.__name__
        self.judges: dict[int, ScoredBy] = {}  # step -> the judge config its reward came from
        self.observers: list[ScoredObserver] = []  # a judge refresh's buffer of completions

    def judge_at(self, step: int) -> ScoredBy | None:
        """The judge config whose scores fed step ``step`` (the latest scoring at or before it:
        a generation batch may feed several steps)."""
        scored = [s for s in self.judges if s <= step]
        return self.judges[max(scored)] if scored else None

    @property
    def rubric(self) -> RubricReward:
        return self.inner.rubric if isinstance(self.inner, RandomControlReward) else self.inner

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        rewards = self.inner(prompts, completions, **kwargs)
        texts = [completion_text(c) for c in completions]
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for name, value in text_stats(texts, self.ngram).items():
                log_metric(name, value)
        state = kwargs.get("trainer_state")
        # The reward is computed before the optimizer step it feeds: that step's number.
        step = (state.global_step if state is not None else 0) + 1
        results = self.rubric.last_results
        prompt_ids = kwargs.get(self.rubric.prompt_id_column) or [None] * len(texts)
        judge = scored_by(self.rubric.scorer)
        if judge is not None:
            self.judges[step] = judge
        for observer in self.observers:
            observer(step, prompt_ids, texts, results)
        gold = self._gold(step, prompts, completions, kwargs.get(self.rubric.prompt_id_column))
        if self.monitor is not None and gold and len(results) == len(gold):
            self.monitor.add_training(
                step, prompt_ids, [r.reward for r in results], [g.reward for g in gold]
            )
        if log_metric is not None and gold:
            gold_mean = mean_reward(gold)
            if gold_mean is not None:
                log_metric("gold/train_reward", gold_mean)
        extras = getattr(self.rubric, "sample_extras", None)  # an agent rollout's trajectory
        for index in range(min(self.samples_per_step, len(texts))):
            result = results[index] if index < len(results) else None
            self.run.append(
                SAMPLES,
                {
                    "step": step,
                    "prompt_id": prompt_ids[index],
                    "prompt": _prompt_text(prompts[index]),
                    "completion": texts[index],
                    "reward": rewards[index],
                    "rubric_reward": result.reward if result else None,
                    "status": result.status if result else None,
                    "rubric": result.rubric if result else None,
                    **(
                        {"judge": judge.judge, "judge_config_hash": judge.config_hash}
                        if judge
                        else {}
                    ),
                    **({"gold_reward": gold[index].reward} if gold else {}),
                    **(extras(index) if extras is not None else {}),
                },
            )
        return rewards

    def _gold(
        self, step: int, prompts: Sequence[Any], completions: Sequence[Any], ids: Any
    ) -> list[RewardResult]:
        """The gold scorer's results for this step's completions (none on other steps)."""
        if self.gold is None or not self.gold_every or step % self.gold_every:
            return []
        # A tool-using rollout's request (its answer, trajectory and opened documents), as
        # the agent reward stored it; a single-turn answer's from the completion itself.
        agent_requests = getattr(self.rubric, "last_requests", None)
        if agent_requests is not None and len(agent_requests) == len(completions):
            return self.gold.score(agent_requests)
        return self.gold.score(reward_requests(prompts, completions, ids))
