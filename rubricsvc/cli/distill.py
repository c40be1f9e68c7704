"""``rubricsvc judges distill``: train a small judge on a large judge's stored verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import console
from rubricsvc.cli.judge_training import read_settings_file, run_judge_training
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.distill.examples import parse_split
from rubricsvc.distill.pipeline import DistillRequest, distill
from rubricsvc.distill.training import DistillSettings


def judges_distill(
    base: Path = typer.Option(
        ..., help="The student's starting model: a transformers model folder."
    ),
    into: str = typer.Option(..., help="The student judge's name."),
    teacher: str | None = typer.Option(
        None, help="The judge whose stored per-criterion verdicts are the targets."
    ),
    labels: str | None = typer.Option(
        None, help="Or: a label set whose pointwise labels are the targets."
    ),
    split: str = typer.Option(
        "prompt:0.8", help="prompt:SHARE: the share of prompts trained on; the rest are held out."
    ),
    config: Path | None = typer.Option(
        None, help="A YAML or JSON file of training and gate settings (docs/distillation.md)."
    ),
    run_dir: Path | None = typer.Option(
        None, help="The run folder (default: distill-runs/INTO); a re-run resumes it."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Train a criterion-prob student judge from a teacher's stored verdicts (or a label set),
    split by prompt; register it with its lineage as a candidate, and gate it: it is approved
    as a reward only if, on the held-out prompts, it agrees with the teacher at least
    min_agreement and better than its base model."""
    settings = read_settings_file(config, DistillSettings, "distillation settings")
    request = DistillRequest(
        into=into,
        base=base,
        run_dir=run_dir or Path("distill-runs") / into.replace("/", "_"),
        train_share=parse_split(split),
        settings=settings,
        teacher=teacher,
        labels=labels,
    )
    run_judge_training(
        distill,
        request,
        BackendProvider.from_settings(get_settings()),
        label="distilling",
        as_json=as_json,
        print_report=_print,
    )


def _figure(value: Any, interval: Any) -> str:
    if value is None:
        return "-"
    shown = f"{value:.3f}"
    return f"{shown} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else shown


def _coverage_line(gate: dict[str, Any]) -> str | None:
    """The student's coverage of the held-out labels against the gate's floor (None for a
    report stored before the gate had one)."""
    if gate.get("min_coverage") is None:
        return None
    student = gate["student"]
    judged, labelled = student["n_judged"], student["n_labelled"]
    shown = f"{judged / labelled:.3f}" if labelled else "none"
    return (
        f"student's verdicts cover {shown} of the held-out labels ({judged}/{labelled}; "
        f"min_coverage {gate['min_coverage']})"
    )


def _print(report: dict[str, Any]) -> None:
    training = report["training"]
    console.print(
        f"student {report['judge']} ({report['config_hash'][:12]}): trained on "
        f"{training['examples']} examples ({training['left_out']} left out as too long), "
        f"{training['steps']} steps, {training['seconds']:.0f} s; run folder {report['run_dir']}"
    )
    if training.get("adapter_bytes") is not None:
        console.print(
            f"LoRA adapter: {training['adapter_bytes'] / 1e6:.1f} MB in {training['model_dir']} "
            "(served on the base model)"
        )
    print_gate(report["gate"], {"base": "base", "student": "student"}, "the base")


def print_gate(gate: dict[str, Any], roles: dict[str, str], reference: str) -> None:
    """The gate's figures: each judge's on the held-out labels, the gain over ``reference``
    (the judge in the gate's ``base`` role), within criteria, and the decision. ``roles``:
    how the table names the gate's ``base`` and ``student``."""
    rows = [
        [
            roles[role],
            gate[role]["judge"],
            f"{gate[role]['n_judged']}/{gate[role]['n_labelled']}",
            _figure(gate[role]["agreement"], gate[role]["agreement_ci"]),
            _figure(gate[role]["kappa"], gate[role]["kappa_ci"]),
        ]
        for role in ("base", "student")
    ]
    console.print(
        build_table(
            f"held-out prompts ({gate['labels']}), against the teacher",
            ["", "judge", "judged", "agreement [95%]", "kappa [95%]"],
            rows,
            flexible="judge",
            width=console.width,
        )
    )
    coverage = _coverage_line(gate)
    if coverage:
        console.print(coverage)
    console.print(f"gain over {reference}: {_figure(gate['gain'], gate['gain_ci'])}")
    within = gate.get("within_criteria") or {}
    if within.get("labels"):
        console.print(
            f"within criteria ({within['labels']} labels of the {within['criteria']} criteria "
            "that some held-out completions meet and others do not"
            + (f", from {within['prompts']} prompts" if within.get("prompts") else "")
            + f"): {roles['base']} "
            f"{_figure(within['base_agreement'], None)}, {roles['student']} "
            f"{_figure(within['student_agreement'], None)}, gain "
            f"{_figure(within['gain'], within['gain_ci'])}"
            + ("" if gate.get("gated_within_criteria") else " (not gated)")
        )
    console.print(f"gate: {gate['decision']}: {'; '.join(gate['reasons'])}")
