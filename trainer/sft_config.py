"""The supervised warm start's config (``rubricsvc train sft CONFIG``): a YAML file validated
here, every default explicit and written to the run directory, as the GRPO config is.

A warm start fine-tunes a policy on chat rows (``{"messages": [...]}``: the rows
``rubricsvc completions export-sft`` writes, or demonstrations in the same format) before RL;
the fine-tuned policy in ``RUN/policy`` is then the ``policy`` of the GRPO run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from rubricsvc.distill.training import LoraSettings
from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error
from trainer.config import Strict, read_config_data


class SftSettings(Strict):
    """What is handed to TRL's SFTConfig (names are TRL's, or transformers')."""

    learning_rate: float = Field(default=2e-5, gt=0.0)  # TRL's SFT default
    # Passes over the data: a few hundred demonstrations teach a small model a format in a
    # few epochs; max_steps, when set (> 0), stops it earlier.
    num_train_epochs: float = Field(default=3.0, gt=0.0)
    max_steps: int = Field(default=-1, ge=-1)
    per_device_train_batch_size: int = Field(default=4, ge=1)  # rows per step
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    lr_scheduler_type: str = "linear"
    warmup_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)  # share of the steps
    weight_decay: float = Field(default=0.0, ge=0.0)
    # A row longer than this many tokens is left out (and counted), never cut: a trajectory
    # cut short loses its answer, and the policy would learn to stop mid-research.
    max_length: int = Field(default=2048, ge=16)
    # The loss on the assistant's turns only (its tool calls and answers), not on the prompt
    # or the tool results it was shown: what the policy writes is learned, what it reads is
    # not. False: on everything after the prompt, tool results included.
    assistant_only_loss: bool = True
    logging_steps: int = Field(default=1, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _steps(self) -> SftSettings:
        if self.max_steps == 0:
            raise ValueError("max_steps: -1 (epochs decide) or a number of steps above 0")
        return self


class SftAgentSettings(Strict):
    """The tool environment's options (the GRPO config's ``agent.options``): only what
    building its tools needs."""

    options: dict[str, Any] = Field(default_factory=dict)


class SftConfig(Strict):
    """One warm start: the policy, the data, the settings and where the run is kept."""

    name: str = "sft"
    policy: str | None = None  # a model folder; None: the embedded SmolLM2-135M-Instruct
    data: Path  # JSON Lines of {"messages": [...]} (or {"prompt": [...], "completion": [...]})
    # The data file's sha256: None takes the file as it is; set (config.yaml records it), the
    # run refuses other data, so a recorded config re-runs on the data it was run on.
    data_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # The tool environment the RL run will use (deepresearch): its tools' JSON schemas are
    # rendered into every row's prompt, as GRPO renders them, and the policy's chat template
    # is given a tool-call format where its own has none. None: only the rows' own ``tools``.
    environment: str | None = None
    agent: SftAgentSettings = Field(default_factory=SftAgentSettings)
    sft: SftSettings = Field(default_factory=SftSettings)
    # A LoRA adapter trained instead of every weight, with the settings of a LoRA judge
    # student (``judges distill``): r, alpha, dropout, target_modules. None: every weight.
    lora: LoraSettings | None = None
    output_dir: Path = Path("runs")  # the run directory is OUTPUT_DIR/NAME
    threads: int | None = Field(default=None, ge=1)  # torch threads; None: torch's default

    @property
    def run_dir(self) -> Path:
        return self.output_dir / self.name


def load_sft_config(path: Path, overrides: dict[str, Any] | None = None) -> SftConfig:
    """The warm start's config in ``path`` (YAML), with ``overrides`` on top (dotted keys:
    ``sft.seed``); its ``data``, ``output_dir`` and corpus relative to the file."""
    data = read_config_data(path, overrides)
    rows = data.get("data")
    if rows is not None and not Path(str(rows)).is_absolute():
        data["data"] = str(path.parent / str(rows))
    try:
        return SftConfig.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(f"{path}: {describe_validation_error(err)}") from None
