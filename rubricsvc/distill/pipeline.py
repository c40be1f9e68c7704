"""``judges distill``: from stored verdicts to a registered, gated student judge.

The run folder holds everything needed to trust or repeat the run: ``run.json`` (the resolved
settings, the source, the split and the data snapshot hash), ``examples.jsonl`` (each target
and its side), ``metrics.jsonl`` and ``loss.png``, ``checkpoints/`` and the student ``model/``
(a LoRA student's: its adapter alone, served on the base).
A second run with the same folder and data resumes: from the last checkpoint while training,
past training once the model is saved, past registration once the judge is stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.backends.adapters import adapter_bytes
from rubricsvc.distill.examples import (
    Source,
    Split,
    label_targets,
    render_examples,
    snapshot_hash,
    split_by_prompt,
    teacher_targets,
)
from rubricsvc.distill.gate import FactoryOf, held_out_label_set, run_gate
from rubricsvc.distill.training import (
    DistillSettings,
    Progress,
    check_base_model,
    load_tokenizer,
    plot_loss,
    train_student,
)
from rubricsvc.errors import ConflictError, ValidationFailed
from rubricsvc.hashing import files_sha256
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec, VerdictMode
from rubricsvc.models import JudgeConfig, JudgeGate, JudgeGateStatus, LabelSet
from rubricsvc.scoring.judge_configs import ensure_judge_config, latest_judge_config, stored_spec
from rubricsvc.validation.evaluation import EvaluationOptions
from rubricsvc.validation.labelsets import get_label_set

STUDENT_MODE = VerdictMode.CRITERION_PROB  # one forward pass a verdict: the cheap reward


@dataclass(frozen=True)
class DistillRequest:
    into: str
    base: Path
    run_dir: Path
    train_share: float
    settings: DistillSettings
    teacher: str | None = None
    labels: str | None = None


def weights_sha256(folder: Path) -> str:
    """The hash of a model folder's weight files: a judge config's revision, so retrained
    weights at the same path are another judge and no cached verdict is replayed for them."""
    return files_sha256(sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")]))


def model_spec(name: str, folder: Path) -> JudgeSpec:
    return JudgeSpec(
        name=name,
        backend="transformers",
        model=str(folder.resolve()),
        revision=weights_sha256(folder),
        mode=STUDENT_MODE.value,
    )


def adapter_spec(name: str, base: Path, adapter: Path) -> JudgeSpec:
    """A LoRA student: the base model (pinned by its weights' hash) with the run's adapter,
    which the config hash covers by its contents."""
    return JudgeSpec(
        name=name,
        backend="transformers",
        model=str(base.resolve()),
        revision=weights_sha256(base),
        adapter=str(adapter.resolve()),
        mode=STUDENT_MODE.value,
    )


def check_request(session: Session, request: DistillRequest) -> None:
    """Refuse bad input before anything is read or stored."""
    if (request.teacher is None) == (request.labels is None):
        raise ValidationFailed("give the targets' source: --teacher JUDGE or --labels SET (one)")
    check_base_model(request.base)
    check_new_judge(session, request.into, request.run_dir, "distilled")


def check_new_judge(session: Session, into: str, run_dir: Path, origin_key: str) -> None:
    """Refuse an ``--into`` that names a judge, unless it is this run's own (``origin_key``:
    the lineage a run of the kind records, with its run folder), which a re-run resumes."""
    if into in BUILTIN_JUDGES:
        raise ValidationFailed(f"--into {into!r} is a built-in judge: name the student anew")
    stored = latest_judge_config(session, into)
    origin = (stored.settings.get("origin") or {}).get(origin_key) if stored else None
    if stored is not None and (origin is None or origin.get("run_dir") != str(run_dir)):
        raise ConflictError(
            f"--into {into!r} names an existing judge: the student needs a new name"
        )


def targets_split(session: Session, request: DistillRequest) -> tuple[Split, Source]:
    if request.teacher is not None:
        targets, source = teacher_targets(session, request.teacher)
    else:
        assert request.labels is not None
        targets, source = label_targets(session, get_label_set(session, request.labels))
    return split_by_prompt(targets, request.train_share, request.settings.seed), source


def distill(
    session: Session,
    request: DistillRequest,
    factory_of: FactoryOf,
    *,
    say: Callable[[str], None] = lambda _: None,
    progress: Callable[[int, int, str], None] | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Train, register and gate the student; the report of it all."""
    check_request(session, request)
    split, source = targets_split(session, request)
    render_spec = JudgeSpec(name=request.into, backend="transformers", mode=STUDENT_MODE.value)
    data_hash = snapshot_hash(session, split, render_spec)
    run = _run_record(request, source, split, data_hash)
    open_run_dir(request.run_dir, run, split)
    say(split_summary(split, data_hash))
    model_dir = request.run_dir / "model"
    training = read_json(request.run_dir / "training.json")
    if training is None or not model_dir.is_dir():
        tokenizer = load_tokenizer(request.base)
        examples = render_examples(session, render_spec, tokenizer, split.train)
        session.rollback()  # reading only; the training below takes minutes
        fits = sum(1 for e in examples if len(e.input_ids) <= request.settings.max_length)
        say(
            f"training on {fits} of {len(examples)} examples (the rest are over max_length "
            f"{request.settings.max_length} tokens)"
        )
        result = train_student(
            request.base,
            examples,
            request.run_dir,
            request.settings,
            phase_progress(progress, "steps"),
        )
        training = {**asdict(result), "model_dir": str(result.model_dir)}
        plot_loss(request.run_dir / "metrics.jsonl", request.run_dir / "loss.png")
        (request.run_dir / "training.json").write_text(json.dumps(training, indent=2) + "\n")
    base = _base_spec(session, request)
    lineage = {
        **run,
        "base_model": {"path": str(request.base.resolve()), "revision": base.revision},
        "training": training,
    }
    if request.settings.lora is not None:
        student = adapter_spec(request.into, request.base, model_dir)
        lineage["adapter"] = {
            "path": student.adapter,
            "sha256": student.adapter_sha256(),
            "bytes": adapter_bytes(model_dir),
        }
    else:
        student = model_spec(request.into, model_dir)
    row = register_candidate(session, student, {"distilled": lineage}, checkpoint)
    held_out = held_out_labels(session, f"distill/{request.into}/held-out", source, split)
    say(f"gate: {base.name} and {student.name} judge {len(split.test)} held-out items")
    gate = run_gate(
        session,
        student,
        base,
        held_out,
        factory_of,
        request.settings,
        EvaluationOptions(seed=request.settings.seed),
        phase_progress(progress, "held-out verdicts"),
        checkpoint,
    )
    return {
        "judge": student.name,
        "config_hash": row.config_hash,
        "status": gate["decision"],
        "data_snapshot": data_hash,
        "run_dir": str(request.run_dir),
        "source": source.lineage(),
        "split": run["split"],
        "training": training,
        "gate": gate,
    }


def split_summary(split: Split, data_hash: str) -> str:
    """The first thing a training run says: how its targets were split, on which data."""
    return (
        f"{len(split.train)} training targets on {len(split.train_prompts)} prompts, "
        f"{len(split.test)} held out on {len(split.test_prompts)} prompts; data {data_hash[:12]}"
    )


def split_record(split: Split, train_share: float, seed: int) -> dict[str, Any]:
    """The split as ``run.json`` records it, the same for every training run: a re-run of
    the folder with another split is refused, and a later run compares its split to it."""
    return {
        "by": "prompt",
        "train_share": train_share,
        "seed": seed,
        "train_prompts": len(split.train_prompts),
        "test_prompts": len(split.test_prompts),
        "train_targets": len(split.train),
        "test_targets": len(split.test),
    }


def register_candidate(
    session: Session,
    spec: JudgeSpec,
    origin: dict[str, Any],
    checkpoint: Callable[[], None] | None,
) -> JudgeConfig:
    """A trained judge stored with its lineage (``origin``) and a candidate gate, both once
    (a resumed run finds them), then checkpointed: the candidate is stored before the gate's
    judging starts, so a run stopped there keeps it."""
    row = ensure_judge_config(session, spec, origin=origin)
    if session.scalar(select(JudgeGate.id).where(JudgeGate.judge_config_id == row.id)) is None:
        session.add(JudgeGate(judge_config_id=row.id, status=JudgeGateStatus.CANDIDATE, report={}))
    session.flush()
    if checkpoint is not None:
        checkpoint()
    return row


def held_out_labels(session: Session, name: str, source: Source, split: Split) -> LabelSet:
    """The split's held-out targets as the label set ``name`` the gate judges, labelled by
    the targets' source."""
    return held_out_label_set(
        session, name, f"{source.kind} {source.name}", source.name, split.test
    )


def phase_progress(progress: Callable[[int, int, str], None] | None, what: str) -> Progress | None:
    """``progress`` for one phase of the run, which it names (training steps, then verdicts)."""
    if progress is None:
        return None
    return lambda done, total: progress(done, total, what)


def _base_spec(session: Session, request: DistillRequest) -> JudgeSpec:
    """The base model as a judge: a stored config of the same settings keeps its name."""
    spec = model_spec(f"{request.into}-base", request.base)
    same = session.scalar(select(JudgeConfig).where(JudgeConfig.config_hash == spec.config_hash()))
    return stored_spec(same) if same is not None else spec


def _run_record(
    request: DistillRequest, source: Source, split: Split, data_hash: str
) -> dict[str, Any]:
    return {
        "into": request.into,
        "run_dir": str(request.run_dir),
        "source": source.lineage(),
        "data_snapshot": data_hash,
        "split": split_record(split, request.train_share, request.settings.seed),
        "student_mode": STUDENT_MODE.value,
        "settings": request.settings.recorded(),
    }


def open_run_dir(folder: Path, run: dict[str, Any], split: Split) -> None:
    """A new run folder, or the same run's to resume; another run's is refused."""
    recorded = read_json(folder / "run.json")
    if recorded is not None:
        if recorded != json.loads(json.dumps(run)):
            raise ConflictError(
                f"run folder {folder} holds another run (other data, split or settings): "
                "pass another --run-dir, or remove it to start over"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    with (folder / "examples.jsonl").open("w", encoding="utf-8") as handle:
        for side, targets in (("train", split.train), ("test", split.test)):
            for t in targets:
                handle.write(json.dumps({"side": side, **asdict(t)}) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
