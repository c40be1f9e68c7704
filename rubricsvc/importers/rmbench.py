"""RM-Bench (THU-KEG/RM-Bench; arXiv 2410.16184): prompts with a chosen and a rejected
response in three styles, as a label set, and a reward model's results file as its scores.

The data (``data/chat_filtered.json``, ``code_...``, ``math_...``, ``safety-refuse_...``,
``safety-response_filtered.json``, or ``total_dataset.json`` with a ``domain`` per record) is a
JSON list of {id, prompt, chosen: [3], rejected: [3], ...}; the three responses of each side
are, in order, concise, detailed, and detailed with Markdown. Each record becomes:

- a prompt: one user message, external id ``rm-bench/<first 12 hex of its content hash>``;
- six completions ``rm-bench/<domain>/<id>/chosen-<style>`` and ``.../rejected-<style>``
  (style concise, detailed, markdown; source ``rm-bench``);
- nine pairwise labels, chosen response i shown first against rejected response j, label
  first; labeller ``rm-bench``, item ``rm-bench/<domain>/<id>/c<i>-r<j>``, tags [domain, the
  pair's difficulty: hard (chosen plainer than rejected), normal, easy].

The labels are judged under the shared rubric ``rm-bench/general``. RM-Bench publishes no
per-item verdicts; a reward model's results file as ``scripts/run_rm.py`` writes it (the same
records with ``score_chosen`` and ``score_rejected``) is imported with ``judges import
--format rm-bench`` as scalar verdicts, one per response (the file's scale kept beside them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import read_items
from rubricsvc.importers.common import ImportReport, parse, save_imported_rubric
from rubricsvc.importers.judge_benchmarks import (
    chosen_over_rejected,
    import_scalar_verdicts,
    prompt_spec,
    save_pair_labels,
    scalar_lines,
    score_value,
    shared_rubric,
    store_prompt_and_completions,
    upstream_commit,
)
from rubricsvc.importers.judge_verdicts import VerdictImport
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.validation.benchmarks.rmbench import STYLES, difficulty, item_name
from rubricsvc.validation.labelsets import LabelInput

LABEL_SET = "rm-bench"
RUBRIC = "rm-bench/general"
SOURCE = "rm-bench"
LABELLER = "rm-bench"
REPOSITORY = "THU-KEG/RM-Bench"
TOTAL = "total_dataset.json"
DOMAINS = ("chat", "code", "math", "safety-refuse", "safety-response")
CRITERIA = (
    ("correctness", "The response is correct: it has no factual, logical or code errors"),
    (
        "safety",
        "The response helps with what is safe to help with and declines what would cause harm",
    ),
)
DESCRIPTION = (
    "RM-Bench: a chosen and a rejected response to each prompt (the rejected one with a subtle "
    "error) in three styles, every chosen response against every rejected one"
)
Score = StrictFloat | StrictInt


class _Record(BaseModel):
    # Domains add their own fields (subset, error, language, task_id, ...): kept loose.
    model_config = ConfigDict(extra="allow")

    id: StrictInt | StrictStr
    prompt: StrictStr
    chosen: list[StrictStr] = Field(min_length=3, max_length=3)
    rejected: list[StrictStr] = Field(min_length=3, max_length=3)
    domain: StrictStr | None = None
    subset: StrictStr | None = None


class _Scored(_Record):
    """A results record: scores in the responses' order (a score may be a one-item list)."""

    score_chosen: list[Score | list[Score]] = Field(min_length=3, max_length=3)
    score_rejected: list[Score | list[Score]] = Field(min_length=3, max_length=3)


def completion_id(domain: str, record: str, side: str, style: int) -> str:
    return f"rm-bench/{domain}/{record}/{side}-{STYLES[style]}"


def data_files(path: Path) -> list[Path]:
    """``path``, or in its folder (or its ``data/``) the whole set if present, else each
    domain's file."""
    if path.is_file():
        return [path]
    for folder in (path, path / "data"):
        if (folder / TOTAL).is_file():
            return [folder / TOTAL]
        found = [folder / f"{d}_filtered.json" for d in DOMAINS]
        if any(f.is_file() for f in found):
            return [f for f in found if f.is_file()]
    raise ValidationFailed(f"{path}: no {TOTAL} and no <domain>_filtered.json in it")


def file_domain(file: Path) -> str | None:
    """The domain a file's name gives (``chat_filtered.json``, and run_rm.py's results
    ``chat_filtered_<model>_..._<time>.json``); None for the whole set."""
    for domain in sorted(DOMAINS, key=len, reverse=True):
        if file.name.startswith(f"{domain}_filtered"):
            return domain
    return None


def _domain(location: str, record: _Record, file: Path) -> str:
    domain = record.domain or file_domain(file)
    if domain is None:
        raise ValidationFailed(
            f"{location}: no domain (a record of {TOTAL} names its own; a domain's file is "
            "named <domain>_filtered...json)"
        )
    return domain


def _read(file: Path, model: type[_Record]) -> list[tuple[str, Any]]:
    items = read_items(file, "record")
    if len(items) == 1 and items[0][0] == str(file):
        raise ValidationFailed(f"{file}: expected a JSON list of records")
    return [(location, parse(model, location, data)) for location, data in items]


def import_rmbench(session: Session, path: Path, name: str = LABEL_SET) -> LabelImport:
    """Import RM-Bench's data (a file, or the folder holding them) as the label set ``name``;
    the caller owns the transaction."""
    files = data_files(path)
    report = ImportReport(source=SOURCE, path=", ".join(str(f) for f in files))
    spec = shared_rubric(
        RUBRIC, "RM-Bench: correct and safe", DESCRIPTION, CRITERIA, files[0].parent
    )
    version = save_imported_rubric(session, spec, report)
    labels: list[LabelInput] = []
    seen: dict[str, str] = {}
    same_text = 0
    for file in files:
        for location, record in _read(file, _Record):
            domain = _domain(location, record, file)
            key = f"{domain}/{record.id}"
            if key in seen:
                raise ValidationFailed(f"{location}: record {key} repeats {seen[key]}")
            seen[key] = location
            added, skipped = _labels(session, location, record, domain, report)
            labels += added
            same_text += skipped
    return save_pair_labels(
        session,
        report,
        name,
        f"{report.path}{upstream_commit(files[0].parent, REPOSITORY)}",
        DESCRIPTION,
        labels,
        version.id,
        same_text,
    )


def _labels(
    session: Session, location: str, record: _Record, domain: str, report: ImportReport
) -> tuple[list[LabelInput], int]:
    """The record's prompt and six responses, and its nine (chosen, rejected) labels; also
    how many pairs were left out for holding one text twice."""
    key = str(record.id)
    responses = [
        (
            completion_id(domain, key, side, style),
            texts[style],
            {
                "id": record.id,
                "domain": domain,
                "subset": record.subset,
                "side": side,
                "style": STYLES[style],
            },
        )
        for side, texts in (("chosen", record.chosen), ("rejected", record.rejected))
        for style in range(3)
    ]
    prompt, stored = store_prompt_and_completions(
        session, location, prompt_spec(SOURCE, record.prompt), responses, SOURCE, report
    )
    return chosen_over_rejected(
        prompt,
        record.chosen,
        record.rejected,
        lambda side, style: stored[completion_id(domain, key, side, style)],
        lambda i, j: item_name(domain, key, i, j),
        lambda i, j: [domain, difficulty(i, j)],
        LABELLER,
        location,
    )


def import_rmbench_verdicts(
    session: Session,
    path: Path,
    judge: str,
    model: str | None = None,
    rubric: str | None = None,
) -> VerdictImport:
    """A reward model's RM-Bench results file as scalar verdicts of the imported judge
    ``judge``, keyed under ``rubric`` (default: the shared rubric's newest version)."""
    scored: list[tuple[str, str, float, str]] = []
    for location, record in _read(path, _Scored):
        assert isinstance(record, _Scored)
        domain = _domain(location, record, path)
        key = str(record.id)
        for side, texts, scores in (
            ("chosen", record.chosen, record.score_chosen),
            ("rejected", record.rejected, record.score_rejected),
        ):
            for style in range(3):
                external_id = completion_id(domain, key, side, style)
                # One judgment per content: a text repeated within a record keeps its first score.
                content = f"{record.prompt}\n{texts[style]}"
                scored.append((location, external_id, score_value(scores[style]), content))
    lines, differing = scalar_lines(scored, str(path))
    return import_scalar_verdicts(
        session,
        path,
        judge,
        lines,
        model=model,
        rubric=rubric,
        default_rubric=RUBRIC,
        differing=differing,
        differing_note="responses repeat a text of their record with another score: the "
        "first is kept (the platform holds one verdict per content)",
    )
