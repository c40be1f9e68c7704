"""The supervised warm start on TRL's SFTTrainer: the launcher behind ``rubricsvc train sft``.

TRL's trainer is configured, not copied: the rows are read and tokenized with their labels
(``trainer/sft_data.py``), and ``SFTTrainer`` trains on them as they are. The run directory:

config.yaml       the resolved config, with the data's sha256 (a re-run refuses other data)
sft_args.json     every argument handed to TRL's SFTConfig
data.json         what the data held: rows, rows trained on and left out, tokens with a
                  label, the tool schemas and chat templates used
environment.json  the machine and software it ran on (trainer/environment.py)
metrics.jsonl     one line per logged step (loss, grad_norm, learning_rate, ...)
plots/*.png       the loss and the next-token accuracy on the trained tokens
policy/           the fine-tuned policy and its tokenizer: the ``policy`` of the RL run
adapter/          with ``lora``: the trained LoRA adapter (peft's format); ``policy/`` is the
                  base with it merged, and ``rubricsvc train merge-adapter`` makes the same
                  folder again from the adapter and the base (trainer/merge.py)
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricsvc.distill.training import with_lora_adapter
from rubricsvc.errors import ValidationFailed
from trainer.environment import describe_environment
from trainer.grpo import policy_path
from trainer.merge import save_merged
from trainer.plots import SFT_FIGURES, draw_plots
from trainer.rundir import METRICS, RunDirectory
from trainer.sft_config import SftConfig
from trainer.sft_data import (
    check_loss_mask,
    choose_templates,
    environment_tools,
    read_sft_data,
    tokenize_rows,
)
from trainer.training_stack import import_training_stack

log = logging.getLogger(__name__)
SFT_ARGS = "sft_args.json"
DATA_RECORD = "data.json"
POLICY = "policy"
ADAPTER = "adapter"


@dataclass(frozen=True)
class SftResult:
    run_dir: Path
    policy_dir: Path
    adapter_dir: Path | None  # with ``lora``: the adapter alone
    rows: int  # trained on
    left_out: int  # longer than max_length
    steps: int
    seconds: float
    first_loss: float | None
    last_loss: float | None


def sft_arguments(config: SftConfig, output_dir: Path) -> dict[str, Any]:
    """The keyword arguments of TRL's SFTConfig for this run."""
    import torch

    s = config.sft
    on_gpu = torch.cuda.is_available()
    return {
        "output_dir": str(output_dir),
        "learning_rate": s.learning_rate,
        "num_train_epochs": s.num_train_epochs,
        "max_steps": s.max_steps,
        "per_device_train_batch_size": s.per_device_train_batch_size,
        "gradient_accumulation_steps": s.gradient_accumulation_steps,
        "lr_scheduler_type": s.lr_scheduler_type,
        "warmup_steps": s.warmup_ratio,  # a float below 1: a share of the steps
        "weight_decay": s.weight_decay,
        "logging_steps": s.logging_steps,
        "seed": s.seed,
        "data_seed": s.seed,
        "report_to": [],  # the run directory is the record; no tracker is assumed
        "save_strategy": "no",  # the policy is saved once, at the end
        "disable_tqdm": True,
        "use_cpu": not on_gpu,
        # bfloat16 on a GPU that has it; float32 on CPU, where the bundled model degenerates
        # in bfloat16 (as in GRPO, trainer/grpo.py).
        "bf16": on_gpu and torch.cuda.is_bf16_supported(),
        "gradient_checkpointing": on_gpu,
        # The rows come tokenized with their labels (trainer/sft_data.py): TRL neither
        # renders, truncates nor masks them again.
        "dataset_kwargs": {"skip_prepare_dataset": True},
        "max_length": None,
        "packing": False,
        "assistant_only_loss": False,
        "completion_only_loss": False,
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
    }


def train_sft(config: SftConfig, say: Callable[[str], None] = log.info) -> SftResult:
    """Fine-tune ``config.policy`` on ``config.data``; everything it keeps is in
    ``config.run_dir``."""
    torch, transformers, trl, Dataset = import_training_stack(config.threads)
    data = read_sft_data(config.data)
    if config.data_sha256 is not None and config.data_sha256 != data.sha256:
        raise ValidationFailed(
            f"{config.data}: its sha256 is {data.sha256}, not the data_sha256 the config "
            f"names ({config.data_sha256}): other data than the recorded run's"
        )
    policy = policy_path(config)
    tools = (
        environment_tools(config.environment, config.agent.options)
        if config.environment is not None
        else None
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(policy)
    tool_format = tools is not None or any(row.uses_tools for row in data.rows)
    templates = choose_templates(tokenizer, tool_format)
    check_loss_mask(data.rows, templates, config.sft.assistant_only_loss)
    tokenized = tokenize_rows(
        tokenizer,
        data.rows,
        templates,
        tools,
        config.sft.max_length,
        config.sft.assistant_only_loss,
    )
    say(
        f"{len(tokenized.input_ids)} row(s) to train on, {tokenized.left_out} left out "
        f"(longer than {config.sft.max_length} tokens); {tokenized.trained_tokens} token(s) "
        f"with a label; chat template's training variant: {templates.source}"
    )

    run = RunDirectory(config.run_dir)
    arguments = sft_arguments(config, run.path / "trl")
    recorded = config.model_dump(mode="json") | {"data_sha256": data.sha256}
    run.write_config(recorded, arguments, args_name=SFT_ARGS)
    run.write_environment(describe_environment())
    _write_record(run, config, data.sha256, len(data.rows), tokenized, templates, tools)

    transformers.utils.logging.disable_progress_bar()
    transformers.set_seed(config.sft.seed)
    dtype = torch.float32  # bf16 on a GPU comes from the mixed-precision setting
    model = transformers.AutoModelForCausalLM.from_pretrained(policy, dtype=dtype)
    if config.lora is not None:  # the base frozen under a fresh adapter, as a LoRA student's
        model = with_lora_adapter(model, config.lora, trainable=None)
    dataset = Dataset.from_dict({"input_ids": tokenized.input_ids, "labels": tokenized.labels})
    trainer = trl.SFTTrainer(
        model=model,
        args=trl.SFTConfig(**arguments),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[_metrics_callback(run, transformers)],
    )
    # Without tqdm the Trainer prints every log dict to stdout; they go to metrics.jsonl.
    trainer.remove_callback(transformers.PrinterCallback)
    started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - started
    draw_plots(run, SFT_FIGURES)
    policy_dir = run.path / POLICY
    adapter_dir = None
    if config.lora is None:
        trainer.save_model(str(policy_dir))
    else:
        adapter_dir = run.path / ADAPTER
        trainer.model.save_pretrained(str(adapter_dir))
        save_merged(trainer.model, policy_dir)
    # The policy's own tokenizer, its chat template unchanged: the RL run gives it the tool
    # format the same way it gives the base policy one (trainer/grpo.py).
    transformers.AutoTokenizer.from_pretrained(policy).save_pretrained(str(policy_dir))
    losses = [m["loss"] for m in run.read(METRICS) if m.get("loss") is not None]
    return SftResult(
        run.path,
        policy_dir,
        adapter_dir,
        len(tokenized.input_ids),
        tokenized.left_out,
        int(trainer.state.global_step),
        seconds,
        losses[0] if losses else None,
        losses[-1] if losses else None,
    )


def _write_record(
    run: RunDirectory,
    config: SftConfig,
    sha256: str,
    rows: int,
    tokenized: Any,
    templates: Any,
    tools: list[dict[str, Any]] | None,
) -> None:
    record = {
        "path": str(config.data),
        "sha256": sha256,
        "rows": rows,
        "trained_rows": len(tokenized.input_ids),
        "left_out_longer_than_max_length": tokenized.left_out,
        "trained_tokens": tokenized.trained_tokens,
        "loss_on": (
            "the assistant's turns"
            if config.sft.assistant_only_loss
            else "everything after the prompt"
        ),
        "environment_tools": [t["function"]["name"] for t in tools or []],
        "policy_chat_template_sha256": _sha256(templates.policy),
        "training_chat_template": templates.source,
        "training_chat_template_sha256": (
            _sha256(templates.training) if templates.training is not None else None
        ),
    }
    text = json.dumps(record, indent=2, ensure_ascii=False)
    (run.path / DATA_RECORD).write_text(text + "\n", encoding="utf-8")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _metrics_callback(run: RunDirectory, transformers: Any) -> Any:
    """A TrainerCallback writing each logged step to metrics.jsonl (made here: transformers
    is imported lazily)."""

    class MetricsCallback(transformers.TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if not logs or "train_runtime" in logs:  # the end-of-training summary: no step
                return
            run.append(METRICS, {"step": state.global_step, **logs})

    return MetricsCallback()
