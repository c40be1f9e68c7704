"""``rubricsvc completions ...`` and ``rubricsvc prompts ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from sqlalchemy import func, select

from rubricsvc.assignments import TagRule, apply_rules, load_rule_file, parse_rule
from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.render import build_table, dumps
from rubricsvc.completions import add_completions, load_completion_file
from rubricsvc.models import Completion, Prompt
from rubricsvc.prompt_records import add_prompts, load_prompt_file

completions_app = typer.Typer(help="Ingest and list completions.", no_args_is_help=True)
prompts_app = typer.Typer(help="Add, list and assign rubrics to prompts.", no_args_is_help=True)

ASSIGN_HELP = (
    "Assign a shared rubric to the prompts with a tag: 'KEY:VALUE -> RUBRIC' "
    "(e.g. 'scenario:writing_advertisement -> autoj/writing_advertisement'); repeatable."
)
RULES_HELP = "A file of such rules, one per line ('#' starts a comment)."


def _rules(assign: list[str], rules_file: Path | None) -> list[TagRule]:
    """The rules given on the command line and in the rule file, all checked first."""
    rules = [parse_rule(text) for text in assign]
    return rules + (load_rule_file(rules_file) if rules_file is not None else [])


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        err_console.print(f"[yellow]warning[/yellow]: {warning}", soft_wrap=True)


def _report_ingest(noun: str, result: Any, rule_report: Any | None) -> None:
    """What an ingest stored (an ``IngestResult`` or a prompts result), what its tag rules
    assigned, and its warnings."""
    console.print(
        f"{result.added} {noun}(s) added, {result.unchanged} already stored"
        + (f"; {result.assigned} rubric assignment(s) added" if result.assigned else "")
    )
    if rule_report is not None:
        _report_rules(rule_report.assigned, rule_report.unmatched_rules)
    _warn(result.warnings)


def _report_rules(assigned: int, unmatched: list[str] | None) -> None:
    console.print(f"{assigned} prompt assignment(s) added by tag rules")
    for rule in unmatched or []:
        err_console.print(f"[yellow]warning[/yellow]: rule {rule!r} matched no prompt")


@completions_app.command("add")
def completions_add(
    files: list[Path] = typer.Argument(..., help="JSON Lines files, one completion per line."),
    assign: list[str] = typer.Option([], "--assign", help=ASSIGN_HELP),
    rules_file: Path | None = typer.Option(None, "--assign-file", help=RULES_HELP),
) -> None:
    """Store completions; all files are checked first and nothing is stored if any line is bad.
    A record's `rubric` (a name or a list) assigns shared rubrics to it; tag rules assign them
    to the records' prompts."""
    rules = _rules(assign, rules_file)
    records = [record for path in files for record in load_completion_file(path)]
    with db_session() as session:
        result = add_completions(session, records)
        if rules:  # the prompts of the records' completions
            touched = [session.get(Prompt, i) for i in sorted(set(result.prompt_ids))]
            rule_report = apply_rules(session, rules, [p for p in touched if p is not None])
    _report_ingest("completion", result, rule_report if rules else None)


@prompts_app.command("add")
def prompts_add(
    files: list[Path] = typer.Argument(
        ..., help="JSON Lines (or JSON, YAML) files, one prompt per record."
    ),
    assign: list[str] = typer.Option([], "--assign", help=ASSIGN_HELP),
    rules_file: Path | None = typer.Option(None, "--assign-file", help=RULES_HELP),
) -> None:
    """Store prompts: `text` or `messages`, optional `external_id`, `reference_answer`, `tags`
    and `rubric` (shared rubrics for all its completions). All files are checked first; nothing
    is stored if any record is bad."""
    rules = _rules(assign, rules_file)
    records = [record for path in files for record in load_prompt_file(path)]
    with db_session() as session:
        result = add_prompts(session, records)
        if rules:
            rule_report = apply_rules(
                session, rules, list({p.id: p for p in result.prompts}.values())
            )
    _report_ingest("prompt", result, rule_report if rules else None)


@prompts_app.command("assign")
def prompts_assign(
    assign: list[str] = typer.Argument(
        None, help="Rules 'KEY:VALUE -> RUBRIC': the rubric for every stored prompt so tagged."
    ),
    rules_file: Path | None = typer.Option(None, "--file", help=RULES_HELP),
) -> None:
    """Assign shared rubrics to stored prompts by their tags (assigning again adds nothing)."""
    rules = _rules(assign or [], rules_file)
    if not rules:
        raise typer.BadParameter("give a rule or --file", param_hint="RULES")
    with db_session() as session:
        report = apply_rules(session, rules)
    _report_rules(report.assigned, report.unmatched_rules)


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


@prompts_app.command("list")
def prompts_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List prompts with their number of completions."""
    with db_session() as session:
        counts = dict(
            session.execute(
                select(Completion.prompt_id, func.count()).group_by(Completion.prompt_id)
            ).all()
        )
        prompts = session.scalars(select(Prompt).order_by(Prompt.id)).all()
        if as_json:
            console.print_json(
                dumps(
                    [
                        {
                            "id": p.id,
                            "external_id": p.external_id,
                            "messages": p.messages,
                            "tags": p.tags,
                            "completions": counts.get(p.id, 0),
                        }
                        for p in prompts
                    ]
                )
            )
            return
        cells = [
            [str(p.id), p.external_id or "", str(counts.get(p.id, 0)), " ".join(p.text.split())]
            for p in prompts
        ]
        headers = ["id", "external id", "completions", "prompt"]
        table = build_table(
            f"{len(prompts)} prompt(s)", headers, cells, flexible="prompt", width=console.width
        )
        console.print(table)
