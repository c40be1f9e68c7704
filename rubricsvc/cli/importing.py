"""``rubricsvc import ...``: public benchmarks into prompts, rubrics, completions and verdicts."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import typer

from rubricsvc.cli.context import console, db_session
from rubricsvc.importers.common import ImportReport, Tally
from rubricsvc.importers.deepresearch_bench import import_deepresearch_bench
from rubricsvc.importers.healthbench import DEFAULT_SOURCE, import_healthbench
from rubricsvc.importers.prometheus import DEFAULT_SOURCE as PROMETHEUS_SOURCE
from rubricsvc.importers.prometheus import import_prometheus

import_app = typer.Typer(
    help="Import public benchmarks; importing the same data again adds nothing.",
    no_args_is_help=True,
)


@import_app.command("healthbench")
def healthbench(
    path: Path = typer.Argument(..., help="A judge_responses.jsonl file or the folder holding it."),
    source: str | None = typer.Option(
        None,
        help=f"Source of the graded completions (default: the record's model, or {DEFAULT_SOURCE}).",
    ),
) -> None:
    """Import HealthBench conversations, rubrics, graded responses, their verdicts and scores."""
    with db_session() as session:
        report = import_healthbench(session, path, source=source)
    print_import_report(report)


@import_app.command("deepresearch-bench")
def deepresearch_bench(
    path: Path = typer.Argument(..., help="The DeepResearch Bench repository folder."),
    reports: Path | None = typer.Option(
        None, help="One cleaned_data/<model>.jsonl to import (default: every file there)."
    ),
) -> None:
    """Import DeepResearch Bench tasks, their criteria and the models' reports (no verdicts)."""
    with db_session() as session:
        report = import_deepresearch_bench(session, path, reports=reports)
    print_import_report(report)


@import_app.command("prometheus")
def prometheus(
    path: Path = typer.Argument(
        ...,
        help="A .json or .jsonl file of evaluation records: instruction, response, score rubric "
        "(criteria, score1_description..score5_description), optionally reference_answer and id "
        "(orig_* names accepted).",
    ),
    source: str = typer.Option(PROMETHEUS_SOURCE, help="Source of the graded responses."),
) -> None:
    """Import Prometheus evaluation records: prompts with reference answers, their 1-5 score
    rubrics and the responses (external ids prometheus/<record id>). Score rubrics alone:
    `rubricsvc rubrics import --format prometheus`."""
    with db_session() as session:
        report = import_prometheus(session, path, source=source)
    print_import_report(report)


def print_import_report(report: ImportReport, rubrics_only: bool = False) -> None:
    """What an import stored and found stored; ``rubrics_only``: an import of rubrics alone."""
    lines = [
        f"imported {report.source}{' rubrics' if rubrics_only else ''} from {report.path}",
        *stored_counts(report, rubrics_only),
    ]
    if report.scores:
        lines.append(
            f"  scores:      {report.scores} computed from stored verdicts "
            f"({report.backend_requests} backend requests); {report.scores_matching} of "
            f"{report.scores_checked} equal the score the source states"
        )
    print_report(lines, report.notes)


def stored_counts(report: ImportReport, rubrics_only: bool = False) -> list[str]:
    """A line per kind of row an import stores: how many it added and found already stored
    (prompts, rubrics and, unless ``rubrics_only``, completions and judgments)."""
    rubrics = report.rubrics
    lines = [
        f"  prompts:     {_tally(report.prompts)}",
        f"  rubrics:     {rubrics['created']} created, {rubrics['new version']} new version(s), "
        f"{rubrics['unchanged']} unchanged ({report.criteria} criteria)",
    ]
    if not rubrics_only:
        lines.append(f"  completions: {_tally(report.completions)}")
        lines.append(f"  judgments:   {_tally(report.judgments)}")
    return lines


def print_report(lines: list[str], notes: Iterable[str]) -> None:
    """An import's report: ``lines``, then a line per note."""
    lines = [*lines, *(f"  note: {note}" for note in notes)]
    # Soft wrap: piped output keeps one line per count; no markup: paths may hold brackets.
    console.print("\n".join(lines), soft_wrap=True, markup=False)


def _tally(tally: Tally) -> str:
    return f"{tally.added} added, {tally.unchanged} already stored"
