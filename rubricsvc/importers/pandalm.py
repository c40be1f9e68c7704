"""PandaLM's human-annotated pairwise test set (WeOpenML/PandaLM ``data/``) as a label set,
with the two published judges' verdicts on it as imported pairwise judgments.

``testset-v1.json`` is a list of records {idx, motivation_app, cmp_key, instruction, input,
response1, response2, annotator1..3}; an annotator's label is 1 (response1 better), 2
(response2 better) or 0 (a tie). Each record becomes:

- a prompt: one user message, ``instruction`` followed by a blank line and ``input`` when there
  is one; external id ``pandalm/<first 12 hex of its content hash>``. Records with the same
  instruction and input share their prompt (999 records, 170 prompts), so a bootstrap over
  prompts keeps them together;
- two completions, external ids ``pandalm/<idx>/1`` and ``pandalm/<idx>/2`` (source
  ``pandalm``; metadata: cmp_key, motivation_app, idx, the model the cmp_key names for that
  side, the record's location). Six responses are a JSON ``true`` in the file (the text "True"
  read as a boolean upstream): stored as the text ``True``, marked ``text_was_json_boolean``;
- three pairwise labels in the label set ``pandalm-human`` (labellers annotator1..3; item =
  idx; tags [motivation_app]): 1 -> first (1.0), 2 -> second (0.0), 0 -> tie (0.5).

The label set is judged under the shared rubric ``pandalm/general`` (no prompt; origin imported):
the factors PandaLM's paper names for its judge (arXiv 2306.05087: correctness, and "relative
conciseness, clarity, adherence to instructions, comprehensiveness, and formality").

``gpt-3.5-turbo-testset-v1.json`` {idx, gpt_result, gpt_reason, gpt_reference} and
``pandalm-7b-testset-v1.json`` {idx, pandalm_result, pandalm_reason, pandalm_reference} beside
it, same records in the same order, become judgments of the judges ``pandalm/gpt-3.5-turbo`` and
``pandalm/pandalm-7b`` (backend ``imported``: only ever read; mode ``pairwise``), response1
shown first, keyed as the pairwise mode keys that order. A result 1/2/0 is an ok judgment
(first 1.0 / second 0.0 / tie 0.5, reasoning = the reason, raw_output = the result, detail
{reference, idx}); any other result ("Tie", "garbage": 63 of gpt-3.5's) is a failed judgment
(failure ``judge``, error ``unparseable verdict: <text>``), never a tie or a loss.

A judgment is keyed by content, and 99 records repeat an earlier record's prompt and both
responses: the earlier record's judgment stands for them (its verdict is kept) and lists each
repeat's own result, reason and reference under ``detail.repeats``, so every published verdict
is stored; a repeat whose verdict differs is counted as a conflict (gpt-3.5: 7, PandaLM-7B: 0).
``detail.by_item`` maps every such record's idx (the label item) to its own parsed verdict, so
``judges evaluate`` compares each record's labels with the verdict given on that record and
reproduces the published figures exactly (692 of 936 for gpt-3.5, 667 of 999 for PandaLM-7B).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import read_items
from rubricsvc.importers.common import (
    ImportReport,
    ensure_completion,
    ensure_prompt,
    located,
    parse,
    save_imported_rubric,
)
from rubricsvc.importers.labelled import JudgeTally, LabelImport, store_imported_judgments
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import FailureClass
from rubricsvc.judging.keys import pairwise_key
from rubricsvc.models import (
    Completion,
    JudgeConfig,
    JudgmentStatus,
    LabelKind,
    Prompt,
    RubricVersion,
)
from rubricsvc.prompts import prompt_hash
from rubricsvc.rubrics.schemas import CriterionSpec, Message, PromptSpec, RubricSpec
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.validation.labelsets import PAIRWISE_VALUES, LabelInput, save_label_set

TESTSET = "testset-v1.json"
LABEL_SET = "pandalm-human"
RUBRIC = "pandalm/general"
SOURCE = "pandalm"
ANNOTATORS = ("annotator1", "annotator2", "annotator3")
# PandaLM's answer: 1 = response1 better, 2 = response2 better, 0 = a tie.
VERDICTS = {1: "first", 2: "second", 0: "tie"}
PAPER = "arXiv:2306.05087"
# (factor, criterion text): correctness first, then the subjective factors in the paper's order.
FACTORS = (
    ("correctness", "The response is correct: what it states and the answer it gives are accurate"),
    ("conciseness", "The response is concise: it says what is needed without unnecessary words"),
    ("clarity", "The response is clear and easy to follow"),
    (
        "adherence",
        "The response adheres to the instruction: it does what was asked, with the given input",
    ),
    ("comprehensiveness", "The response is comprehensive: it covers everything the task needs"),
    ("formality", "The response's tone, register and format suit the task"),
)
DESCRIPTION = (
    "PandaLM test set v1: pairs of responses to one instruction, each labelled by three human "
    "annotators (first better, second better, or a tie)"
)


def pandalm_judges() -> dict[str, JudgeSpec]:
    """The published judges, by the file holding their verdicts (built on call: the mode
    ``pairwise`` must be registered first)."""
    return {
        "gpt-3.5-turbo-testset-v1.json": JudgeSpec(
            name="pandalm/gpt-3.5-turbo", backend="imported", model="gpt-3.5-turbo", mode="pairwise"
        ),
        "pandalm-7b-testset-v1.json": JudgeSpec(
            name="pandalm/pandalm-7b",
            backend="imported",
            model="WeOpenML/PandaLM-7B-v1",
            mode="pairwise",
        ),
    }


Annotation = Literal[0, 1, 2]
Item = TypeVar("Item", bound=BaseModel)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idx: StrictInt
    motivation_app: StrictStr
    cmp_key: StrictStr
    instruction: StrictStr
    input: StrictStr
    # Six responses are a JSON true upstream: kept, and stored as the text they stand for.
    response1: StrictStr | StrictBool
    response2: StrictStr | StrictBool
    annotator1: Annotation
    annotator2: Annotation
    annotator3: Annotation


class _Verdict(BaseModel):
    """One judge's record, with its fields renamed from the file's prefix (gpt_, pandalm_)."""

    model_config = ConfigDict(extra="forbid")

    idx: StrictInt
    result: StrictStr | StrictInt
    reason: StrictStr | None = None
    reference: StrictStr | None = None


@dataclass
class _Pair:
    location: str
    record: _Record
    prompt: Prompt
    first: Completion
    second: Completion


def import_pandalm(session: Session, path: Path, name: str = LABEL_SET) -> LabelImport:
    """Import the test set (``testset-v1.json`` or its folder) as the label set ``name``, and the
    judges' verdicts beside it; the caller owns the transaction."""
    file = path / TESTSET if path.is_dir() else path
    records = _read(file, "record", lambda location, data: parse(_Record, location, data))
    verdict_files = {
        file_name: spec
        for file_name, spec in pandalm_judges().items()
        if (file.parent / file_name).is_file()
    }
    # Every file is read and checked before anything is stored.
    verdicts = {
        file_name: _read_verdicts(file.parent / file_name, records) for file_name in verdict_files
    }
    report = ImportReport(source="pandalm", path=str(file))
    version = save_imported_rubric(session, _rubric_spec(file), report)
    pairs = [_store_pair(session, location, record, report) for location, record in records]
    labels = [label for pair in pairs for label in _labels(pair)]
    saved = save_label_set(
        session, name, _source(file), DESCRIPTION, labels, rubric_version_id=version.id
    )
    result = LabelImport(report=report, label_set=saved)
    for file_name, spec in verdict_files.items():
        judge = ensure_judge_config(session, spec)
        tally = JudgeTally(judge=spec.name)
        rows = _judgment_rows(judge, version, pairs, verdicts[file_name], tally)
        store_imported_judgments(session, rows, tally)
        result.judges.append(tally)
        report.judgments.added += tally.added
        report.judgments.unchanged += tally.unchanged
    missing = sorted(set(pandalm_judges()) - set(verdict_files))
    report.notes += [
        f"{absent} not found beside {file.name}: no verdicts of it" for absent in missing
    ]
    return result


def _read(file: Path, noun: str, parser: Callable[[str, Any], Item]) -> list[tuple[str, Item]]:
    items = read_items(file, noun)
    if len(items) == 1 and items[0][0] == str(file):
        raise ValidationFailed(f"{file}: expected a JSON list of {noun}s")
    return [(location, parser(location, data)) for location, data in items]


def _read_verdicts(file: Path, records: list[tuple[str, _Record]]) -> list[_Verdict]:
    """A judge's verdicts, one per record in the same order (checked by idx)."""
    prefix = "gpt_" if file.name.startswith("gpt") else "pandalm_"

    def parser(location: str, data: Any) -> _Verdict:
        if isinstance(data, dict):
            data = {key.removeprefix(prefix): value for key, value in data.items()}
        return parse(_Verdict, location, data)

    verdicts = _read(file, "verdict", parser)
    if len(verdicts) != len(records):
        raise ValidationFailed(
            f"{file}: {len(verdicts)} verdicts for the {len(records)} records of {TESTSET}"
        )
    for (location, verdict), (_, record) in zip(verdicts, records, strict=True):
        if verdict.idx != record.idx:
            raise ValidationFailed(
                f"{location}: idx {verdict.idx}, but the record in the same place of {TESTSET} "
                f"is idx {record.idx}"
            )
    return [verdict for _, verdict in verdicts]


def _source(file: Path) -> str:
    """The path, and the upstream commit when a SOURCE.txt beside the files names it."""
    notes = file.parent / "SOURCE.txt"
    text = notes.read_text(encoding="utf-8") if notes.is_file() else ""
    commit = re.search(r"\bcommit\s+([0-9a-f]{40})\b", text)
    upstream = f" (WeOpenML/PandaLM@{commit.group(1)}, data/)" if commit else ""
    return f"{file}{upstream}"


def _rubric_spec(file: Path) -> RubricSpec:
    return RubricSpec(
        name=RUBRIC,
        title="PandaLM's comparison factors",
        description="What PandaLM's judge weighs when it compares two responses (" + PAPER + ")",
        criteria=[
            CriterionSpec(text=text, weight=1, theme=factor, tags=[f"factor:{factor}"])
            for factor, text in FACTORS
        ],
        origin="imported",
        origin_detail={"source": "pandalm", "path": str(file), "paper": PAPER},
    )


def _prompt_spec(record: _Record) -> PromptSpec:
    content = record.instruction + (f"\n\n{record.input}" if record.input else "")
    spec = PromptSpec(messages=[Message(role="user", content=content)])
    digest = prompt_hash(spec.chat())  # of the message as stored (surrounding space trimmed)
    return spec.model_copy(update={"external_id": f"pandalm/{digest[:12]}"})


def _store_pair(session: Session, location: str, record: _Record, report: ImportReport) -> _Pair:
    with located(location):
        prompt = ensure_prompt(session, _prompt_spec(record), report)
        first, second = (
            ensure_completion(
                session, f"response{side}", prompt, _completion(location, record, side), report
            )
            for side in (1, 2)
        )
    return _Pair(location, record, prompt, first, second)


def _completion(location: str, record: _Record, side: int) -> dict[str, Any]:
    response = record.response1 if side == 1 else record.response2
    models = record.cmp_key.split("_")
    metadata: dict[str, Any] = {
        "idx": record.idx,
        "cmp_key": record.cmp_key,
        "motivation_app": record.motivation_app,
        "imported_from": location,
    }
    if len(models) == 2:
        metadata["model"] = models[side - 1]
    if isinstance(response, bool):
        metadata["text_was_json_boolean"] = True
    return {
        "text": str(response),  # a JSON true: "True", the text it was read from
        "source": SOURCE,
        "external_id": f"pandalm/{record.idx}/{side}",
        "metadata": metadata,
    }


def _labels(pair: _Pair) -> list[LabelInput]:
    record = pair.record
    labels = []
    for labeller in ANNOTATORS:
        verdict = VERDICTS[getattr(record, labeller)]
        labels.append(
            LabelInput(
                kind=LabelKind.PAIRWISE,
                item=str(record.idx),
                prompt=pair.prompt,
                completion=pair.first,
                other_completion=pair.second,
                labeller=labeller,
                value=PAIRWISE_VALUES[verdict],
                verdict=verdict,
                tags=(record.motivation_app,),
                location=pair.location,
            )
        )
    return labels


def parse_verdict(result: str | int) -> str | None:
    """first / second / tie for a result 1 / 2 / 0 (a number or its digit), else None."""
    text = str(result).strip()
    return VERDICTS[int(text)] if text in ("0", "1", "2") else None


def _judgment_rows(
    judge: JudgeConfig,
    version: RubricVersion,
    pairs: list[_Pair],
    verdicts: list[_Verdict],
    tally: JudgeTally,
) -> list[dict[str, Any]]:
    """One judgment per content key, in record order; a repeat joins the first's detail."""
    rows: dict[str, dict[str, Any]] = {}
    for pair, verdict in zip(pairs, verdicts, strict=True):
        parsed = parse_verdict(verdict.result)
        tally.records += 1
        tally.ok += parsed is not None
        tally.failed += parsed is None
        key = pairwise_key(
            judge.config_hash,
            version.content_hash,
            pair.prompt.content_hash,
            pair.first.content_hash,
            pair.second.content_hash,
        )
        kept = rows.get(key)
        if kept is None:
            rows[key] = _judgment(key, judge, pair, verdict, parsed)
            continue
        tally.repeats += 1
        tally.conflicts += parsed != kept["verdict"]
        kept["detail"]["by_item"][str(pair.record.idx)] = parsed
        kept["detail"]["repeats"].append(
            {
                "idx": pair.record.idx,
                "result": str(verdict.result),
                "reason": verdict.reason,
                "reference": verdict.reference,
            }
        )
    for row in rows.values():
        if not row["detail"]["repeats"]:
            del row["detail"]["repeats"]
    return list(rows.values())


def _judgment(
    key: str, judge: JudgeConfig, pair: _Pair, verdict: _Verdict, parsed: str | None
) -> dict[str, Any]:
    raw = str(verdict.result)
    return {
        "cache_key": key,
        "judge_config_id": judge.id,
        "completion_id": pair.first.id,
        "other_completion_id": pair.second.id,
        "criterion_id": None,
        "status": JudgmentStatus.OK if parsed is not None else JudgmentStatus.FAILED,
        "value": PAIRWISE_VALUES[parsed] if parsed is not None else None,
        "verdict": parsed,
        "reasoning": verdict.reason,
        "raw_output": raw,
        "attempts": 1,
        "error": None if parsed is not None else f"unparseable verdict: {raw}",
        "failure": None if parsed is not None else FailureClass.JUDGE.value,
        "detail": {
            "reference": verdict.reference,
            "idx": pair.record.idx,
            "repeats": [],
            # Each record's own verdict (None: unparseable), by label item: an evaluation
            # compares a record's labels with what the source said on that very record.
            "by_item": {str(pair.record.idx): parsed},
        },
    }
