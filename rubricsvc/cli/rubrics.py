"""``rubricsvc rubrics ...``: add, list, show, diff, approve, retire, export."""

from __future__ import annotations

import getpass
from pathlib import Path

import typer

from rubricsvc.cli.context import console, db_session
from rubricsvc.cli.render import (
    criteria_table,
    diff_lines,
    dumps,
    version_detail,
    version_summary,
    versions_table,
)
from rubricsvc.models import VersionStatus
from rubricsvc.rubrics import service
from rubricsvc.rubrics.diff import diff_versions
from rubricsvc.rubrics.files import load_rubric_files
from rubricsvc.rubrics.repository import list_versions, resolve_version

app = typer.Typer(help="Author, version and review rubrics.", no_args_is_help=True)

REF_HELP = "A version id, a rubric name (its latest version) or NAME@NUMBER."


@app.command("add")
def add(
    files: list[Path] = typer.Argument(..., help="Rubric files (.yaml, .yml, .json, .jsonl)."),
) -> None:
    """Save rubrics from files; changed content becomes a new version, the same content is skipped.

    Every file is validated first: if any rubric is malformed, nothing is saved.
    """
    specs = load_rubric_files(files)
    with db_session() as session:
        results = [service.save_rubric(session, spec) for spec in specs]
        for result in results:
            console.print(f"{result.outcome:>11}  {result.version.ref}  (id {result.version.id})")
    counts = {
        o: sum(r.outcome == o for r in results) for o in ("created", "new version", "unchanged")
    }
    console.print(
        f"{len(results)} rubric(s): {counts['created']} created, "
        f"{counts['new version']} new version(s), {counts['unchanged']} unchanged"
    )


@app.command("list")
def list_(
    status: VersionStatus | None = typer.Option(None, help="Only versions with this status."),
    all_versions: bool = typer.Option(False, "--all", help="Every version, not only the latest."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List rubrics (each one's latest version unless --all)."""
    with db_session() as session:
        versions = list_versions(session, status=status, all_versions=all_versions)
        if as_json:
            console.print_json(dumps([version_summary(v) for v in versions]))
        else:
            console.print(versions_table(versions, width=console.width))


@app.command("show")
def show(
    ref: str = typer.Argument(..., help=REF_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one rubric version and its criteria."""
    with db_session() as session:
        version = resolve_version(session, ref)
        if as_json:
            console.print_json(dumps(version_detail(version)))
            return
        prompt = version.rubric.prompt.text if version.rubric.prompt else "(shared rubric)"
        console.print(f"[bold]{version.ref}[/bold]  id {version.id}  origin {version.origin.value}")
        if version.parent_id:
            console.print(f"parent: version id {version.parent_id}")
        console.print(f"prompt: {prompt}")
        console.print(criteria_table(version))


@app.command("diff")
def diff(
    old: str = typer.Argument(..., help=REF_HELP),
    new: str = typer.Argument(..., help=REF_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show how version NEW differs from version OLD."""
    with db_session() as session:
        result = diff_versions(resolve_version(session, old), resolve_version(session, new))
        if as_json:
            console.print_json(dumps(result.to_dict()))
        else:
            for line in diff_lines(result):
                console.print(line, markup=False)


@app.command("approve")
def approve(
    refs: list[str] = typer.Argument(..., help=REF_HELP + " One or more."),
    reviewer: str = typer.Option(None, help="Who approves (default: the current user)."),
) -> None:
    """Approve draft versions for scoring and training (an approved one is left as it is)."""
    with db_session() as session:
        for ref in refs:
            version = resolve_version(session, ref)
            if version.status == VersionStatus.APPROVED:
                console.print(f"{version.ref} (id {version.id}) is already approved")
                continue
            service.approve(session, version, reviewer or getpass.getuser())
            console.print(f"approved {version.ref} (id {version.id})")


@app.command("retire")
def retire(
    ref: str = typer.Argument(..., help=REF_HELP),
    reviewer: str = typer.Option(None, help="Who retires it (default: the current user)."),
) -> None:
    """Retire a version: kept for traceability, no longer used."""
    with db_session() as session:
        version = service.retire(
            session, resolve_version(session, ref), reviewer or getpass.getuser()
        )
        console.print(f"retired {version.ref} (id {version.id})")


@app.command("export")
def export(
    ref: str = typer.Argument(..., help=REF_HELP),
) -> None:
    """Print a version in the rubric file format (JSON), ready to edit and `rubrics add` again."""
    with db_session() as session:
        spec = service.spec_of(resolve_version(session, ref))
        console.print_json(spec.model_dump_json(exclude_none=True))
