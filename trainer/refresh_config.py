"""The ``refresh`` section of a training config: when the reward's judge is retrained on the
run's own completions, who labels them, and the promotion gate a retrained judge must pass
before it is swapped in (trainer/refresh.py does it; docs/trainer.md, "Judge refresh")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rubricsvc.distill.training import DistillSettings
from rubricsvc.fileformats import describe_validation_error
from rubricsvc.judging.config import ModeName

# The gate's settings live in ``refresh.gate``; the student's training, in ``refresh.training``.
GATE_KEYS = ("min_agreement", "min_gain", "min_coverage", "within_criteria")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeLabeller(_Strict):
    """A stronger judge labels each criterion: its P(met) on the reward's rubric."""

    judge: str = Field(min_length=1)
    mode: ModeName | None = None  # None: the judge's own verdict mode


class LabelSetLabeller(_Strict):
    """People label: the pointwise labels of a stored label set, read as it stands at the
    refresh. ``{step}`` in the name is the refresh's step (a set per refresh); a set not
    stored yet skips that refresh, which the run records."""

    labels: str = Field(min_length=1)

    @field_validator("labels")
    @classmethod
    def _only_step(cls, name: str) -> str:
        try:
            name.format(step=1)
        except (KeyError, IndexError, ValueError):
            raise ValueError(
                f"labels {name!r}: the only placeholder a label set name may hold is {{step}}"
            ) from None
        return name


Labeller = Literal["gold"] | JudgeLabeller | LabelSetLabeller


class RefreshGate(_Strict):
    """The promotion gate of each retrained judge (docs/distillation.md, "The promotion gate"):
    on the labelled prompts held out of its training, its agreement with the labels reaches
    ``min_agreement`` and beats the current judge's (the 95% interval of the paired gain is
    above ``min_gain``), overall and, with ``within_criteria``, on the criteria that some of
    the held-out completions meet and others do not; its verdicts cover at least
    ``min_coverage`` of the held-out labels."""

    min_agreement: float = Field(default=0.7, ge=0.0, le=1.0)
    min_gain: float = Field(default=0.0, ge=-1.0, le=1.0)
    # The share of the held-out labels the student gives a verdict on, at least: a student
    # that fails on hard items is otherwise measured on the ones it answered only.
    min_coverage: float = Field(default=0.95, ge=0.0, le=1.0)
    # On by default: a refresh's labels are the policy's own rollouts, several per prompt, and
    # a policy whose answers all miss (or all meet) a criterion makes labels that a judge
    # ignoring the completion matches perfectly (docs/overoptimization.md, round 2). The
    # reward ranks a group's completions within criteria; the gate measures the same.
    within_criteria: bool = True
    # The share of the labelled prompts the student trains on (``--split prompt:SHARE``); the
    # rest are the gate's held-out prompts.
    split: float = Field(default=0.5, gt=0.0, lt=1.0)


class RefreshSettings(_Strict):
    every: int = Field(ge=1)  # steps between refreshes (none at the last step)
    labeller: Labeller
    # The most recent completions of the training prompts labelled at each refresh (with
    # ``labeller: {labels: ...}`` the label set decides, and this is not used).
    samples: int = Field(default=64, ge=2)
    gate: RefreshGate = Field(default_factory=RefreshGate)
    # The student's training settings (``judges distill --config``: epochs, learning_rate,
    # batch_size, trainable_layers, ...); the gate's thresholds go in ``gate``.
    training: dict[str, Any] = Field(default_factory=dict)

    @field_validator("labeller", mode="before")
    @classmethod
    def _one_labeller(cls, value: Any) -> Any:
        """One of the three shapes, named in the error (a union's own error lists every
        member's complaint)."""
        if value == "gold":
            return value
        kinds: dict[str, type[JudgeLabeller] | type[LabelSetLabeller]] = {
            "judge": JudgeLabeller,
            "labels": LabelSetLabeller,
        }
        if isinstance(value, dict) and len(set(value) & set(kinds)) == 1:
            (key,) = set(value) & set(kinds)
            try:
                return kinds[key].model_validate(value)
            except ValidationError as err:
                raise ValueError(describe_validation_error(err)) from None
        raise ValueError(f"expected gold, {{judge: NAME}} or {{labels: NAME}}, not {value!r}")

    @field_validator("training")
    @classmethod
    def _training_settings(cls, training: dict[str, Any]) -> dict[str, Any]:
        misplaced = [key for key in GATE_KEYS if key in training]
        if misplaced:
            raise ValueError(
                f"{', '.join(misplaced)}: the gate's settings go in refresh.gate, not "
                "refresh.training"
            )
        try:
            DistillSettings.model_validate(training)
        except ValidationError as err:
            raise ValueError(describe_validation_error(err)) from None
        return training

    def distill_settings(self, threads: int | None) -> DistillSettings:
        """What ``judges distill --config`` is given: the training settings, the gate's
        thresholds, and the run's torch threads unless the training settings name theirs."""
        data = {"threads": threads, **self.training}
        gate = {key: getattr(self.gate, key) for key in GATE_KEYS}
        return DistillSettings.model_validate({**data, **gate})

    def labeller_name(self) -> str:
        """The labeller in words, as the run's logs name it."""
        if isinstance(self.labeller, JudgeLabeller):
            return f"judge {self.labeller.judge}"
        if isinstance(self.labeller, LabelSetLabeller):
            return f"label set {self.labeller.labels}"
        return "gold"


def refresh_problems(config: Any) -> list[str]:
    """What makes a run's ``refresh`` section unusable with the rest of its config (a
    ``TrainConfig``), each in one sentence; empty when it fits."""
    refresh: RefreshSettings | None = config.refresh
    if refresh is None:
        return []
    problems = []
    steps = config.grpo.max_steps
    if refresh.every >= steps:
        problems.append(
            f"refresh.every ({refresh.every}) is not below grpo.max_steps ({steps}): "
            "no refresh would run"
        )
    if config.reward.via != "inprocess":
        problems.append(
            f"refresh needs reward.via: inprocess (not {config.reward.via}): the run retrains "
            "and swaps the judge in its own process and database; for a reward over HTTP, "
            "run the loop with the CLI (docs/trainer.md, Judge refresh)"
        )
    if refresh.labeller == "gold" and config.monitors.gold is None:
        problems.append(
            "refresh.labeller gold labels with the run's gold scorer: configure "
            "monitors.gold, or name a labelling judge ({judge: NAME})"
        )
    labeller = refresh.labeller
    if isinstance(labeller, JudgeLabeller) and labeller.judge == config.reward.judge:
        problems.append(
            f"refresh.labeller judge {labeller.judge!r} is the reward's own judge: a refresh "
            "learns from a stronger labeller"
        )
    return problems
