"""``judges reinforce``: the RL rung of the training ladder, from a stored SFT judge to a
registered, gated RL judge.

The judge RL starts from is a criterion-prob judge with a LoRA adapter (``judges distill``
with ``lora``). By default RL learns from what that judge was distilled from, split as it was
split (its lineage: the label set or teacher, the share of prompts trained on and the split's
seed), so it trains on the SFT judge's training prompts only and is gated on the prompts the
SFT judge's own gate held out. Its prompts are rendered by that judge's spec (template, mode
wording, neutralizing step), so the text trained on is the text it is served. The adapter is
trained further (``distill.grpo``) and saved in the run folder; the RL judge is the same
spec with that adapter, so its config hash differs from the SFT judge's by the adapter's.

The gate is distillation's (``distill.gate``), with the SFT judge in the base model's place:
both judge the held-out labels, and the RL judge is approved only where its paired gain over
the SFT judge is above ``min_gain`` with 95% confidence (and its agreement and coverage reach
their floors). The run folder: ``run.json``, ``examples.jsonl``, ``metrics.jsonl`` (TRL's log:
reward, its spread, the share of groups with no spread, the loss), ``reward.png``,
``training.json``, ``checkpoints/`` and ``model/`` (the adapter). A re-run with the same folder
resumes, as a distillation's does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.backends.adapters import adapter_bytes
from rubricsvc.backends.tokens import encode_chat
from rubricsvc.distill.examples import (
    Source,
    Split,
    label_targets,
    render_chats,
    snapshot_hash,
    split_by_prompt,
    teacher_targets,
)
from rubricsvc.distill.gate import FactoryOf, run_gate
from rubricsvc.distill.grpo import ReinforceSettings, VerdictPrompt, train_reinforced
from rubricsvc.distill.pipeline import (
    STUDENT_MODE,
    check_new_judge,
    held_out_labels,
    open_run_dir,
    phase_progress,
    read_json,
    register_candidate,
    split_record,
    split_summary,
    weights_sha256,
)
from rubricsvc.distill.training import check_base_model, load_tokenizer, plot_metric
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.scoring.judge_configs import latest_judge_config, stored_spec
from rubricsvc.validation.evaluation import EvaluationOptions
from rubricsvc.validation.labelsets import get_label_set

DEFAULT_TRAIN_SHARE = 0.8  # distill's --split default, for a judge with no distillation record


@dataclass(frozen=True)
class ReinforceRequest:
    judge: str  # the stored SFT judge RL starts from
    into: str
    run_dir: Path
    settings: ReinforceSettings
    # The bundled model's folder, for a judge whose spec names no model (its base then).
    default_base: Callable[[], Path]
    teacher: str | None = None
    labels: str | None = None
    train_share: float | None = None  # None: the SFT judge's


@dataclass(frozen=True)
class Start:
    """The judge RL starts from: its spec, base model folder and distillation record."""

    spec: JudgeSpec
    config_hash: str
    base: Path
    adapter: Path
    distilled: dict[str, Any] | None


def starting_judge(session: Session, request: ReinforceRequest) -> Start:
    """The stored judge ``request.judge``, refused unless RL can train it: a criterion-prob
    judge with a LoRA adapter (so on a backend that loads a model folder and applies one) on a
    base whose weights are the ones it names."""
    row = latest_judge_config(session, request.judge)
    if row is None or "spec" not in row.settings:
        raise NotFoundError(
            f"--judge {request.judge!r}: no stored judge of that name (distill one with "
            "`rubricsvc judges distill` and `lora`, or add its judge file)"
        )
    spec = stored_spec(row)
    if spec.jury is not None:
        raise ValidationFailed(f"--judge {request.judge!r} is a jury: RL trains one judge")
    if spec.mode != STUDENT_MODE.value:
        raise ValidationFailed(
            f"--judge {request.judge!r} is a {spec.mode} judge: RL here trains criterion-prob "
            "judges, whose verdict is one token (docs/distillation.md says why no reasoning "
            "mode)"
        )
    if spec.adapter is None:
        raise ValidationFailed(
            f"--judge {request.judge!r} has no LoRA adapter: RL trains a judge's adapter "
            "(distill it with `lora` in the settings)"
        )
    base = Path(spec.model) if spec.model else request.default_base()
    check_base_model(base)
    if spec.revision is not None and spec.revision != weights_sha256(base):
        raise ValidationFailed(
            f"--judge {request.judge!r} names base weights {spec.revision[:12]}, but {base} "
            "holds others: RL would train its adapter on another model"
        )
    distilled = (row.settings.get("origin") or {}).get("distilled")
    return Start(spec, row.config_hash, base, Path(spec.adapter), distilled)


def targets_split(
    session: Session, request: ReinforceRequest, start: Start
) -> tuple[Split, Source, float, int]:
    """The targets, split by prompt: by default the SFT judge's source and split (share and
    seed), so RL never trains on a prompt the SFT judge's gate held out."""
    distilled = start.distilled or {}
    recorded = distilled.get("source") or {}
    teacher, labels = request.teacher, request.labels
    if teacher is None and labels is None:
        if recorded.get("kind") == "judge":
            teacher = recorded["name"]
        elif recorded.get("kind") == "labels":
            labels = recorded["name"]
        else:
            raise ValidationFailed(
                f"--judge {request.judge!r} has no distillation record to take its data from: "
                "give --labels SET or --teacher JUDGE"
            )
    if teacher is not None and labels is not None:
        raise ValidationFailed("give the targets' source: --teacher JUDGE or --labels SET (one)")
    split_record = distilled.get("split") or {}
    share = request.train_share or split_record.get("train_share") or DEFAULT_TRAIN_SHARE
    seed = int(split_record.get("seed", request.settings.seed))
    if teacher is not None:
        targets, source = teacher_targets(session, teacher)
    else:
        assert labels is not None
        targets, source = label_targets(session, get_label_set(session, labels))
    return split_by_prompt(targets, share, seed), source, share, seed


def reinforce(
    session: Session,
    request: ReinforceRequest,
    factory_of: FactoryOf,
    *,
    say: Callable[[str], None] = lambda _: None,
    progress: Callable[[int, int, str], None] | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Train the judge by RL, register it and gate it against the judge it started from."""
    check_new_judge(session, request.into, request.run_dir, "reinforced")
    start = starting_judge(session, request)
    split, source, share, split_seed = targets_split(session, request, start)
    data_hash = snapshot_hash(session, split, start.spec)
    started_from = {
        "judge": start.spec.name,
        "config_hash": start.config_hash,
        "adapter_sha256": start.spec.adapter_sha256(),
        "data_snapshot": (start.distilled or {}).get("data_snapshot"),
    }
    run = {
        "into": request.into,
        "run_dir": str(request.run_dir),
        "started_from": started_from,
        "source": source.lineage(),
        "data_snapshot": data_hash,
        "split": split_record(split, share, split_seed),
        "method": "grpo",
        "student_mode": STUDENT_MODE.value,
        "settings": request.settings.model_dump(),
    }
    open_run_dir(request.run_dir, run, split)
    # None: the starting judge has no distillation record (registered from a judge file) to
    # tell whether its gate held out these prompts.
    recorded = started_from["data_snapshot"]
    same_data = None if recorded is None else recorded == data_hash
    say(
        split_summary(split, data_hash)
        + ("" if same_data else f" ({_data_note(start.spec.name, same_data)})")
    )
    model_dir = request.run_dir / "model"
    training = read_json(request.run_dir / "training.json")
    if training is None or not model_dir.is_dir():
        tokenizer = load_tokenizer(start.base)
        prompts = [
            VerdictPrompt(target, chat, encode_chat(tokenizer, chat))
            for target, chat in render_chats(session, start.spec, split.train)
        ]
        session.rollback()  # reading only; the training below takes minutes
        result = train_reinforced(
            start.base,
            start.adapter,
            prompts,
            request.run_dir,
            request.settings,
            phase_progress(progress, "steps"),
        )
        metrics = request.run_dir / "metrics.jsonl"
        training = {
            **asdict(result),
            "model_dir": str(result.model_dir),
            **reward_summary(metrics),
        }
        plot_metric(
            metrics,
            request.run_dir / "reward.png",
            "reward",
            "mean reward (verdicts right)",
            "RL on the judge: reward by step",
        )
        (request.run_dir / "training.json").write_text(json.dumps(training, indent=2) + "\n")
    trained = reinforced_spec(start.spec, request.into, model_dir)
    lineage = {
        **run,
        "base_model": {"path": str(start.base.resolve()), "revision": start.spec.revision},
        "training": training,
        "adapter": {
            "path": trained.adapter,
            "sha256": trained.adapter_sha256(),
            "bytes": adapter_bytes(model_dir),
        },
    }
    row = register_candidate(session, trained, {"reinforced": lineage}, checkpoint)
    held_out = held_out_labels(session, f"reinforce/{request.into}/held-out", source, split)
    say(f"gate: {start.spec.name} and {trained.name} judge {len(split.test)} held-out items")
    gate = run_gate(
        session,
        trained,
        start.spec,
        held_out,
        factory_of,
        request.settings,
        EvaluationOptions(seed=request.settings.seed),
        phase_progress(progress, "held-out verdicts"),
        checkpoint,
        reference=f"{start.spec.name}, the judge it started from",
    )
    return {
        "judge": trained.name,
        "config_hash": row.config_hash,
        "status": gate["decision"],
        "started_from": started_from,
        "same_data_as_started_from": same_data,
        "data_snapshot": data_hash,
        "run_dir": str(request.run_dir),
        "source": source.lineage(),
        "split": run["split"],
        "training": training,
        "gate": gate,
    }


def _data_note(judge: str, same_data: bool | None) -> str:
    if same_data is None:
        return f"{judge} has no distillation record: its training prompts are not known"
    return f"not the data or split {judge} was distilled from"


def reinforced_spec(start: JudgeSpec, name: str, adapter: Path) -> JudgeSpec:
    """The starting judge's spec with the RL adapter: same base, revision, mode and template.
    A calibration map is dropped: it was fitted to the starting judge's probabilities."""
    settings = start.model_dump(exclude={"name", "adapter", "calibration"})
    return JudgeSpec.model_validate({**settings, "name": name, "adapter": str(adapter.resolve())})


def reward_summary(metrics: Path) -> dict[str, Any]:
    """The mean reward of the first and last logged steps, and the share of groups whose
    samples all got the same reward (no advantage, no gradient) over the run."""
    rewards, flat = [], []
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if "reward" in record:
                rewards.append(float(record["reward"]))
            if "frac_reward_zero_std" in record:
                flat.append(float(record["frac_reward_zero_std"]))
    return {
        "first_reward": rewards[0] if rewards else None,
        "last_reward": rewards[-1] if rewards else None,
        "mean_frac_reward_zero_std": sum(flat) / len(flat) if flat else None,
    }
