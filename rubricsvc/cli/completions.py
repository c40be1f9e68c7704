"""``rubricsvc completions ...``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from sqlalchemy import select

from rubricsvc.assignments import apply_rules
from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.render import (
    ASSIGN_HELP,
    RULES_HELP,
    build_table,
    dumps,
    report_ingest,
    tag_rules,
)
from rubricsvc.completions import add_completions, load_completion_file
from rubricsvc.models import Completion, Prompt
from rubricsvc.scoring.selection import Selection
from rubricsvc.sft_export import SftChoice, export_sft

completions_app = typer.Typer(help="Ingest, list and export completions.", no_args_is_help=True)


@completions_app.command("add")
def completions_add(
    files: list[Path] = typer.Argument(..., help="JSON Lines files, one completion per line."),
    assign: list[str] = typer.Option([], "--assign", help=ASSIGN_HELP),
    rules_file: Path | None = typer.Option(None, "--assign-file", help=RULES_HELP),
) -> None:
    """Store completions; all files are checked first and nothing is stored if any line is bad.
    A record's `rubric` (a name or a list) assigns shared rubrics to it; tag rules assign them
    to the records' prompts."""
    rules = tag_rules(assign, rules_file)
    records = [record for path in files for record in load_completion_file(path)]
    with db_session() as session:
        result = add_completions(session, records)
        if rules:  # the prompts of the records' completions
            touched = [session.get(Prompt, i) for i in sorted(set(result.prompt_ids))]
            rule_report = apply_rules(session, rules, [p for p in touched if p is not None])
    report_ingest("completion", result, rule_report if rules else None)


@completions_app.command("list")
def completions_list(
    prompt: str = typer.Option(None, help="Only completions of the prompt with this external id."),
    source: str = typer.Option(None, help="Only completions from this source."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List completions with their prompt."""
    with db_session() as session:
        query = select(Completion, Prompt).join(Prompt).order_by(Completion.id)
        if prompt is not None:
            query = query.where(Prompt.external_id == prompt)
        if source is not None:
            query = query.where(Completion.source == source)
        rows = session.execute(query).all()
        if as_json:
            console.print_json(
                dumps(
                    [
                        {
                            "id": c.id,
                            "external_id": c.external_id,
                            "prompt_id": p.id,
                            "prompt_external_id": p.external_id,
                            "source": c.source,
                            "text": c.text,
                            "metadata": c.meta,
                        }
                        for c, p in rows
                    ]
                )
            )
            return
        cells = [
            [
                str(c.id),
                c.external_id or "",
                p.external_id or str(p.id),
                c.source or "",
                str(len(c.text)),
                " ".join(c.text.split()),
            ]
            for c, p in rows
        ]
        headers = ["id", "external id", "prompt", "source", "chars", "text"]
        table = build_table(
            f"{len(rows)} completion(s)", headers, cells, flexible="text", width=console.width
        )
        console.print(table)


@completions_app.command("export-sft")
def completions_export_sft(
    judge: str = typer.Option(..., help="Rank by this judge config's stored scores (its name)."),
    best: int = typer.Option(1, "--best", min=1, help="Completions kept per prompt: its best N."),
    min_score: float | None = typer.Option(
        None, "--min-score", help="Keep only completions scoring at least this."
    ),
    aggregation: str = typer.Option("rar", help="The scores' aggregation."),
    rubric: list[str] = typer.Option(
        [],
        help="Rank by the scores under this rubric: NAME (any version), NAME@N, or a template "
        "naming each prompt's own ('{prompt_id}/proxy'). Repeatable.",
    ),
    prompt: list[str] = typer.Option([], help="Only completions of prompts with this external id."),
    source: list[str] = typer.Option([], help="Only completions from this source."),
    completion: list[int] = typer.Option([], help="Only the completion with this id."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout."
    ),
) -> None:
    """Rejection sampling: write each prompt's best-scored completions as an SFT set, one
    JSON line each in the chat format TRL's SFTTrainer reads ({"messages": [...]}: the
    prompt's messages, then the completion's turns, an agent's tool calls and results
    included), with its provenance (completion, score, judge config, rubric version).
    Ties go to the completion stored first."""
    selection = Selection(
        completion_ids=tuple(completion),
        prompt_external_ids=tuple(prompt),
        sources=tuple(source),
    )
    choice = SftChoice(judge, aggregation, best, min_score, tuple(rubric))
    with db_session() as session:
        exported = export_sft(session, selection, choice)
    lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in exported.rows]
    if output is None:
        sys.stdout.write("".join(lines))
    else:
        output.write_text("".join(lines), encoding="utf-8")
    prompts = len({row["provenance"]["prompt_id"] for row in exported.rows})
    summary = f"{len(lines)} completion(s) of {prompts} prompt(s)"
    summary += f" written to {output}" if output else ""
    if exported.below_min_score:
        summary += (
            f"; {exported.below_min_score} scored prompt(s) have none at or above "
            f"--min-score {min_score}"
        )
    err_console.print(summary, soft_wrap=True)
