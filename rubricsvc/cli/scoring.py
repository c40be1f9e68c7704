"""``rubricsvc score``, ``rubricsvc scores ...`` and ``rubricsvc judges ...``."""

from __future__ import annotations

import enum
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import typer
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.jobs import score_via_celery, unfinished_exit
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.judging.aggregation import AGGREGATIONS, DEFAULT_MIN_COVERAGE
from rubricsvc.judging.backends.provider import BackendProvider
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.judging.failures import ResponseFailurePolicy, empty_counts
from rubricsvc.judging.modes import mode_names
from rubricsvc.models import Completion, JudgeConfig, Prompt, RubricVersion, Score
from rubricsvc.scoring.judge_configs import (
    current_judge_configs,
    ensure_judge_config,
    find_judge,
    latest_judge_config,
    load_judge_file,
)
from rubricsvc.scoring.jury import JuryScoredCompletion, score_judge
from rubricsvc.scoring.options import score_options
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.service import ScoredCompletion, ScoreReport

scores_app = typer.Typer(help="Read and export stored scores.", no_args_is_help=True)
judges_app = typer.Typer(help="Judge configurations.", no_args_is_help=True)


class ScoreVia(enum.StrEnum):
    INPROCESS = "inprocess"
    CELERY = "celery"


def score_command(
    judge: str = typer.Option("embedded", help="Judge config name (see `rubricsvc judges list`)."),
    mode: str | None = typer.Option(
        None, help=f"Verdict mode (default: the judge's): {', '.join(mode_names())} or a plugin's."
    ),
    aggregation: str = typer.Option("rar", help=f"One of {', '.join(sorted(AGGREGATIONS))}."),
    rubric: str | None = typer.Option(None, help="Score with this rubric version (REF)."),
    prompt: list[str] = typer.Option([], help="Only completions of prompts with this external id."),
    source: list[str] = typer.Option([], help="Only completions from this source."),
    completion: list[int] = typer.Option([], help="Only the completion with this id."),
    include_drafts: bool | None = typer.Option(
        None,
        "--include-drafts/--approved-only",
        help="Use draft rubric versions too, or only approved ones "
        "(default: the setting RUBRICSVC_SCORING_USE_DRAFTS, else approved only).",
        show_default=False,
    ),
    min_coverage: float = typer.Option(DEFAULT_MIN_COVERAGE, help="Below this coverage: no score."),
    breakdown: bool = typer.Option(True, help="Print the per-criterion breakdown."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    via: ScoreVia | None = typer.Option(
        None,
        help="Score in this process, or submit a job to Celery workers and follow it "
        "(default: celery when RUBRICSVC_BROKER_URL is set).",
    ),
    response_failure: ResponseFailurePolicy | None = typer.Option(
        None,
        help="A response the judge cannot judge (it overflows the judge's context): its "
        "worst value, or masked (default: RUBRICSVC_SCORING_RESPONSE_FAILURE, else worst).",
        show_default=False,
    ),
) -> None:
    """Score completions against their rubrics; judgments already made come from the cache."""
    if include_drafts is None:
        include_drafts = get_settings().scoring.use_drafts
    selection = Selection(
        completion_ids=tuple(completion),
        prompt_external_ids=tuple(prompt),
        sources=tuple(source),
        rubric_ref=rubric,
        include_drafts=include_drafts,
    )
    options = score_options(
        get_settings().scoring, aggregation=aggregation, min_coverage=min_coverage
    )
    if response_failure is not None:
        options = replace(options, response_failure=response_failure)
    if via is None:
        via = ScoreVia.CELERY if get_settings().broker.url else ScoreVia.INPROCESS
    if via == ScoreVia.CELERY:
        report, state = score_via_celery(judge, mode, selection, options, show=not as_json)
        if as_json:
            console.print_json(json.dumps(asdict(report)))
        else:
            _print_report(report, breakdown)
        if state.status != "done":
            raise unfinished_exit(state)
        return
    backends = BackendProvider.from_settings(get_settings())
    with backends, db_session() as session:
        spec = find_judge(session, judge, mode)
        with progress_bar("judging", enabled=not as_json) as update:
            report = score_judge(
                session,
                spec,
                selection,
                options,
                backends.factory,
                progress=update,
                checkpoint=session.commit,
            )
    if as_json:
        console.print_json(json.dumps(asdict(report)))
        return
    _print_report(report, breakdown)


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _print_report(report: ScoreReport, breakdown: bool) -> None:
    ranked = sorted(report.scores, key=lambda s: (s.value is None, -(s.value or 0.0)))
    rows = [
        [
            str(rank),
            s.completion_external_id or str(s.completion_id),
            s.source or "",
            _fmt(s.value),
            f"{s.coverage:.2f}",
            s.status,
            s.rubric,
        ]
        for rank, s in enumerate(ranked, start=1)
    ]
    headers = ["#", "completion", "source", "score", "coverage", "status", "rubric"]
    title = f"{len(ranked)} score(s): judge {report.judge}, aggregation {report.aggregation}"
    console.print(build_table(title, headers, rows, flexible="rubric", width=console.width))
    if breakdown:
        for scored in ranked:
            if isinstance(scored, JuryScoredCompletion):
                console.print(_members_table(scored))
            elif scored.criteria:
                console.print(_breakdown_table(scored))
    if report.without_rubric:
        console.print(
            f"{len(report.without_rubric)} completion(s) have no usable rubric version "
            "(approve one, or pass --include-drafts)"
        )
    console.print(
        f"{report.judgments} judgment(s): {report.computed} computed, {report.cached} from the cache, "
        f"{report.failed} failed{_by_class(report.failures)}; {report.checks} check(s); "
        f"{report.backend_requests} backend request(s)"
    )
    for alarm in report.alarms:
        err_console.print(f"[yellow]alarm[/yellow]: {alarm}")
    if report.judgments and report.cached == report.judgments:
        console.print("Everything came from the cache: no judge was called.")


def _by_class(failures: dict[str, int]) -> str:
    """`` (2 infrastructure, 1 response)``: the failed judgments by who caused them."""
    parts = [f"{n} {name}" for name, n in failures.items() if n]
    return f" ({', '.join(parts)})" if parts else ""


def _breakdown_table(scored: ScoredCompletion) -> Table:
    title = f"{scored.completion_external_id or scored.completion_id}: {_fmt(scored.value)}"
    if scored.reasons:
        title += f" ({'; '.join(scored.reasons)})"
    table = Table(title=title, title_justify="left")
    for column in ("weight", "verdict", "value", "criterion"):
        table.add_column(column, justify="right" if column in {"weight", "value"} else "left")
    for entry in scored.criteria:
        verdict = entry.get("verdict") or entry["status"]
        if entry["status"] == "failed":
            verdict = f"[red]failed ({entry.get('failure')})[/red]: {entry.get('error', '')}"[:96]
        elif entry["status"] == "unjudgeable":
            verdict = f"[yellow]worst (response)[/yellow]: {entry.get('error', '')}"[:96]
        table.add_row(f"{entry['weight']:g}", verdict, _fmt(entry["value"]), entry["text"])
    return table


def _members_table(scored: JuryScoredCompletion) -> Table:
    """A jury's score: each member's, and how far apart they are."""
    title = (
        f"{scored.completion_external_id or scored.completion_id}: {_fmt(scored.value)} "
        f"({scored.combine} of {len(scored.members)}, spread {_fmt(scored.spread)}, "
        f"confidence {_fmt(scored.confidence)})"
    )
    if scored.reasons:
        title += f" ({'; '.join(scored.reasons)})"
    table = Table(title=title, title_justify="left")
    for column in ("member", "value", "status", "config"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for member in scored.members:
        config = f"{member['judge']} {str(member['config_hash'])[:12]}"
        table.add_row(str(member["member"]), _fmt(member["value"]), str(member["status"]), config)
    return table


@scores_app.command("export")
def scores_export(
    judge: str = typer.Option(..., help="Judge config name."),
    aggregation: str = typer.Option(..., help="Aggregation name."),
    output_format: str = typer.Option("jsonl", "--format", help="Only jsonl for now."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout."
    ),
) -> None:
    """Write one line per scored completion: prompt id, completion id, score, coverage, status
    (a jury's score also its members' values, their spread and the confidence)."""
    if output_format != "jsonl":
        raise typer.BadParameter("only --format jsonl is supported", param_hint="--format")
    with db_session() as session:
        rows = session.execute(
            select(Score, Completion, Prompt, RubricVersion)
            .join(JudgeConfig, Score.judge_config_id == JudgeConfig.id)
            .join(Completion, Score.completion_id == Completion.id)
            .join(Prompt, Completion.prompt_id == Prompt.id)
            .join(RubricVersion, Score.rubric_version_id == RubricVersion.id)
            .where(Score.judge_config_id == _judge_id(session, judge))
            .where(Score.aggregation == aggregation)
            .order_by(Score.completion_id, Score.rubric_version_id)
        ).all()
        lines = [
            json.dumps(
                {
                    "prompt_external_id": prompt.external_id,
                    "completion_id": completion.id,
                    "completion_external_id": completion.external_id,
                    "rubric": version.ref,
                    "score": score_row.value,
                    "coverage": score_row.coverage,
                    "status": score_row.status.value,
                    "failures": {
                        **empty_counts(),
                        **(score_row.details or {}).get("failures", {}),
                    },
                    **_jury_fields(score_row.details or {}),
                },
                ensure_ascii=False,
            )
            for score_row, completion, prompt, version in rows
        ]
    text = "\n".join(lines) + ("\n" if lines else "")
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        err_console.print(f"{len(lines)} score(s) written to {output}")


def _jury_fields(details: dict[str, object]) -> dict[str, object]:
    """A jury score's members, combination, spread and confidence (nothing for a judge's)."""
    if "members" not in details:
        return {}
    return {k: details.get(k) for k in ("members", "combine", "spread", "confidence")}


@judges_app.command("list")
def judges_list() -> None:
    """Built-in and stored judge configs."""
    with db_session() as session:
        stored = {row.name: row for row in current_judge_configs(session)}
    rows = [
        [name, spec.backend, spec.model or "(embedded)", spec.mode, "built-in"]
        for name, spec in BUILTIN_JUDGES.items()
        if name not in stored
    ]
    rows += [
        [r.name, r.backend, r.model, r.verdict_mode, f"stored {r.config_hash[:12]}"]
        for r in stored.values()
    ]
    headers = ["name", "backend", "model", "mode", "where"]
    console.print(
        build_table(f"{len(rows)} judge(s)", headers, rows, flexible="model", width=console.width)
    )


@judges_app.command("add")
def judges_add(
    file: Path = typer.Argument(..., help="YAML or JSON with one judge or a list."),
) -> None:
    """Store judge configs from a file (a stored config is never changed: use a new name)."""
    with db_session() as session:
        # A jury's members named by name are read here, so the stored jury holds them whole.
        for spec in load_judge_file(file, session):
            row = ensure_judge_config(session, spec)
            what = f"{row.backend} {row.model}"
            what += f" {row.verdict_mode}" if spec.jury is None else ""  # a jury's: its members'
            console.print(f"judge {row.name}: {what} ({row.config_hash[:12]})")


def _judge_id(session: Session, name: str) -> int | None:
    """The id of the config that answers to ``name`` (its newest), or None if none is stored."""
    row = latest_judge_config(session, name)
    return row.id if row is not None else None
