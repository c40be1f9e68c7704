"""Training a student judge on its teacher's verdicts with TRL's SFTTrainer.

The student is a criterion-prob judge: it reads the rendered prompt and its verdict is the
probability of the token "Yes" against "No". So the loss is the cross-entropy of that next
token against the teacher's P(met) (a soft target; with a yes/no teacher exactly SFT on the
verdict token), computed from the last position's logits only: one vocabulary row per example
instead of one per token. Examples are left-padded with explicit positions, so the last
position is the verdict's in every row of a batch.

On a CPU a 135M model's backward pass through all layers costs ~3x its forward pass;
``trainable_layers`` trains only the top decoder layers (and the final norm), which makes
training ~3x cheaper where every layer would be too slow.

With ``lora`` the student is the frozen base with a LoRA adapter (peft), and the run saves
the adapter alone: a judge of a few megabytes on a base every machine already has.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rubricsvc.backends.adapters import adapter_bytes
from rubricsvc.distill.examples import NO, YES, Example
from rubricsvc.errors import ValidationFailed, missing_extra
from rubricsvc.fileformats import jsonl_lines

Progress = Callable[[int, int], None]


# The Llama architecture's attention and MLP projections (the bundled model's, and most
# decoder-only models' in transformers): every linear layer of a decoder layer.
LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(BaseModel):
    """A LoRA student: the base stays frozen, a low-rank adapter on ``target_modules`` trains,
    and the run saves the adapter alone (megabytes, where a full copy is the base's size)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: int = Field(default=8, ge=1)  # the adapter's rank: its size grows with it
    alpha: float = Field(default=16.0, gt=0)  # the update is scaled by alpha / r
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: tuple[str, ...] = Field(default=LLAMA_PROJECTIONS, min_length=1)


class DistillSettings(BaseModel):
    """How a student is trained and gated (``judges distill --config FILE``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: float = Field(default=1.0, gt=0)
    max_steps: int = Field(default=-1, description="optimizer steps; -1: as many as epochs make")
    learning_rate: float = Field(default=5e-5, gt=0)
    batch_size: int = Field(default=1, ge=1)
    gradient_accumulation_steps: int = Field(default=8, ge=1)
    warmup_ratio: float = Field(default=0.05, ge=0, lt=1)
    lr_scheduler: str = "cosine"
    weight_decay: float = Field(default=0.0, ge=0)
    # Training examples longer than this many tokens are left out (counted in the report);
    # the student still judges long prompts when it serves.
    max_length: int = Field(default=1024, ge=16)
    trainable_layers: int | None = Field(default=None, ge=1)  # None: every layer trains
    # Set: the student is the base with a LoRA adapter, and only the adapter trains (on the
    # top ``trainable_layers`` layers when that is set too).
    lora: LoraSettings | None = None
    soft_targets: bool = True  # False: the teacher's P(met) rounded to 1 or 0
    seed: int = 0
    save_steps: int = Field(default=50, ge=1)
    logging_steps: int = Field(default=5, ge=1)
    threads: int | None = Field(default=None, ge=1)
    # The promotion gate: the student's agreement with the teacher on the held-out prompts
    # must reach min_agreement, and beat the base model's (the 95% interval of the paired
    # difference above min_gain).
    min_agreement: float = Field(default=0.7, ge=0, le=1)
    min_gain: float = Field(default=0.0, ge=-1, le=1)
    # The share of the held-out labels the student must give a verdict on: its agreement
    # and gain are measured only where it answered, so a student that fails on the hard
    # items would otherwise be judged on the easy ones (and a refresh swap it in).
    min_coverage: float = Field(default=0.95, ge=0, le=1)
    # True: the gain must also be above min_gain within criteria, on the held-out criteria
    # that some completions meet and others do not (rubricsvc/distill/gate.py); labels with
    # no such criterion are refused. Off by default: distillation data often has one
    # completion per prompt, so no criterion can be contrasted. A judge refresh turns it on.
    within_criteria: bool = False

    def recorded(self) -> dict[str, Any]:
        """The settings as ``run.json`` records them: ``lora`` only when set, so a run folder
        from before LoRA students still resumes."""
        settings = self.model_dump()
        if self.lora is None:
            del settings["lora"]
        return settings


@dataclass(frozen=True)
class TrainingResult:
    model_dir: Path
    examples: int
    left_out: int  # longer than max_length
    steps: int
    seconds: float
    final_loss: float | None
    resumed_from: str | None
    adapter_bytes: int | None = None  # a LoRA student's adapter on disk (None: a full model)


def training_imports() -> tuple[Any, Any, Any]:
    try:
        import torch
        import transformers
        import trl
    except ImportError as err:
        raise missing_extra(
            err, "training a judge needs the trainer extra (TRL, transformers)", "trainer"
        ) from None
    return torch, transformers, trl


def load_tokenizer(base: Path) -> Any:
    _, transformers, _ = training_imports()
    return transformers.AutoTokenizer.from_pretrained(base)


def check_base_model(base: Path) -> None:
    """Refuse a base that is not a model folder transformers can load, before any work."""
    if not base.is_dir():
        raise ValidationFailed(f"--base {base}: no such folder (a model folder: config.json ...)")
    if not (base / "config.json").is_file():
        raise ValidationFailed(
            f"--base {base} is not a model folder: it has no config.json (save one with "
            "save_pretrained, or use `rubricsvc models prepare` for the bundled model)"
        )
    weights = [*base.glob("*.safetensors"), *base.glob("*.bin")]
    if not weights:
        raise ValidationFailed(f"--base {base} is not a model folder: it holds no weights")


def verdict_token_ids(tokenizer: Any) -> tuple[int, int]:
    ids = []
    for word in (YES, NO):
        encoded = tokenizer.encode(word, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValidationFailed(
                f"the base model's tokenizer makes {word!r} {len(encoded)} tokens: a criterion-"
                "prob student needs single-token verdicts"
            )
        ids.append(int(encoded[0]))
    return ids[0], ids[1]


def train_student(
    base: Path,
    examples: Sequence[Example],
    run_dir: Path,
    settings: DistillSettings,
    progress: Progress | None = None,
) -> TrainingResult:
    """Fine-tune ``base`` on ``examples``; checkpoints in ``run_dir/checkpoints`` (a re-run
    resumes from the last), the model in ``run_dir/model``, the log in ``metrics.jsonl``."""
    torch, transformers, trl = training_imports()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    kept = fitting(examples, settings.max_length, "training example")
    tokenizer = load_tokenizer(base)
    yes_id, no_id = verdict_token_ids(tokenizer)
    transformers.utils.logging.disable_progress_bar()
    transformers.set_seed(settings.seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if settings.lora is not None:
        model = with_lora_adapter(model, settings.lora, settings.trainable_layers)
    else:
        _freeze_lower_layers(model, settings.trainable_layers)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    from datasets import Dataset

    dataset = Dataset.from_list(
        [
            {
                "input_ids": e.input_ids,
                "target": e.target.value if settings.soft_targets else float(e.target.value >= 0.5),
            }
            for e in kept
        ]
    )
    checkpoints = run_dir / "checkpoints"
    config = trl.SFTConfig(
        **schedule_arguments(settings, checkpoints),
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        use_cpu=not torch.cuda.is_available(),
        max_length=None,
        dataset_kwargs={"skip_prepare_dataset": True},
    )
    log_path = run_dir / "metrics.jsonl"
    trainer = _verdict_trainer_class(trl.SFTTrainer, torch)(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        data_collator=_LeftPadCollator(pad_id, torch),
        callbacks=[log_callback(log_path, progress, transformers)],
        verdict_ids=(yes_id, no_id),
    )
    return train_and_save(
        trainer,
        tokenizer,
        run_dir,
        transformers,
        len(kept),
        len(examples) - len(kept),
        adapter=settings.lora is not None,
    )


class Schedule(Protocol):
    """The settings every judge-training run has (``DistillSettings``, ``ReinforceSettings``)."""

    @property
    def epochs(self) -> float: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def warmup_ratio(self) -> float: ...
    @property
    def lr_scheduler(self) -> str: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def save_steps(self) -> int: ...
    @property
    def logging_steps(self) -> int: ...


def schedule_arguments(settings: Schedule, checkpoints: Path) -> dict[str, Any]:
    """The TRL config arguments every judge-training run shares: its schedule and seed from
    ``settings``, checkpoints in ``checkpoints`` (the last two kept, for resuming), its log
    to metrics.jsonl only (no tracker, no tqdm), no mixed precision, the dataset's columns
    as the run made them. Shared so a distilled and an RL judge train on the same terms."""
    return {
        "output_dir": str(checkpoints),
        "num_train_epochs": settings.epochs,
        "max_steps": settings.max_steps,
        "learning_rate": settings.learning_rate,
        "warmup_steps": settings.warmup_ratio,  # a float below 1: a share of the steps
        "lr_scheduler_type": settings.lr_scheduler,
        "weight_decay": settings.weight_decay,
        "seed": settings.seed,
        "data_seed": settings.seed,
        "save_steps": settings.save_steps,
        "save_total_limit": 2,
        "logging_steps": settings.logging_steps,
        "logging_first_step": True,
        "report_to": [],
        "disable_tqdm": True,
        "bf16": False,
        "fp16": False,
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
    }


class Tokenized(Protocol):
    """A training item encoded for the model: a distillation example or an RL prompt."""

    @property
    def input_ids(self) -> list[int]: ...


TokenizedT = TypeVar("TokenizedT", bound=Tokenized)


def fitting(items: Sequence[TokenizedT], max_length: int, noun: str) -> list[TokenizedT]:
    """The items of at most ``max_length`` tokens, the rest left out (every judge-training
    run counts them); none at all is refused, with the shortest's length to raise it to."""
    kept = [item for item in items if len(item.input_ids) <= max_length]
    if not kept:
        raise ValidationFailed(
            f"no {noun} fits max_length {max_length} tokens (the shortest is "
            f"{min(len(item.input_ids) for item in items)}): raise max_length in --config"
        )
    return kept


def train_and_save(
    trainer: Any,
    tokenizer: Any,
    run_dir: Path,
    transformers: Any,
    examples: int,
    left_out: int,
    *,
    adapter: bool,
) -> TrainingResult:
    """Run a judge's ``trainer`` (SFT or GRPO, its checkpoints in ``run_dir/checkpoints``)
    from its last checkpoint if there is one, and save the model (``adapter``: a peft
    model's adapter alone) and tokenizer in ``run_dir/model``: how every judge-training run
    resumes, saves and reports, so a distilled and an RL judge's run folders read alike."""
    # Without tqdm the Trainer prints every log dict to stdout; they go to metrics.jsonl.
    trainer.remove_callback(transformers.PrinterCallback)
    checkpoints = run_dir / "checkpoints"
    last = (
        transformers.trainer_utils.get_last_checkpoint(str(checkpoints))
        if checkpoints.is_dir()
        else None
    )
    started = time.monotonic()
    output = trainer.train(resume_from_checkpoint=last)
    seconds = time.monotonic() - started
    model_dir = run_dir / "model"
    # A peft model saves its adapter alone (adapter_config.json, adapter_model.safetensors).
    trainer.save_model(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    final_loss = output.training_loss if output is not None else None
    return TrainingResult(
        model_dir,
        examples,
        left_out,
        int(trainer.state.global_step),
        seconds,
        float(final_loss) if final_loss is not None else None,
        last,
        adapter_bytes(model_dir) if adapter else None,
    )


def with_lora_adapter(model: Any, lora: LoraSettings, trainable: int | None) -> Any:
    """``model`` frozen under a fresh LoRA adapter (only on the top ``trainable`` decoder
    layers when given: the backward pass then stops there, as with a full student)."""
    try:
        import peft
    except ImportError as err:
        raise missing_extra(
            err, "a LoRA student needs peft (the trainer extra)", "trainer"
        ) from None
    layers: list[int] | None = None
    if trainable is not None:
        count = int(model.config.num_hidden_layers)
        layers = list(range(max(0, count - trainable), count))
    config = peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        layers_to_transform=layers,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(model, config)
    except ValueError as err:  # e.g. target modules the model does not have
        raise ValidationFailed(f"lora: {err}") from None


def _freeze_lower_layers(model: Any, trainable: int | None) -> None:
    """Train only the top ``trainable`` decoder layers and the final norm (None: all)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if trainable is None:
        return
    if layers is None:
        raise ValidationFailed(
            "trainable_layers needs a decoder with model.layers (a Llama-style model); "
            "leave it out to train every layer"
        )
    for parameter in model.parameters():
        parameter.requires_grad = False
    for layer in list(layers)[-trainable:]:
        for parameter in layer.parameters():
            parameter.requires_grad = True
    norm = getattr(model.model, "norm", None)
    if norm is not None:
        for parameter in norm.parameters():
            parameter.requires_grad = True


class _LeftPadCollator:
    """Left-pads a batch, with positions counted from each row's first real token, so the
    last position of every row is where its verdict token is predicted."""

    def __init__(self, pad_id: int, torch: Any) -> None:
        self.pad_id = pad_id
        self.torch = torch

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        torch = self.torch
        width = max(len(r["input_ids"]) for r in rows)
        ids, mask, positions = [], [], []
        for row in rows:
            n = len(row["input_ids"])
            ids.append([self.pad_id] * (width - n) + list(row["input_ids"]))
            mask.append([0] * (width - n) + [1] * n)
            positions.append([0] * (width - n) + list(range(n)))
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
            "position_ids": torch.tensor(positions, dtype=torch.long),
            "target": torch.tensor([float(r["target"]) for r in rows], dtype=torch.float32),
        }


def _verdict_trainer_class(base: Any, torch: Any) -> Any:
    """SFTTrainer whose loss is the verdict token's cross-entropy against the soft target."""

    class VerdictSFTTrainer(base):  # type: ignore[misc]
        def __init__(self, *args: Any, verdict_ids: tuple[int, int], **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.verdict_ids = verdict_ids

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            target = inputs.pop("target")
            outputs = model(
                input_ids=inputs["input_ids"],
                attention_mask=inputs["attention_mask"],
                position_ids=inputs["position_ids"],
                use_cache=False,
                logits_to_keep=1,
            )
            log_probs = torch.log_softmax(outputs.logits[:, -1, :].float(), dim=-1)
            yes, no = self.verdict_ids
            per_example = -(target * log_probs[:, yes] + (1.0 - target) * log_probs[:, no])
            loss = per_example.mean()
            return (loss, outputs) if return_outputs else loss

    return VerdictSFTTrainer


def log_callback(path: Path, progress: Progress | None, transformers: Any) -> Any:
    """A TrainerCallback that writes every log line to ``metrics.jsonl`` and moves the
    progress bar each step (made here: transformers is imported lazily)."""

    class LogCallback(transformers.TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if not logs:
                return
            with path.open("a", encoding="utf-8") as handle:
                record = {"step": state.global_step, "epoch": state.epoch, **logs}
                handle.write(json.dumps(record) + "\n")

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if progress is not None:
                progress(state.global_step, state.max_steps)

    return LogCallback()


def plot_loss(metrics: Path, out: Path) -> bool:
    """The training loss by step, from ``metrics.jsonl`` (False: nothing logged to plot)."""
    return plot_metric(metrics, out, "loss", "verdict cross-entropy", "student training loss")


def plot_metric(metrics: Path, out: Path, key: str, ylabel: str, title: str) -> bool:
    """One logged figure of ``metrics.jsonl`` by step (False: it was never logged)."""
    points = []
    lines = jsonl_lines(metrics.read_text(encoding="utf-8")) if metrics.is_file() else []
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        if key in record:
            points.append((record["step"], record[key]))
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot([p[0] for p in points], [p[1] for p in points], marker=".")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return True
