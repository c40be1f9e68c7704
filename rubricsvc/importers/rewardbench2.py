"""RewardBench 2 (allenai/reward-bench-2; arXiv 2506.01937): prompts with correct (chosen) and
incorrect (rejected) responses, as a label set, and a reward model's scores of them.

The data is JSON Lines (the Hugging Face set's rows, as ``scripts/run_v2.py`` reads a local
``.jsonl``): {id, prompt, chosen: [...], rejected: [...], subset, num_correct,
total_completions, ...}; most subsets one chosen against three rejected, Ties several correct
answers (ids ``ref:N`` and ``tied:N``). Each row becomes:

- a prompt: one user message, external id ``rewardbench2/<first 12 hex of its content hash>``
  (rows asking the same thing share it);
- completions ``rewardbench2/<id>/chosen-<i>`` and ``.../rejected-<j>`` (from 0, in the row's
  order; source ``rewardbench2``);
- a pairwise label per chosen and rejected response, the chosen one shown first, label first;
  labeller ``rewardbench2``, item ``rewardbench2/<id>/c<i>-r<j>``, tags [subset].

The labels are judged under the shared rubric ``rewardbench2/general``. RewardBench 2 publishes
no per-item verdicts; a reward model's scores (JSON Lines {id, scores, num_correct}: the scores
in the row's order, chosen first, as run_v2.py keeps them) are imported with ``judges import
--format rewardbench2`` as scalar verdicts, one per response.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.importers.common import ImportReport, parse, read_jsonl, save_imported_rubric
from rubricsvc.importers.judge_benchmarks import (
    chosen_over_rejected,
    import_scalar_verdicts,
    prompt_spec,
    save_pair_labels,
    scalar_lines,
    score_value,
    shared_rubric,
    store_prompt_and_completions,
    stored_contents,
    upstream_commit,
)
from rubricsvc.importers.judge_verdicts import VerdictImport
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.validation.benchmarks.rewardbench2 import item_name
from rubricsvc.validation.labelsets import LabelInput

LABEL_SET = "rewardbench2"
RUBRIC = "rewardbench2/general"
SOURCE = "rewardbench2"
LABELLER = "rewardbench2"
REPOSITORY = "allenai/reward-bench"
CRITERIA = (
    ("correctness", "The response is correct and factually accurate"),
    ("instructions", "The response follows every instruction and constraint the prompt sets"),
    ("focus", "The response answers what was asked and stays on it"),
    ("safety", "The response helps with what is safe to help with and declines what is harmful"),
)
DESCRIPTION = (
    "RewardBench 2: correct (chosen) against incorrect (rejected) responses to each prompt, "
    "most subsets best-of-4, Ties several correct answers"
)
Score = StrictFloat | StrictInt


class _Row(BaseModel):
    # The set's rows carry more (models, additional_metadata, num_incorrect): kept loose.
    model_config = ConfigDict(extra="allow")

    id: StrictStr | StrictInt
    prompt: StrictStr
    chosen: list[StrictStr] = Field(min_length=1)
    rejected: list[StrictStr] = Field(min_length=1)
    subset: StrictStr
    num_correct: StrictInt | None = None
    total_completions: StrictInt | None = None


class _Scores(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: StrictStr | StrictInt
    scores: list[Score | list[Score]] = Field(min_length=2)
    num_correct: StrictInt = Field(ge=1)


def completion_id(record: str, side: str, index: int) -> str:
    return f"rewardbench2/{record}/{side}-{index}"


def import_rewardbench2(session: Session, path: Path, name: str = LABEL_SET) -> LabelImport:
    """Import RewardBench 2's rows (a ``.jsonl`` file) as the label set ``name``; the caller
    owns the transaction."""
    rows = [(location, parse(_Row, location, data)) for location, data in read_jsonl(path)]
    report = ImportReport(source=SOURCE, path=str(path))
    spec = shared_rubric(
        RUBRIC, "RewardBench 2: the better response", DESCRIPTION, CRITERIA, path.parent
    )
    version = save_imported_rubric(session, spec, report)
    labels: list[LabelInput] = []
    seen: dict[str, str] = {}
    same_text = 0
    for location, row in rows:
        key = str(row.id)
        if key in seen:
            raise ValidationFailed(f"{location}: id {key!r} repeats {seen[key]}")
        seen[key] = location
        _check_counts(location, row)
        added, skipped = _labels(session, location, row, report)
        labels += added
        same_text += skipped
    return save_pair_labels(
        session,
        report,
        name,
        f"{path}{upstream_commit(path.parent, REPOSITORY)}",
        DESCRIPTION,
        labels,
        version.id,
        same_text,
    )


def _check_counts(location: str, row: _Row) -> None:
    if row.num_correct is not None and row.num_correct != len(row.chosen):
        raise ValidationFailed(
            f"{location}: num_correct {row.num_correct}, but {len(row.chosen)} chosen responses"
        )
    total = len(row.chosen) + len(row.rejected)
    if row.total_completions is not None and row.total_completions != total:
        raise ValidationFailed(
            f"{location}: total_completions {row.total_completions}, but {total} responses"
        )


def _labels(
    session: Session, location: str, row: _Row, report: ImportReport
) -> tuple[list[LabelInput], int]:
    key = str(row.id)
    responses = [
        (completion_id(key, side, index), text, {"id": key, "subset": row.subset, "side": side})
        for side, texts in (("chosen", row.chosen), ("rejected", row.rejected))
        for index, text in enumerate(texts)
    ]
    prompt, stored = store_prompt_and_completions(
        session, location, prompt_spec(SOURCE, row.prompt), responses, SOURCE, report
    )
    return chosen_over_rejected(
        prompt,
        row.chosen,
        row.rejected,
        lambda side, index: stored[completion_id(key, side, index)],
        lambda i, j: item_name(key, i, j),
        lambda i, j: [row.subset],
        LABELLER,
        location,
    )


def import_rewardbench2_verdicts(
    session: Session,
    path: Path,
    judge: str,
    model: str | None = None,
    rubric: str | None = None,
) -> VerdictImport:
    """A reward model's scores of RewardBench 2's rows as scalar verdicts of the imported
    judge ``judge``, keyed under ``rubric`` (default: the shared rubric's newest version)."""
    rows = [(location, parse(_Scores, location, data)) for location, data in read_jsonl(path)]
    ids = [
        completion_id(str(row.id), side, index)
        for _, row in rows
        for side, index in _responses(row)
    ]
    contents = stored_contents(session, ids)
    scored = []
    for location, row in rows:
        for (side, index), score in zip(_responses(row), row.scores, strict=True):
            external_id = completion_id(str(row.id), side, index)
            scored.append(
                (location, external_id, score_value(score), contents.get(external_id, external_id))
            )
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
        differing_note="responses repeat another's text under the same prompt with another "
        "score: the first is kept (the platform holds one verdict per content)",
    )


def _responses(row: _Scores) -> list[tuple[str, int]]:
    """(side, index) of each score, in the row's order: the chosen responses first."""
    rejected = len(row.scores) - row.num_correct
    if rejected < 1:
        raise ValidationFailed(
            f"row {row.id!r}: {len(row.scores)} scores for {row.num_correct} correct responses"
        )
    return [("chosen", i) for i in range(row.num_correct)] + [
        ("rejected", j) for j in range(rejected)
    ]
