"""``rubricsvc prompts ...``."""

from __future__ import annotations

from pathlib import Path

import typer
from sqlalchemy import func, select

from rubricsvc.assignments import apply_rules
from rubricsvc.cli.context import console, db_session
from rubricsvc.cli.render import (
    ASSIGN_HELP,
    RULES_HELP,
    build_table,
    dumps,
    report_ingest,
    report_rules,
    tag_rules,
)
from rubricsvc.models import Completion, Prompt
from rubricsvc.prompt_records import add_prompts, load_prompt_file

prompts_app = typer.Typer(help="Add, list and assign rubrics to prompts.", no_args_is_help=True)


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
    rules = tag_rules(assign, rules_file)
    records = [record for path in files for record in load_prompt_file(path)]
    with db_session() as session:
        result = add_prompts(session, records)
        if rules:
            rule_report = apply_rules(
                session, rules, list({p.id: p for p in result.prompts}.values())
            )
    report_ingest("prompt", result, rule_report if rules else None)


@prompts_app.command("assign")
def prompts_assign(
    assign: list[str] = typer.Argument(
        None, help="Rules 'KEY:VALUE -> RUBRIC': the rubric for every stored prompt so tagged."
    ),
    rules_file: Path | None = typer.Option(None, "--file", help=RULES_HELP),
) -> None:
    """Assign shared rubrics to stored prompts by their tags (assigning again adds nothing)."""
    rules = tag_rules(assign or [], rules_file)
    if not rules:
        raise typer.BadParameter("give a rule or --file", param_hint="RULES")
    with db_session() as session:
        report = apply_rules(session, rules)
    report_rules(report.assigned, report.unmatched_rules)


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
