"""TRL/transformers callbacks of a run: metrics to JSON Lines, monitors, plots at the end."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from trainer.monitors import GoldMonitor, SaturationTracker, alarm_message
from trainer.plots import draw_plots
from trainer.rundir import ALARMS, GOLD, METRICS, RunDirectory
from trainer.scoredby import ScoredBy

if TYPE_CHECKING:
    from trainer.environments.held_out import EnvironmentAnswers

log = logging.getLogger(__name__)


class HeldOut:
    """The gold monitor's prompts: external ids and chat messages."""

    def __init__(self, ids: Sequence[str], messages: Sequence[list[dict[str, Any]]]) -> None:
        self.ids = list(ids)
        self.messages = list(messages)


def generate_answers(
    model: Any, tokenizer: Any, prompts: Sequence[list[dict[str, Any]]], max_new_tokens: int
) -> list[str]:
    """Greedy answers of ``model`` (deterministic, so evaluations differ only by the policy)."""
    import torch

    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only: pad on the left so answers follow prompts
    try:
        texts = [
            tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
            for p in prompts
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        batch = {k: v.to(model.device) for k, v in batch.items()}
        with torch.no_grad():
            output = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = output[:, batch["input_ids"].shape[1] :]
        return [str(t) for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    finally:
        tokenizer.padding_side = side
        if was_training:
            model.train()


class RunCallback(TrainerCallback):  # type: ignore[misc]
    """Writes metrics.jsonl, runs the saturation and gold monitors, draws the plots."""

    def __init__(
        self,
        run: RunDirectory,
        saturation: SaturationTracker,
        gold: GoldMonitor | None = None,
        held_out: HeldOut | None = None,
        gold_every: int = 5,
        max_new_tokens: int = 64,
        environment: EnvironmentAnswers | None = None,
    ) -> None:
        """``environment``: a tool environment's, the held-out prompts answered through it
        (multi-turn, with its tools, as training rollouts are); None: single-turn answers."""
        self.run = run
        self.saturation = saturation
        self.gold = gold
        self.held_out = held_out
        self.gold_every = gold_every
        self.max_new_tokens = max_new_tokens
        self.environment = environment
        self._pending_gold: dict[str, Any] = {}
        # The judge config that scored a step's reward (RecordingReward.judge_at), logged with
        # the step: a judge refresh may swap it during the run.
        self.judge_at: Callable[[int], ScoredBy | None] | None = None

    def _alarm(self, step: int, kind: str, message: str, **detail: Any) -> None:
        log.warning("step %d: %s", step, message)
        self.run.append(ALARMS, {"step": step, "kind": kind, "message": message, **detail})

    def _evaluate_gold(self, step: int, model: Any, tokenizer: Any) -> None:
        if self.gold is None or self.held_out is None or model is None or tokenizer is None:
            return
        held_out = self.held_out
        if self.environment is not None:
            requests = self.environment.answer(
                model, tokenizer, held_out.ids, held_out.messages, self.max_new_tokens
            )
            point = self.gold.evaluate_requests(step, requests)
        else:
            answers = generate_answers(model, tokenizer, held_out.messages, self.max_new_tokens)
            point = self.gold.evaluate(step, held_out.ids, answers)
        self.run.append(GOLD, point.to_json())
        self._pending_gold = {
            "gold/train_score": point.train_score,
            "gold/gold_score": point.gold_score,
            "gold/alarm": float(point.alarm),
        }
        if point.alarm:
            self._alarm(
                step,
                "gold_divergence",
                alarm_message(point),
                train_slope=point.train_slope,
                gold_slope=point.gold_slope,
                tests=point.tests,
            )

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # A baseline before the first update, so the first slope has something to compare to.
        self._evaluate_gold(0, kwargs.get("model"), kwargs.get("processing_class"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.gold_every == 0:
            self._evaluate_gold(
                state.global_step, kwargs.get("model"), kwargs.get("processing_class")
            )

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not logs or "train_runtime" in logs:  # the end-of-training summary is not a step
            return
        row = {"step": state.global_step, **logs, **self._pending_gold}
        judge = self.judge_at(state.global_step) if self.judge_at is not None else None
        if judge is not None:
            row.update({"rubric/judge": judge.judge, "rubric/judge_config_hash": judge.config_hash})
        self._pending_gold = {}
        self.run.append(METRICS, row)
        rates = {
            k: float(v) for k, v in logs.items() if k.startswith("criteria/") and v is not None
        }
        for name in self.saturation.update(rates):
            self._alarm(
                state.global_step,
                "saturated_criterion",
                f"{name.removeprefix('criteria/')!r} passed by >= "
                f"{self.saturation.threshold:.0%} of completions for {self.saturation.steps} steps",
                criterion=name,
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        draw_plots(self.run)
