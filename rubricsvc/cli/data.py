"""``rubricsvc completions ...`` and ``rubricsvc prompts ...``."""

from __future__ import annotations

from pathlib import Path

import typer
from sqlalchemy import func, select

from rubricsvc.cli.context import console, db_session
from rubricsvc.cli.render import build_table, dumps
from rubricsvc.completions import add_completions, load_completion_file
from rubricsvc.models import Completion, Prompt

completions_app = typer.Typer(help="Ingest and list completions.", no_args_is_help=True)
prompts_app = typer.Typer(help="List prompts.", no_args_is_help=True)


@completions_app.command("add")
def completions_add(
    files: list[Path] = typer.Argument(..., help="JSON Lines files, one completion per line."),
) -> None:
    """Store completions; all files are checked first and nothing is stored if any line is bad."""
    records = [record for path in files for record in load_completion_file(path)]
    with db_session() as session:
        result = add_completions(session, records)
    console.print(f"{result.added} completion(s) added, {result.unchanged} already stored")


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
