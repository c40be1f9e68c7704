"""``rubricsvc train CONFIG``: GRPO on TRL with rubric rewards (the trainer package)."""

from __future__ import annotations

from pathlib import Path

import typer

from rubricsvc.cli.context import CliExit, console, engine, require_migrated
from rubricsvc.errors import missing_extra


def train_command(
    config_file: Path = typer.Argument(
        ..., help="The training config (YAML), see docs/trainer.md."
    ),
    name: str | None = typer.Option(None, help="Run name (the run directory is OUTPUT_DIR/NAME)."),
    max_steps: int | None = typer.Option(None, help="Override grpo.max_steps."),
    random_rewards: bool | None = typer.Option(
        None,
        "--random-rewards/--rubric-rewards",
        help="Train on uniform random rewards (a control run), or on the rubric rewards.",
        show_default=False,
    ),
) -> None:
    """Train a policy with GRPO against rubric rewards; the run directory keeps everything."""
    try:
        from trainer.config import load_config
        from trainer.grpo import train
    except ImportError as err:
        raise missing_extra(
            err, "training needs the trainer extra", "trainer,transformers"
        ) from None
    overrides: dict[str, object] = {}
    if name is not None:
        overrides["name"] = name
    if random_rewards is not None:
        overrides["random_rewards"] = random_rewards
    config = load_config(config_file, overrides)
    if max_steps is not None:
        config = config.model_copy(
            update={"grpo": config.grpo.model_copy(update={"max_steps": max_steps})}
        )
    if config.reward.database_url is None:
        require_migrated(engine())
    if config.run_dir.exists() and any(config.run_dir.iterdir()):
        raise CliExit(f"run directory {config.run_dir} is not empty: choose another --name")
    console.print(f"run directory: {config.run_dir}")
    result = train(config, say=console.print)
    console.print(
        f"{result.steps} step(s) done; config, metrics, samples and plots in {result.run_dir}"
    )
