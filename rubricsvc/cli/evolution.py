"""``rubricsvc rubrics evolution ...``: an evolution run's history, and its evolved sets as
rubric files for review."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.render import build_table, dumps
from rubricsvc.evolution.history import resolve_track, reviewable_spec, run_summary, track_history
from rubricsvc.evolution.store import get_run, name_keys

app = typer.Typer(help="Evolving rubrics: what a run grew, and exporting it for review.")

RUN_HELP = "The evolution run (a training run's name, or the name given to it)."
PROMPT_HELP = "A prompt's external id (or numeric id)."


@app.command("show")
def show(
    run: str = typer.Argument(..., help=RUN_HELP),
    prompt: str | None = typer.Option(None, help=PROMPT_HELP + " Its whole history."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The run's prompts (current version, steps, active criteria, generator failures); with
    --prompt, that prompt's steps and each evolved criterion's life."""
    with db_session() as session:
        if prompt is None:
            data = run_summary(get_run(session, run))
        else:
            data = track_history(resolve_track(session, run, prompt))
    if as_json:
        console.print_json(dumps(data))
    elif prompt is None:
        _print_run(data)
    else:
        _print_history(data)


@app.command("keys")
def keys(
    run: str = typer.Argument(..., help=RUN_HELP),
    add: list[str] = typer.Option([], "--add", help="A key's name to open the run to."),
    remove: list[str] = typer.Option([], "--remove", help="A key's name to close it to."),
) -> None:
    """The API keys a served run rewards with (its evolved versions are drafts no person
    approved): its creator and the keys named here; admin keys always. Prints the list."""
    with db_session() as session:
        named = list(name_keys(session, run, add, remove).key_names)
    console.print(f"evolution run {run}: keys {', '.join(named) or '(none)'}")


def _print_run(data: dict[str, Any]) -> None:
    rows = [
        [
            str(p["external_id"] or p["prompt_id"]),
            p["persistent"],
            p["current"],
            str(p["steps"]),
            f"{p['active']}/{p['criteria']}",
            f"{p['generator_failures']}/{p['generator_calls']}",
        ]
        for p in data["prompts"]
    ]
    headers = ["prompt", "persistent", "current", "steps", "active", "generator failed"]
    title = f"evolution run {data['run']}"
    console.print(build_table(title, headers, rows, flexible="current", width=console.width))


def _print_history(data: dict[str, Any]) -> None:
    console.print(
        f"prompt {data['external_id'] or data['prompt_id']}: {data['persistent']} -> "
        f"{data['current']} ({data['evolved']} of {data['steps']} steps evolved it)",
        markup=False,
    )
    for step in data["steps_taken"]:
        console.print(
            f"step {step['step']}: {step['outcome']} {step['version_before']} -> "
            f"{step['version_after']}",
            markup=False,
        )
        for text in step["added"]:
            console.print(f"  + {text}", markup=False)
        for text in step["went_inactive"]:
            console.print(f"  - {text}", markup=False)
        for refused in step["refused"]:
            console.print(
                f"  x {refused['text']} ({refused['reason']} of {refused['of']!r})", markup=False
            )
        if step["error"]:
            console.print(f"  ! {step['error']}", markup=False)
    rows = [
        [
            c["text"],
            f"{c['weight']:g}",
            c["state"],
            str(c["appeared_at"]),
            "" if c["inactive_at"] is None else f"{c['inactive_at']} ({c['inactive_reason']})",
            " ".join("-" if s["spread"] is None else f"{s['spread']:.2f}" for s in c["spreads"]),
        ]
        for c in data["evolved_criteria"]
    ]
    headers = ["criterion", "weight", "state", "appeared", "inactive", "spread per step"]
    console.print(
        build_table("evolved criteria", headers, rows, flexible="criterion", width=console.width)
    )


@app.command("export")
def export(
    run: str = typer.Argument(..., help=RUN_HELP),
    prompt: str = typer.Option(..., help=PROMPT_HELP),
    name: str | None = typer.Option(
        None,
        help="Save under this rubric name (e.g. the persistent rubric's, to make it its "
        "next draft); default: the evolved rubric's own name.",
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
) -> None:
    """The prompt's current evolved set as an ordinary rubric file (its prompt included), for a
    person to read, edit, `rubrics add` and approve: the run never approves one."""
    with db_session() as session:
        spec = reviewable_spec(resolve_track(session, run, prompt), name)
    text = spec.model_dump_json(exclude_none=True, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    err_console.print(f"{spec.name} written to {output}", markup=False)
