"""``rubricsvc rubrics ...``: add, list, show, diff, approve, retire, export, import, generate,
refine, add-generic."""

from __future__ import annotations

import enum
import getpass
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.orm import Session

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import CliExit, console, db_session, err_console
from rubricsvc.cli.importing import print_import_report
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import (
    criteria_table,
    diff_lines,
    dumps,
    version_detail,
    version_summary,
    versions_table,
)
from rubricsvc.config import get_settings
from rubricsvc.fileformats import read_text
from rubricsvc.importers.rubric_formats import import_rubrics, rubric_format_names
from rubricsvc.judging.modes import get_mode
from rubricsvc.models import RubricVersion, VersionStatus
from rubricsvc.rubrics import versions as rubric_versions
from rubricsvc.rubrics.diff import diff_versions
from rubricsvc.rubrics.draft_inputs import (
    load_prompt_records,
    requests_from_database,
    requests_from_records,
)
from rubricsvc.rubrics.files import dump_jsonl, load_rubric_files
from rubricsvc.rubrics.generation import (
    DEFAULT_NAME_PREFIX,
    GenerationOptions,
    GenerationReport,
    generate_rubrics,
)
from rubricsvc.rubrics.generator import (
    GeneratorSpec,
    load_generator_file,
    with_overrides,
)
from rubricsvc.rubrics.generic import add_generic
from rubricsvc.rubrics.refinement import (
    DEFAULT_TOLERANCE,
    RefinementReport,
    RefineOptions,
    ValidityProposal,
    refine,
)
from rubricsvc.rubrics.repository import list_versions, resolve_version
from rubricsvc.scoring.judge_configs import find_judge
from rubricsvc.validation.validity import (
    DEFAULT_BELOW,
    CriterionValidity,
    criterion_validity,
    has_pointwise_labels,
)

app = typer.Typer(help="Author, version and review rubrics.", no_args_is_help=True)

REF_HELP = "A version id, a rubric name (its latest version) or NAME@NUMBER."


class ExportFormat(enum.StrEnum):
    JSON = "json"
    JSONL = "jsonl"


@app.command("add")
def add(
    files: list[Path] = typer.Argument(..., help="Rubric files (.yaml, .yml, .json, .jsonl)."),
) -> None:
    """Save rubrics from files; changed content becomes a new version, the same content is skipped.

    Every file is validated first: if any rubric is malformed, nothing is saved.
    """
    specs = load_rubric_files(files)
    with db_session() as session:
        results = [rubric_versions.save_rubric(session, spec) for spec in specs]
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
    validity: str | None = typer.Option(
        None,
        "--validity",
        metavar="JUDGE",
        help="Also each criterion's agreement with its pointwise labels under this judge's "
        "stored verdicts (docs/validation.md#criterion-validity).",
    ),
    below: float = typer.Option(
        DEFAULT_BELOW, "--below", min=0.0, max=1.0, help="With --validity: flag agreement below."
    ),
) -> None:
    """Show one rubric version and its criteria."""
    with db_session() as session:
        version = resolve_version(session, ref)
        valid = (
            criterion_validity(session, version, find_judge(session, validity), below)
            if validity
            else None
        )
        if as_json:
            detail = version_detail(version)
            if valid is not None:
                detail["validity"] = {
                    "judge": validity,
                    "below": below,
                    "criteria": [row.as_dict() for row in valid],
                }
            console.print_json(dumps(detail))
            return
        prompt = version.rubric.prompt.text if version.rubric.prompt else "(shared rubric)"
        console.print(f"[bold]{version.ref}[/bold]  id {version.id}  origin {version.origin.value}")
        if version.parent_id:
            console.print(f"parent: version id {version.parent_id}")
        console.print(f"prompt: {prompt}")
        console.print(criteria_table(version))
        if valid is not None and validity:
            _print_validity(version.ref, validity, below, valid)


def _print_validity(ref: str, judge: str, below: float, rows: list[CriterionValidity]) -> None:
    if not rows:
        console.print(f"validity: no pointwise labels on {ref}", markup=False)
        return
    lines = [f"validity under judge {judge} (pointwise labels; flagged: agreement below {below:g})"]
    for row in rows:
        interval = f"[{row.interval[0]:.3f}, {row.interval[1]:.3f}]" if row.interval else "-"
        agreement = f"{row.agreement:.3f}" if row.agreement is not None else "-"
        flag = "  FLAGGED: the judge disagrees with the labellers" if row.flagged else ""
        lines.append(
            f"  {row.position + 1}. agreement {agreement} {interval} n={row.n} "
            f"(of {row.n_labelled} labelled){flag}  {row.text}"
        )
    flagged = [row for row in rows if row.flagged]
    if flagged:
        numbers = ", ".join(str(row.position + 1) for row in flagged)
        lines.append(f"flagged criteria: {numbers} (`rubricsvc rubrics refine` proposes them)")
    console.print("\n".join(lines), markup=False, soft_wrap=True)


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
    note: str = typer.Option(None, help="Why: kept with the version (review_note)."),
) -> None:
    """Approve draft versions for scoring and training (an approved one is left as it is)."""
    with db_session() as session:
        for ref in refs:
            version = resolve_version(session, ref)
            if version.status == VersionStatus.APPROVED:
                console.print(f"{version.ref} (id {version.id}) is already approved")
                continue
            rubric_versions.approve(session, version, reviewer or getpass.getuser(), note)
            console.print(f"approved {version.ref} (id {version.id})")


@app.command("retire")
def retire(
    ref: str = typer.Argument(..., help=REF_HELP),
    reviewer: str = typer.Option(None, help="Who retires it (default: the current user)."),
    note: str = typer.Option(None, help="Why: kept with the version (review_note)."),
) -> None:
    """Retire a version: kept for traceability, no longer used."""
    with db_session() as session:
        version = rubric_versions.retire(
            session, resolve_version(session, ref), reviewer or getpass.getuser(), note
        )
        console.print(f"retired {version.ref} (id {version.id})")


@app.command("export")
def export(
    refs: list[str] = typer.Argument(None, help=REF_HELP + " One or more; or --all."),
    all_rubrics: bool = typer.Option(False, "--all", help="Every rubric's latest version."),
    status: VersionStatus | None = typer.Option(None, help="With --all: only this status."),
    output_format: ExportFormat | None = typer.Option(
        None, "--format", help="json: one version (default for one REF); jsonl: one per line."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
) -> None:
    """Write versions in the rubric file format, ready to edit and `rubrics add` again."""
    refs = refs or []
    if bool(refs) == all_rubrics:
        raise CliExit("give one or more REFs, or --all", 2)
    fmt = output_format or (ExportFormat.JSON if len(refs) == 1 else ExportFormat.JSONL)
    if fmt == ExportFormat.JSON and len(refs) != 1:
        raise CliExit("--format json writes one version; use --format jsonl for several", 2)
    with db_session() as session:
        if refs:
            versions = [resolve_version(session, ref) for ref in refs]
        else:
            versions = list_versions(session, status=status)
        specs = [rubric_versions.spec_of(version) for version in versions]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise CliExit(f"rubric {twice!r} is named twice: a file holds one version per rubric", 2)
    if fmt == ExportFormat.JSON:
        text = specs[0].model_dump_json(exclude_none=True, indent=2) + "\n"
    else:
        text = dump_jsonl(specs)
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    err_console.print(f"{len(specs)} rubric(s) written to {output}", markup=False)


@app.command("import")
def import_(
    path: Path = typer.Argument(..., help="The file or folder to read."),
    format_name: str = typer.Option(
        ...,
        "--format",
        help=f"A registered rubric format: {', '.join(rubric_format_names())}, or one a plugin "
        "registers (an unknown name lists every registered one).",
    ),
) -> None:
    """Import rubrics only (no completions, no verdicts) from a public format, as drafts."""
    with db_session() as session:
        report = import_rubrics(session, format_name, path)
    print_import_report(report, rubrics_only=True)


@app.command("add-generic")
def add_generic_(ref: str = typer.Argument(..., help=REF_HELP)) -> None:
    """Save a new version with the generic criteria appended (those it lacks)."""
    with db_session() as session:
        result, added = add_generic(session, resolve_version(session, ref))
        version = result.version
        if not added:
            console.print(f"{version.ref} already has every generic criterion", markup=False)
            return
        console.print(
            f"{result.outcome} {version.ref} (id {version.id}, a draft): "
            f"{len(added)} generic criteria appended",
            markup=False,
        )


def _generator(
    config: Path | None,
    overrides: Mapping[str, object],
    defaults: Mapping[str, object] | None = None,
) -> GeneratorSpec:
    """The generator from ``--generator FILE`` (or the defaults), with the options given."""
    base = load_generator_file(config) if config else GeneratorSpec.model_validate(defaults or {})
    return with_overrides(base, **overrides)


GENERATOR_HELP = "A generator configuration (YAML or JSON; see docs/authoring.md)."
# The generator options of `generate` and `refine`; unset, the generator file's (or defaults).
GeneratorFile = Annotated[Path | None, typer.Option("--generator", help=GENERATOR_HELP)]
GeneratorBackend = Annotated[
    str | None, typer.Option(help="transformers (default), vllm or openai.")
]
GeneratorModel = Annotated[
    str | None, typer.Option(help="The generator model (default: the bundled one).")
]
Temperature = Annotated[float | None, typer.Option(help="Sampling temperature (0.7).")]
FirstSeed = Annotated[int | None, typer.Option(help="Seed of the first attempt (0).")]


@app.command("generate")
def generate(
    prompts_file: Path | None = typer.Argument(
        None,
        help="Prompts to draft for (.jsonl, .json, .yaml): text or messages, external_id, "
        "reference_answer, evidence.",
    ),
    prompt: list[str] = typer.Option([], help="A stored prompt, by external id (repeatable)."),
    all_prompts: bool = typer.Option(False, "--all-prompts", help="Every stored prompt."),
    evidence: list[Path] = typer.Option([], help="A text file of evidence for every prompt."),
    stored_evidence: bool = typer.Option(
        False,
        "--stored-evidence",
        help="Draft from the documents stored with each prompt's completions too (search "
        "results, cited pages); each criterion names the document it came from.",
    ),
    with_generic: bool = typer.Option(False, help="Append the generic criteria to each draft."),
    name_prefix: str = typer.Option(DEFAULT_NAME_PREFIX, help="Rubric name = prefix + prompt id."),
    config: GeneratorFile = None,
    backend: GeneratorBackend = None,
    model: GeneratorModel = None,
    min_criteria: int | None = typer.Option(None, help="Fewest criteria in a draft (7)."),
    max_criteria: int | None = typer.Option(None, help="Most criteria in a draft (20)."),
    max_tokens: int | None = typer.Option(None, help="Token limit of a reply (1536)."),
    temperature: Temperature = None,
    seed: FirstSeed = None,
    retries: int | None = typer.Option(None, help="Attempts after an invalid draft (3)."),
) -> None:
    """Draft rubrics with an LLM: validated drafts are stored, failures are reported."""
    if (prompts_file is not None) + bool(prompt) + all_prompts != 1:
        raise CliExit("give a prompts file, --prompt EXTERNAL_ID..., or --all-prompts", 2)
    spec = _generator(
        config,
        {
            "backend": backend,
            "model": model,
            "min_criteria": min_criteria,
            "max_criteria": max_criteria,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "retries": retries,
        },
    )
    records = load_prompt_records(prompts_file) if prompts_file else []
    documents = [read_text(path) for path in evidence]
    options = GenerationOptions(name_prefix=name_prefix, with_generic=with_generic)
    backends = BackendProvider.from_settings(get_settings())
    with backends, db_session() as session:
        if prompts_file:
            requests = requests_from_records(session, records, documents, stored_evidence)
        else:
            requests = requests_from_database(
                session, prompt, all_prompts, documents, stored_evidence
            )
        with progress_bar("drafting", enabled=True) as update:
            report = generate_rubrics(
                session,
                requests,
                spec,
                backends.factory(spec),
                options,
                progress=update,
                checkpoint=session.commit,
            )
    _print_generation(report)


def _print_generation(report: GenerationReport) -> None:
    for outcome in report.outcomes:
        if outcome.status == "failed":
            err_console.print(f"failed  {outcome.prompt}: {outcome.error}", markup=False)
        else:
            attempts = f"{outcome.attempts} attempt(s)" if outcome.attempts else "?"
            console.print(f"{outcome.status:>11}  {outcome.ref}  ({attempts})", markup=False)
    total, failed = len(report.outcomes), report.count("failed")
    console.print(
        f"{total} prompt(s): {report.count('created')} created, "
        f"{report.count('new version')} new version(s), {report.count('unchanged')} unchanged, "
        f"{report.count('reused')} reused, "
        f"{failed} failed; {report.backend_requests} generator request(s)",
        markup=False,
    )
    if failed:
        raise CliExit(f"{failed} of {total} prompt(s) got no valid draft; nothing stored for them")


@app.command("refine")
def refine_(
    ref: str = typer.Argument(..., help=REF_HELP),
    judge: str = typer.Option(..., help="The judge whose stored judgments and scores are read."),
    aggregation: str = typer.Option("rar", help="The stored scores that rank the completions."),
    tolerance: float = typer.Option(DEFAULT_TOLERANCE, help="Values closer than this are equal."),
    max_proposals: int = typer.Option(3, min=1, help="Most new criteria to propose."),
    propose: bool = typer.Option(True, help="Propose criteria and save a new draft."),
    config: GeneratorFile = None,
    backend: GeneratorBackend = None,
    model: GeneratorModel = None,
    max_tokens: int | None = typer.Option(None, help="Token limit of the reply (512)."),
    temperature: Temperature = None,
    seed: FirstSeed = None,
    retries: int | None = typer.Option(None, help="Attempts after an invalid proposal (3)."),
    validity_below: float = typer.Option(
        DEFAULT_BELOW,
        min=0.0,
        max=1.0,
        help="Propose rewording or removing a criterion whose agreement with its pointwise "
        "labels under the judge is below this.",
    ),
) -> None:
    """Flag criteria that never vary, propose ones that separate completions: a new draft.
    Criteria the judge disagrees with labellers on are proposed for rewording or removal
    (listed, never applied)."""
    overrides: dict[str, object] = {"backend": backend, "model": model, "max_tokens": max_tokens}
    overrides |= {"temperature": temperature, "seed": seed, "retries": retries}
    spec = _generator(config, overrides, defaults={"max_tokens": 512})
    options = RefineOptions(aggregation, tolerance, max_proposals, propose)
    backends = BackendProvider.from_settings(get_settings())
    with backends, db_session() as session:
        version = resolve_version(session, ref)
        invalid = _validity_proposals(session, version, judge, validity_below)
        report = refine(
            session, version, judge, spec, backends.factory(spec), options, invalid=invalid
        )
        _print_refinement(report, len(version.criteria))


def _validity_proposals(
    session: Session, version: RubricVersion, judge: str, below: float
) -> list[ValidityProposal]:
    """The criteria whose agreement with their pointwise labels under the judge's stored
    verdicts is below ``below`` (none without labels, or for a judge of whole rubrics)."""
    if not has_pointwise_labels(session, version):
        return []
    spec = find_judge(session, judge)
    if not get_mode(spec.mode).per_criterion:
        return []
    return [
        ValidityProposal(row.position, row.text, row.agreement, row.n, row.interval)
        for row in criterion_validity(session, version, spec, below)
        if row.flagged and row.agreement is not None
    ]


def _print_refinement(report: RefinementReport, criteria: int) -> None:
    lines = [
        f"{report.source}: {len(report.flagged)} of {criteria} criteria flagged "
        f"(no variation across {report.completions} completion(s) of {report.groups} prompt(s), "
        f"judge {report.judge})",
        *(f"  flagged   #{f.position + 1} {f.text} (always {f.value:.2f})" for f in report.flagged),
        *(
            f"  reword or remove  #{i.position + 1} {i.text} (agreement {i.agreement:.2f} with "
            f"its pointwise labels, n={i.n}; kept until a reviewer changes it)"
            for i in report.invalid
        ),
        *(f"  proposed  {c.text} ({c.category}, {c.weight:g})" for c in report.proposed),
    ]
    saved = report.saved
    if saved is not None:
        lines.append(
            f"{saved.outcome} {saved.version.ref} (id {saved.version.id}, a draft) "
            f"after {report.attempts} attempt(s)"
        )
    console.print("\n".join(lines), soft_wrap=True, markup=False)
