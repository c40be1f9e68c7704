"""``rubricsvc judges ...``: ``list`` and ``add`` (the other judges commands are in
``audit``, ``calibration``, ``distill``, ``reinforce`` and ``validation``)."""

from __future__ import annotations

from pathlib import Path

import typer

from rubricsvc.cli.context import console, db_session
from rubricsvc.cli.render import build_table
from rubricsvc.errors import RubricsvcError
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.models import JudgeConfig, JudgeGate
from rubricsvc.scoring.judge_configs import (
    current_judge_configs,
    ensure_judge_config,
    gate_status,
    load_judge_file,
)

judges_app = typer.Typer(help="Judge configurations.", no_args_is_help=True)


@judges_app.command("list")
def judges_list() -> None:
    """Built-in and stored judge configs."""
    with db_session() as session:
        stored = {row.name: row for row in current_judge_configs(session)}
        gates = {name: gate_status(session, row) for name, row in stored.items()}
    rows = [
        [name, spec.backend, spec.model or "(embedded)", spec.mode, "built-in"]
        for name, spec in BUILTIN_JUDGES.items()
        if name not in stored
    ]
    rows += [
        [r.name, r.backend, r.model, r.verdict_mode, _where(r, gates[r.name])]
        for r in stored.values()
    ]
    headers = ["name", "backend", "model", "mode", "where"]
    console.print(
        build_table(f"{len(rows)} judge(s)", headers, rows, flexible="model", width=console.width)
    )


def _where(row: JudgeConfig, gate: JudgeGate | None) -> str:
    """Stored, with its hash; a gated judge's status (a candidate is no reward yet)."""
    where = f"stored {row.config_hash[:12]}"
    return f"{where}, {gate.status.value}" if gate is not None else where


@judges_app.command("add")
def judges_add(
    file: Path = typer.Argument(..., help="YAML or JSON with one judge or a list."),
) -> None:
    """Store judge configs from a file (a stored config is never changed: use a new name)."""
    with db_session() as session:
        # A jury's members named by name are read here, so the stored jury holds them whole.
        for spec in load_judge_file(file, session):
            try:
                row = ensure_judge_config(session, spec)
            except RubricsvcError as err:  # the one-line error names the file, as a load's does
                raise type(err)(f"{file}: {err}") from None
            what = f"{row.backend} {row.model}"
            what += f" {row.verdict_mode}" if spec.jury is None else ""  # a jury's: its members'
            console.print(f"judge {row.name}: {what} ({row.config_hash[:12]})")
