"""Judge refresh: the reward's judge retrained on what the policy writes now (iterated reward
modelling), swapped in only when it passes its promotion gate.

Every ``refresh.every`` steps (never at the last one) the run

1. takes its most recent completions of the training prompts (``refresh.samples`` of them, as
   the reward stored them; the gold monitor's held-out prompts are never among them),
2. has them labelled per criterion of the reward's rubric by the labeller: ``gold``, the run's
   gold scorer (in the over-optimization lab, each prompt's check rubric decides each
   criterion), a stronger judge, or a label set people filled,
3. distills the current judge on those labels with ``rubricsvc judges distill --labels`` (the
   same command, in a child process: the student's own trainer, random state and memory stay
   out of the policy's), the current judge's weights as the base,
4. and, if and only if the promotion gate approves the student on the labelled prompts held out
   of its training, points the reward (and the gold monitor's proxy) at the student.

Each refresh is a line of ``refreshes.jsonl``: the labels used, the gate's figures with their
intervals, the decision, the judge before and after, and what each part took. The policy
waits while a refresh runs.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from transformers import TrainerCallback

from rubricsvc.distill.gate import verdicts_by_criterion
from rubricsvc.errors import RubricsvcError, ValidationFailed
from rubricsvc.models import Completion, Criterion, JudgeConfig, LabelKind, LabelSet
from rubricsvc.scoring.rewards import RewardRequest, RewardResult
from trainer.config import ScorerSettings, TrainConfig
from trainer.recording import RecordingReward
from trainer.refresh_config import JudgeLabeller, LabelSetLabeller, RefreshSettings
from trainer.rundir import REFRESHES, RunDirectory
from trainer.scoredby import ScoredBy
from trainer.scorers import Scorer, make_scorer

log = logging.getLogger(__name__)

# Statuses whose per-criterion value is a verdict to learn from: a judge's reading and a
# check's result. A failed judgment, or one charged its worst value, says nothing of the text.
LABELLED_STATUSES = ("ok", "check")


@dataclass(frozen=True)
class RecentCompletion:
    """One completion the reward scored: where it is stored and the criteria it was judged on."""

    step: int
    prompt_id: str
    completion_id: int
    text: str
    criteria: tuple[tuple[int, str], ...]  # (criterion id, text), in the rubric's order


class RecentCompletions:
    """The last ``size`` distinct completions the reward scored (a RecordingReward observer)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: deque[RecentCompletion] = deque()

    def __call__(
        self,
        step: int,
        prompt_ids: Sequence[Any],
        texts: Sequence[str],
        results: Sequence[RewardResult],
    ) -> None:
        for prompt_id, text, result in zip(prompt_ids, texts, results, strict=False):
            if prompt_id is None or result.completion_id is None:
                continue
            criteria = tuple(
                (int(entry["criterion_id"]), str(entry.get("text", "")))
                for entry in result.criteria
                if entry.get("criterion_id") is not None
            )
            if criteria:
                self._kept.append(
                    RecentCompletion(step, str(prompt_id), result.completion_id, text, criteria)
                )
        while len(self._kept) > 4 * self.size:  # older ones are never the latest
            self._kept.popleft()

    def latest(self) -> list[RecentCompletion]:
        """The most recent ``size`` distinct completions (a repeated text counts once)."""
        found: dict[int, RecentCompletion] = {}
        for item in reversed(self._kept):
            if item.completion_id not in found:
                found[item.completion_id] = item
            if len(found) == self.size:
                break
        return list(reversed(found.values()))


def labels_from(
    items: Sequence[RecentCompletion], results: Sequence[RewardResult]
) -> dict[tuple[int, int], float]:
    """Per (completion, criterion of the reward's rubric), the labeller's value: the labeller's
    result for the same completion, its criteria matched to the reward's by text (in order, so
    a text given twice pairs first with first). A criterion the labeller did not decide (no
    criterion of that text, a failed judgment) gets no label."""
    labels: dict[tuple[int, int], float] = {}
    for item, result in zip(items, results, strict=True):
        decided: dict[str, list[float]] = {}
        for entry in result.criteria:
            if entry.get("status") in LABELLED_STATUSES and entry.get("value") is not None:
                decided.setdefault(str(entry.get("text", "")), []).append(float(entry["value"]))
        for criterion_id, text in item.criteria:
            values = decided.get(text)
            if values:
                labels[(item.completion_id, criterion_id)] = min(1.0, max(0.0, values.pop(0)))
    return labels


def label_balance(labels: dict[tuple[int, int], float]) -> dict[str, float | int]:
    """How much the labels can teach a judge to rank: the share that say "met" (0.5 or more),
    the criteria labelled, and how many of them got one value on every completion. A label
    set whose criteria are each one-valued is matched perfectly by a judge that gives every
    criterion its usual answer whatever the completion says, so a gate's agreement on it says
    nothing about ranking (seen in the over-optimization lab once the policy's answers met no
    criterion: docs/overoptimization.md)."""
    by_criterion = verdicts_by_criterion(
        (criterion_id, value) for (_, criterion_id), value in labels.items()
    )
    met = sum(1 for value in labels.values() if value >= 0.5)
    return {
        "met_share": round(met / len(labels), 4) if labels else 0.0,
        "criteria": len(by_criterion),
        "one_valued_criteria": sum(1 for seen in by_criterion.values() if len(seen) == 1),
    }


def store_label_set(
    session: Session, name: str, labeller: str, labels: dict[tuple[int, int], float]
) -> int:
    """``labels`` as the pointwise label set ``name``; the number of labels stored."""
    from rubricsvc.validation.labelsets import LabelInput, save_label_set

    completions = {
        c.id: c
        for c in session.scalars(
            select(Completion)
            .where(Completion.id.in_({cid for cid, _ in labels}))
            .options(selectinload(Completion.prompt))
        )
    }
    criteria = {
        c.id: c
        for c in session.scalars(
            select(Criterion).where(Criterion.id.in_({crit for _, crit in labels}))
        )
    }
    inputs = [
        LabelInput(
            kind=LabelKind.POINTWISE,
            item=f"{completion_id}/{criterion_id}",
            prompt=completions[completion_id].prompt,
            completion=completions[completion_id],
            labeller=labeller,
            value=value,
            criterion=criteria[criterion_id],
        )
        for (completion_id, criterion_id), value in sorted(labels.items())
    ]
    save_label_set(
        session, name, "refresh", "a training run's own completions, labelled for a refresh", inputs
    )
    return len(inputs)


def judge_weights(session: Session, settings: ScorerSettings) -> Path:
    """The model folder of the reward's current judge: what a refresh distills from. Only a
    single judge whose weights load in this process has one (a jury or an API judge does not)."""
    from rubricsvc.backends.registry import backends_that
    from rubricsvc.backends.tokens import default_model_path
    from rubricsvc.scoring.judge_configs import find_reward_judge

    spec = find_reward_judge(session, settings.judge, settings.mode)
    if spec.jury is not None:
        raise ValidationFailed(
            f"refresh distills one judge's weights: the reward's judge {settings.judge!r} is a jury"
        )
    if spec.backend not in backends_that(loads_model_in_process=True):
        raise ValidationFailed(
            f"refresh distills the reward judge's weights: {settings.judge!r} runs on backend "
            f"{spec.backend!r}, which has no model folder here (use a transformers or vLLM "
            "judge, or the embedded one)"
        )
    if spec.model:
        return Path(spec.model)
    return default_model_path(settings.provider_inputs()[1])


def current_judge(session: Session, settings: ScorerSettings) -> ScoredBy:
    from rubricsvc.scoring.judge_configs import find_reward_judge

    spec = find_reward_judge(session, settings.judge, settings.mode)
    return ScoredBy(spec.name, spec.config_hash())


def student_name(run_name: str, step: int) -> str:
    return f"{run_name}-refresh-{step}"


def label_set_name(run_name: str, step: int) -> str:
    return f"refresh/{run_name}/step-{step}"


class JudgeRefresh:
    """Runs the refreshes of one training run (module docstring) and swaps the judge."""

    def __init__(
        self,
        config: TrainConfig,
        run: RunDirectory,
        targets: Sequence[Scorer],
    ) -> None:
        assert config.refresh is not None
        self.config = config
        self.settings: RefreshSettings = config.refresh
        self.run = run
        # The scorers that serve the reward's judge: the reward's own, and the gold monitor's
        # proxy of the held-out answers. A swap points each at the student.
        self.targets = list(targets)
        self.recent = RecentCompletions(self.settings.samples)
        self.labeller = self._labeller()

    @property
    def reward_settings(self) -> ScorerSettings:
        return self.targets[0].settings

    def _labeller(self) -> Scorer | None:
        """The scorer that labels (None for a label set, which people fill)."""
        labeller = self.settings.labeller
        if isinstance(labeller, LabelSetLabeller):
            return None
        if isinstance(labeller, JudgeLabeller):
            settings = self.config.reward.model_copy(
                update={
                    "judge": labeller.judge,
                    "mode": labeller.mode,
                    "criterion_dropout": 0.0,
                    "length_penalty": None,
                }
            )
            return make_scorer(settings)
        gold = self.config.monitors.gold
        assert gold is not None  # the config refuses labeller gold without a gold scorer
        return make_scorer(gold.scorer)

    def due(self, step: int) -> bool:
        return step % self.settings.every == 0 and step < self.config.grpo.max_steps

    def refresh(self, step: int) -> dict[str, Any]:
        """One refresh at ``step``; its record, as written to refreshes.jsonl."""
        from rubricsvc.db import make_engine, session_scope

        started = time.monotonic()
        engine = make_engine(self.reward_settings.engine_url())
        try:
            with session_scope(engine) as session:
                before = current_judge(session, self.reward_settings)
                base = judge_weights(session, self.reward_settings)
            record: dict[str, Any] = {
                "step": step,
                "labeller": self.settings.labeller_name(),
                "judge_before": asdict(before),
                "swapped": False,
                "judge_after": asdict(before),
            }
            labelled: float | None = None
            report: dict[str, Any] | None = None
            try:
                label_set, counts = self._label(engine, step)
                record.update(label_set=label_set, **counts)
                labelled = time.monotonic()
                report = self._distill(step, label_set, base)
            except RubricsvcError as err:
                record["skipped"] = str(err)
            distilled = time.monotonic()
            labelled = labelled or distilled
            if report is not None:
                record.update(_report_fields(report))
                if report["status"] == "approved":
                    self._swap(str(report["judge"]))
                    with session_scope(engine) as session:
                        record["judge_after"] = asdict(current_judge(session, self.reward_settings))
                    record["swapped"] = True
        finally:
            engine.dispose()
        record["seconds"] = {
            "labelling": round(labelled - started, 2),
            "distillation_and_gate": round(distilled - labelled, 2),
            "total": round(time.monotonic() - started, 2),
        }
        self.run.append(REFRESHES, record)
        _say(record)
        return record

    def _label(self, engine: Any, step: int) -> tuple[str, dict[str, Any]]:
        """The label set this refresh learns from, and its counts."""
        from rubricsvc.db import session_scope

        labeller = self.settings.labeller
        if isinstance(labeller, LabelSetLabeller):
            return labeller.labels.format(step=step), {}
        assert self.labeller is not None
        items = self.recent.latest()
        if not items:
            raise ValidationFailed("no scored completion of a training prompt to label yet")
        log.info(
            "step %d: judge refresh: labelling %d recent completions (%s)",
            step,
            len(items),
            self.settings.labeller_name(),
        )
        requests = [RewardRequest(item.text, prompt_id=item.prompt_id) for item in items]
        labels = labels_from(items, self.labeller.score(requests))
        if not labels:
            raise ValidationFailed(
                f"the labeller ({self.settings.labeller_name()}) decided none of the reward's "
                f"criteria on {len(items)} completions"
            )
        name = label_set_name(self.config.name, step)
        with session_scope(engine) as session:
            stored = store_label_set(session, name, self.settings.labeller_name(), labels)
        prompts = {item.prompt_id for item in items}
        return name, {
            "completions": len(items),
            "prompts": len(prompts),
            "labels": stored,
            "label_balance": label_balance(labels),
        }

    def _distill(self, step: int, label_set: str, base: Path) -> dict[str, Any]:
        """``rubricsvc judges distill --labels`` in a child process; its JSON report."""
        folder = self.run.path / "refresh" / f"step-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        settings_file = folder / "distill.json"
        distill_settings = self.settings.distill_settings(self.config.threads)
        settings_file.write_text(distill_settings.model_dump_json(indent=2) + "\n")
        command = [
            sys.executable, "-m", "rubricsvc", "judges", "distill",
            "--labels", label_set,
            "--base", str(base),
            "--into", student_name(self.config.name, step),
            "--split", f"prompt:{self.settings.gate.split}",
            "--config", str(settings_file),
            "--run-dir", str(folder / "student"),
            "--json",
        ]  # fmt: skip
        environment = _child_environment(self.reward_settings.engine_url())
        distill_log = folder / "distill.log"
        log.info(
            "step %d: judge refresh: distilling the judge on %s (minutes; progress in %s)",
            step,
            label_set,
            distill_log,
        )
        # Its log goes to the file as it is written, so that a long distillation can be
        # followed (tail -f) while the run waits for it.
        with distill_log.open("w", encoding="utf-8") as stderr:
            done = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=environment
            )
        if done.returncode != 0:
            text = distill_log.read_text(encoding="utf-8", errors="replace")
            lines = [line for line in text.strip().splitlines() if line.strip()]
            raise RubricsvcError(
                f"judges distill failed: {lines[-1] if lines else f'exit {done.returncode}'}"
            )
        try:
            report: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise RubricsvcError(
                f"judges distill gave no JSON report (see {folder / 'distill.log'})"
            ) from None
        (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    def _swap(self, judge: str) -> None:
        """Point every scorer of the reward's judge at ``judge``, in its own verdict mode (the
        student is served exactly as its gate measured it)."""
        for scorer in self.targets:
            scorer.settings = scorer.settings.model_copy(update={"judge": judge, "mode": None})


def _child_environment(database_url: str) -> dict[str, str]:
    import os

    return {**os.environ, "RUBRICSVC_DATABASE_URL": database_url}


def _report_fields(report: dict[str, Any]) -> dict[str, Any]:
    """What refreshes.jsonl keeps of a distillation's report."""
    gate = report["gate"]
    keep = ("judge", "config_hash", "n_labelled", "n_judged", "coverage", "agreement")
    roles = {
        role: {k: gate[role].get(k) for k in (*keep, "agreement_ci", "kappa", "kappa_ci")}
        for role in ("base", "student")
    }
    training = report.get("training") or {}
    return {
        "student": {"judge": report["judge"], "config_hash": report["config_hash"]},
        "decision": gate["decision"],
        "reasons": gate["reasons"],
        "split": report.get("split"),
        "training": {k: training.get(k) for k in ("examples", "left_out", "steps", "seconds")},
        "gate": {
            **roles,
            "labels": gate.get("labels"),
            "gain": gate.get("gain"),
            "gain_ci": gate.get("gain_ci"),
            "min_agreement": gate.get("min_agreement"),
            "min_gain": gate.get("min_gain"),
            "min_coverage": gate.get("min_coverage"),
            "within_criteria": gate.get("within_criteria"),
            "gated_within_criteria": gate.get("gated_within_criteria"),
        },
    }


def _say(record: dict[str, Any]) -> None:
    if "skipped" in record:
        log.warning("step %d: judge refresh skipped: %s", record["step"], record["skipped"])
        return
    log.info(
        "step %d: judge refresh: %s (%s); judge now %s",
        record["step"],
        record.get("decision"),
        "; ".join(record.get("reasons") or []),
        record["judge_after"]["judge"],
    )


class RefreshCallback(TrainerCallback):  # type: ignore[misc]
    """Runs a refresh after every ``refresh.every``-th optimizer step."""

    def __init__(self, refresh: JudgeRefresh) -> None:
        self.refresh = refresh

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.refresh.due(state.global_step):
            self.refresh.refresh(state.global_step)


def check_refresh(config: TrainConfig) -> None:
    """Refuse, before the run starts, what would make every refresh fail: a reward judge with
    no weights to distill, an unknown labelling judge, a retrained judge's name taken."""
    if config.refresh is None:
        return
    from rubricsvc.db import make_engine, session_scope
    from rubricsvc.scoring.judge_configs import find_reward_judge

    engine = make_engine(config.reward.engine_url())
    try:
        with session_scope(engine) as session:
            judge_weights(session, config.reward)
            labeller = config.refresh.labeller
            if isinstance(labeller, JudgeLabeller):
                find_reward_judge(session, labeller.judge, labeller.mode)
            steps = range(config.refresh.every, config.grpo.max_steps, config.refresh.every)
            judges = [student_name(config.name, step) for step in steps]
            label_sets = [label_set_name(config.name, step) for step in steps]
            taken = session.scalar(
                select(JudgeConfig.name).where(JudgeConfig.name.in_(judges))
            ) or session.scalar(select(LabelSet.name).where(LabelSet.name.in_(label_sets)))
    finally:
        engine.dispose()
    if taken is not None:
        raise ValidationFailed(
            f"refresh would store {taken!r}, which is stored already (an earlier run of this "
            "name in this database): give the run another name"
        )


def judge_refresh(
    config: TrainConfig, run: RunDirectory, reward: RecordingReward, held_out_proxy: Scorer | None
) -> RefreshCallback | None:
    """The run's refresh callback (None without a ``refresh`` section), its buffer of recent
    completions fed by the reward. ``held_out_proxy``: the gold monitor's scorer of the held-out
    answers by the reward's judge, which a swap re-points too."""
    if config.refresh is None:
        return None
    targets = [reward.rubric.scorer, *([held_out_proxy] if held_out_proxy else [])]
    refresh = JudgeRefresh(config, run, targets)
    reward.observers.append(refresh.recent)
    return RefreshCallback(refresh)
