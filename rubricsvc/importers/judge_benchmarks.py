"""What the judge-benchmark importers share (JudgeBench, RM-Bench, RewardBench 2): a
benchmark's prompts, shared rubric and chosen-over-rejected labels, and its judges' verdicts
written as ``judges import`` lines.

A benchmark's labels are pairwise: (chosen, rejected) in that order, label ``first``, or the
benchmark's own pair in its order with its label. Each label item is named by the benchmark's
module in ``rubricsvc/validation/benchmarks/``, which computes its metric from those names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.importers.common import ImportReport, ensure_completion, ensure_prompt, located
from rubricsvc.importers.judge_verdicts import VerdictImport, import_judge_verdicts
from rubricsvc.importers.labelled import JudgeTally, LabelImport
from rubricsvc.models import Completion, LabelKind, Prompt
from rubricsvc.prompts import prompt_hash
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.rubrics.schemas import CriterionSpec, Message, PromptSpec, RubricSpec
from rubricsvc.validation.labelsets import PAIRWISE_VALUES, LabelInput, save_label_set


def prompt_spec(prefix: str, text: str) -> PromptSpec:
    """One user message; external id ``<prefix>/<first 12 hex of its content hash>``, so
    records asking the same thing share their prompt (prompts are found by content)."""
    spec = PromptSpec(messages=[Message(role="user", content=text)])
    digest = prompt_hash(spec.chat())  # of the message as stored (surrounding space trimmed)
    return spec.model_copy(update={"external_id": f"{prefix}/{digest[:12]}"})


def shared_rubric(
    name: str, title: str, description: str, criteria: Sequence[tuple[str, str]], source: Path
) -> RubricSpec:
    """The rubric a benchmark's pairs are judged under by judges that need one: no prompt,
    origin imported, each (theme, text) a criterion of weight 1."""
    return RubricSpec(
        name=name,
        title=title,
        description=description,
        criteria=[CriterionSpec(text=text, weight=1, theme=theme) for theme, text in criteria],
        origin="imported",
        origin_detail={"source": name.split("/")[0], "path": str(source)},
    )


def store_prompt_and_completions(
    session: Session,
    location: str,
    prompt: PromptSpec,
    completions: Sequence[tuple[str, str, dict[str, Any]]],
    source: str,
    report: ImportReport,
) -> tuple[Prompt, dict[str, Completion]]:
    """The record's prompt and its completions, each (external id, text, metadata), by
    external id."""
    with located(location):
        stored = ensure_prompt(session, prompt, report)
        found = {}
        for external_id, text, metadata in completions:
            record = {
                "text": text,
                "source": source,
                "external_id": external_id,
                "metadata": {**metadata, "imported_from": location},
            }
            found[external_id] = ensure_completion(session, external_id, stored, record, report)
    return stored, found


def pair_label(
    item: str,
    prompt: Prompt,
    first: Completion,
    second: Completion,
    verdict: str,
    labeller: str,
    tags: Iterable[str],
    location: str,
) -> LabelInput:
    return LabelInput(
        kind=LabelKind.PAIRWISE,
        item=item,
        prompt=prompt,
        completion=first,
        other_completion=second,
        labeller=labeller,
        value=PAIRWISE_VALUES[verdict],
        verdict=verdict,
        tags=tuple(tags),
        location=location,
    )


def chosen_over_rejected(
    prompt: Prompt,
    chosen: Sequence[str],
    rejected: Sequence[str],
    completion: Callable[[str, int], Completion],
    item: Callable[[int, int], str],
    tags: Callable[[int, int], Iterable[str]],
    labeller: str,
    location: str,
) -> tuple[list[LabelInput], int]:
    """Every chosen response ``i`` shown first against every rejected response ``j``, label
    ``first`` (``completion(side, index)``: the stored response; ``item`` and ``tags``: the
    benchmark's names for the pair); a pair holding one text twice is left out, as no judge
    can prefer a text to itself. Also: how many were left out."""
    labels = []
    skipped = 0
    for i, chosen_text in enumerate(chosen):
        for j, rejected_text in enumerate(rejected):
            if chosen_text == rejected_text:
                skipped += 1
                continue
            labels.append(
                pair_label(
                    item(i, j),
                    prompt,
                    completion("chosen", i),
                    completion("rejected", j),
                    "first",
                    labeller,
                    tags(i, j),
                    location,
                )
            )
    return labels, skipped


def score_value(value: float | int | list[float | int]) -> float:
    """A results file's score: a number, or a list whose first item is the score (as some
    reward models' outputs write it)."""
    return float(value[0] if isinstance(value, list) else value)


def save_pair_labels(
    session: Session,
    report: ImportReport,
    name: str,
    source: str,
    description: str,
    labels: list[LabelInput],
    rubric_version_id: int,
    same_text: int,
) -> LabelImport:
    """A benchmark's chosen-over-rejected labels saved as the label set ``name`` under its
    shared rubric's version, the pairs left out for holding one text twice
    (``chosen_over_rejected``) noted in the report."""
    if same_text:
        report.notes.append(
            f"{same_text} (chosen, rejected) pairs left out: the two responses are the same text"
        )
    saved = save_label_set(
        session, name, source, description, labels, rubric_version_id=rubric_version_id
    )
    return LabelImport(report=report, label_set=saved)


def scale_of(scores: Iterable[float], where: str) -> list[float]:
    """The [min, max] a file's scores are stored on (a scalar verdict's value is its place in
    it; the score itself is kept): a reward model's scores have no scale of their own."""
    values = list(scores)
    if not values:
        raise ValidationFailed(f"{where}: no scores")
    if not all(math.isfinite(v) for v in values):
        raise ValidationFailed(f"{where}: a score is not a finite number")
    low, high = min(values), max(values)
    return [low, high] if low < high else [low - 1.0, high + 1.0]


def scalar_lines(
    scored: Sequence[tuple[str, str, float, str]], where: str
) -> tuple[list[tuple[str, Any]], int]:
    """``judges import`` scalar lines for (location, completion external id, score, content:
    its prompt and text); a content scored again within the file (the same response under
    two ids: one judgment holds one content's verdict) keeps its first score. Also: how many
    such repeats said otherwise."""
    first: dict[str, float] = {}
    kept = []
    differing = 0
    for location, external_id, score, text in scored:
        if text in first:
            differing += first[text] != score
            continue
        first[text] = score
        kept.append((location, external_id, score))
    scale = scale_of((score for _, _, score in kept), where)
    lines: list[tuple[str, Any]] = [
        (
            location,
            {"kind": "scalar", "completion": external_id, "score": score, "scale": scale},
        )
        for location, external_id, score in kept
    ]
    return lines, differing


def import_scalar_verdicts(
    session: Session,
    path: Path,
    judge: str,
    lines: list[tuple[str, Any]],
    *,
    model: str | None,
    rubric: str | None,
    default_rubric: str,
    differing: int,
    differing_note: str,
) -> VerdictImport:
    """A benchmark judge's ``judges import`` lines stored as the imported judge ``judge``,
    keyed under ``rubric`` (default: the newest version of the benchmark's shared rubric
    ``default_rubric``); with a note of the ``differing`` responses whose repeated content
    was scored otherwise (``"{differing} " + differing_note``), as every benchmark reports
    them."""
    report = import_judge_verdicts(
        session,
        path,
        judge,
        model=model,
        rubric=rubric or resolve_version(session, default_rubric).ref,
        records=lines,
    )
    if differing:
        report.notes.append(f"{differing} {differing_note}")
    return report


def tally(report: VerdictImport) -> JudgeTally:
    """A verdict import as a label import reports each judge beside its labels."""
    return JudgeTally(
        judge=report.judge,
        records=report.verdicts,
        ok=report.ok,
        failed=report.failed,
        added=report.judgments_added,
        unchanged=report.judgments_already_stored,
        repeats=report.repeats,
        conflicts=report.conflicts,
    )


def stored_contents(session: Session, external_ids: Iterable[str]) -> dict[str, str]:
    """What a judgment of each stored completion is keyed by (its prompt and its text, as
    ``prompt id:content hash``), by external id: two ids with one content share a verdict."""
    ids = sorted(set(external_ids))
    found: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        query = select(Completion.external_id, Completion.prompt_id, Completion.content_hash).where(
            Completion.external_id.in_(ids[start : start + 500])
        )
        found.update((row[0] or "", f"{row[1]}:{row[2]}") for row in session.execute(query))
    return found


def upstream_commit(folder: Path, repository: str) -> str:
    """`` (OWNER/REPO@COMMIT)`` when a SOURCE.txt in ``folder`` or above names the commit."""
    for candidate in (folder, *folder.parents[:2]):
        notes = candidate / "SOURCE.txt"
        if notes.is_file():
            commit = re.search(r"\bcommit\s+([0-9a-f]{40})\b", notes.read_text(encoding="utf-8"))
            if commit:
                return f" ({repository}@{commit.group(1)})"
    return ""
