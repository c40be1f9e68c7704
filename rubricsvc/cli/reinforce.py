"""``rubricsvc judges reinforce``: RL on a distilled judge, gated against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import console
from rubricsvc.cli.distill import print_gate
from rubricsvc.cli.judge_training import read_settings_file, run_judge_training
from rubricsvc.config import get_settings
from rubricsvc.distill.examples import parse_split
from rubricsvc.distill.grpo import ReinforceSettings
from rubricsvc.distill.reinforce import ReinforceRequest, reinforce


def judges_reinforce(
    judge: str = typer.Option(
        ..., help="The judge RL starts from: a stored criterion-prob judge with a LoRA adapter."
    ),
    into: str = typer.Option(..., help="The RL judge's name."),
    labels: str | None = typer.Option(
        None, help="A label set to learn from (default: the one the judge was distilled from)."
    ),
    teacher: str | None = typer.Option(
        None, help="Or: a judge whose stored verdicts are the labels (default: as distilled)."
    ),
    split: str | None = typer.Option(
        None,
        help="prompt:SHARE, the share of prompts trained on (default: the judge's distillation "
        "split, so RL is gated on the prompts its gate held out).",
    ),
    config: Path | None = typer.Option(
        None, help="A YAML or JSON file of RL and gate settings (docs/distillation.md)."
    ),
    run_dir: Path | None = typer.Option(
        None, help="The run folder (default: reinforce-runs/INTO); a re-run resumes it."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Train a distilled judge further by RL (GRPO on TRL, the verdict token sampled from the
    judge, reward 1 for the labelled verdict and 0 otherwise); register the result with its
    lineage as a candidate, and gate it against the judge it started from on the held-out
    prompts: approved only if it agrees with the labels better, with 95% confidence."""
    settings = read_settings_file(config, ReinforceSettings, "RL settings")
    app_settings = get_settings()

    def default_base() -> Path:
        from rubricsvc.backends.embedded import prepare_embedded_model

        return prepare_embedded_model(app_settings.judge.model_dir)

    request = ReinforceRequest(
        judge=judge,
        into=into,
        run_dir=run_dir or Path("reinforce-runs") / into.replace("/", "_"),
        settings=settings,
        default_base=default_base,
        teacher=teacher,
        labels=labels,
        train_share=parse_split(split) if split is not None else None,
    )
    run_judge_training(
        reinforce,
        request,
        BackendProvider.from_settings(app_settings),
        label="reinforcing",
        as_json=as_json,
        print_report=_print,
    )


def _print(report: dict[str, Any]) -> None:
    training = report["training"]
    start = report["started_from"]
    first, last = training.get("first_reward"), training.get("last_reward")
    rewards = (
        f"; mean reward {first:.3f} at the first logged step, {last:.3f} at the last"
        if first is not None and last is not None
        else ""
    )
    console.print(
        f"RL judge {report['judge']} ({report['config_hash'][:12]}), from {start['judge']} "
        f"({start['config_hash'][:12]}): {training['examples']} training prompts "
        f"({training['left_out']} left out as too long), {training['steps']} steps, "
        f"{training['seconds']:.0f} s{rewards}; run folder {report['run_dir']}"
    )
    same = report["same_data_as_started_from"]
    if not same:
        why = (
            "it has no distillation record"
            if same is None
            else "these are not the data or split it was distilled from"
        )
        console.print(
            f"note: {why}: the held-out prompts here may be ones {start['judge']} was trained on"
        )
    print_gate(report["gate"], {"base": "from", "student": "RL"}, start["judge"])
