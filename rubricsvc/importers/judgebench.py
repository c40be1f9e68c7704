"""JudgeBench (ScalerLab/JudgeBench; arXiv 2410.12784): hard response pairs with verified
labels, as a label set, and its published judges' decisions as imported judges.

``data/dataset=judgebench,response_model=<model>.jsonl`` holds one pair per line {pair_id,
original_id, source, question, response_model, response_A, response_B, label}, label
``A>B`` or ``B>A`` (which response is correct). Each pair becomes:

- a prompt: the question as one user message, external id ``judgebench/<first 12 hex of its
  content hash>`` (pairs asking the same question share it);
- completions ``judgebench/<pair_id>/A`` and ``/B`` (source ``judgebench``; metadata pair_id,
  original_id, source, response_model, side, imported_from);
- one pairwise label, A shown first: ``A>B`` first, ``B>A`` second; labeller ``judgebench``,
  item ``judgebench/<pair_id>``, tags [source].

The labels are judged under the shared rubric ``judgebench/correctness``. A pair whose two
responses are the same text (one in the Claude split) cannot be a pair here: its completions
are stored, its label left out, and noted (JudgeBench counts it; a judge consistent across
orders is never right on it), and so are the judges' verdicts on it.

Published decisions are ``outputs/dataset=judgebench,response_model=<model>,judge_name=
<name>,judge_model=<model>.jsonl`` beside ``data/``: the pair (its texts optional) with
``judgments``, one per order run (A then B; then B then A), each {judgment, decision}. They
become the imported judge ``judgebench/<name>/<judge model>`` (``labels import`` imports every
such file of the split it finds; ``judges import --format judgebench FILE`` one):

- a judge that decides (``decision`` ``A>B``, ``B>A``, ``A=B`` in the order it was shown):
  pairwise verdicts in both orders, first / second / tie, item ``judgebench/<pair_id>``; any
  other decision, none, or a failed call (a null judgment) is a verdict null, never a tie;
- a reward model (every judgment has ``scores``, the two responses' as shown): scalar
  verdicts, one per response, its score from the first order (the file's scale [min, max]
  kept beside it), so ``judges evaluate`` compares each pair by the two scores.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.importers.common import ImportReport, parse, read_jsonl, save_imported_rubric
from rubricsvc.importers.judge_benchmarks import (
    import_scalar_verdicts,
    pair_label,
    prompt_spec,
    scalar_lines,
    shared_rubric,
    store_prompt_and_completions,
    stored_contents,
    tally,
    upstream_commit,
)
from rubricsvc.importers.judge_verdicts import VerdictImport
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.validation.benchmarks.judgebench import item_name
from rubricsvc.validation.labelsets import LabelInput, save_label_set

SOURCE = "judgebench"
RUBRIC = "judgebench/correctness"
LABELLER = "judgebench"
REPOSITORY = "ScalerLab/JudgeBench"
DATA_FILE = re.compile(r"^dataset=judgebench,response_model=(?P<model>[^,/]+)\.jsonl$")
OUTPUT_FILE = re.compile(
    r"^dataset=judgebench,response_model=(?P<model>[^,/]+),judge_name=(?P<judge>[^,/]+),"
    r"judge_model=(?P<judge_model>[^/]+)\.jsonl$"
)
LABELS = {"A>B": "first", "B>A": "second"}
# A decision in the order the judge was shown the pair: A is the response shown first.
DECISIONS = {"A>B": "first", "B>A": "second", "A=B": "tie"}
CRITERIA = (
    ("answer", "The final answer the response gives is correct"),
    ("reasoning", "The reasoning, working or code that leads to the answer is correct"),
)
DESCRIPTION = (
    "JudgeBench: pairs of responses to hard questions (knowledge, reasoning, math, coding), "
    "labelled by which response's answer is correct"
)


class _Pair(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pair_id: StrictStr
    original_id: StrictStr | StrictInt | None = None
    source: StrictStr
    question: StrictStr
    response_model: StrictStr
    response_A: StrictStr
    response_B: StrictStr
    label: Literal["A>B", "B>A"]


class _Judgment(BaseModel):
    """One order's decision; the judge's own record (``judgment``) is read loosely: each
    judge writes other fields."""

    model_config = ConfigDict(extra="allow")

    judgment: dict[str, Any] | None = None
    decision: StrictStr | None = None


class _Output(BaseModel):
    """A published judge's record: the pair (texts optional: checked when given) and its
    decisions in the orders it was run."""

    model_config = ConfigDict(extra="allow")

    pair_id: StrictStr
    label: Literal["A>B", "B>A"] | None = None
    question: StrictStr | None = None
    response_A: StrictStr | None = None
    response_B: StrictStr | None = None
    judgments: list[_Judgment | None]


@dataclass(frozen=True)
class JudgeFile:
    path: Path
    response_model: str
    judge_name: str
    judge_model: str

    @property
    def judge(self) -> str:
        return f"judgebench/{self.judge_name}/{self.judge_model}"


def completion_id(pair_id: str, side: str) -> str:
    return f"judgebench/{pair_id}/{side}"


def data_file(path: Path) -> Path:
    """The data file ``path`` names: the file, or the one data file in the folder (the
    repository root's ``data/`` too)."""
    if path.is_file():
        return path
    folders = [path, path / "data"]
    found = sorted(f for folder in folders if folder.is_dir() for f in folder.iterdir())
    files = [f for f in found if DATA_FILE.match(f.name)]
    if len(files) != 1:
        named = ", ".join(f.name for f in files) or "none"
        raise ValidationFailed(
            f"{path}: expected one JudgeBench data file (dataset=judgebench,response_model="
            f"MODEL.jsonl), found {named}: name the file"
        )
    return files[0]


def judge_files(file: Path, response_model: str) -> list[JudgeFile]:
    """The published judges' files for ``response_model`` in ``outputs/`` beside ``data/``
    (or beside the data file)."""
    found = []
    for folder in (file.parent.parent / "outputs", file.parent / "outputs"):
        if not folder.is_dir():
            continue
        for candidate in sorted(folder.iterdir()):
            parsed = judge_file(candidate)
            if parsed is not None and parsed.response_model == response_model:
                found.append(parsed)
    return found


def judge_file(path: Path) -> JudgeFile | None:
    matched = OUTPUT_FILE.match(path.name)
    if matched is None:
        return None
    return JudgeFile(path, matched["model"], matched["judge"], matched["judge_model"])


def import_judgebench(session: Session, path: Path, name: str | None = None) -> LabelImport:
    """Import a split's data file as a label set (default name ``judgebench-<response
    model>``) and the published judges' decisions found beside it; the caller owns the
    transaction."""
    file = data_file(path)
    matched = DATA_FILE.match(file.name)
    if matched is None:
        raise ValidationFailed(
            f"{file}: not a JudgeBench data file (dataset=judgebench,response_model=MODEL.jsonl)"
        )
    records = [(location, parse(_Pair, location, data)) for location, data in read_jsonl(file)]
    _refuse_repeats(records)
    report = ImportReport(source=SOURCE, path=str(file))
    spec = shared_rubric(
        RUBRIC, "JudgeBench: the correct answer", DESCRIPTION, CRITERIA, file.parent
    )
    version = save_imported_rubric(session, spec, report)
    labels: list[LabelInput] = []
    same_text = []
    for location, pair in records:
        prompt, stored = store_prompt_and_completions(
            session,
            location,
            prompt_spec(SOURCE, pair.question),
            [
                (completion_id(pair.pair_id, side), text, _metadata(pair, side))
                for side, text in (("A", pair.response_A), ("B", pair.response_B))
            ],
            SOURCE,
            report,
        )
        if pair.response_A == pair.response_B:
            # Stored (a judge's file names them), but not a pair: no label.
            same_text.append(pair.pair_id)
            continue
        labels.append(
            pair_label(
                item_name(pair.pair_id),
                prompt,
                stored[completion_id(pair.pair_id, "A")],
                stored[completion_id(pair.pair_id, "B")],
                LABELS[pair.label],
                LABELLER,
                [pair.source],
                location,
            )
        )
    report.notes += [
        f"pair {pair_id}: its two responses are the same text, not a pair: its label and "
        "verdicts left out (JudgeBench counts it among its pairs)"
        for pair_id in same_text
    ]
    saved = save_label_set(
        session,
        name or f"judgebench-{matched['model']}",
        f"{file}{upstream_commit(file.parent, REPOSITORY)}",
        DESCRIPTION,
        labels,
        rubric_version_id=version.id,
    )
    result = LabelImport(report=report, label_set=saved)
    pairs = {pair.pair_id: pair for _, pair in records}
    for judge in judge_files(file, matched["model"]):
        verdicts = import_judgebench_verdicts(session, judge.path, rubric=version.ref, pairs=pairs)
        result.judges.append(tally(verdicts))
        report.notes += [f"judge {verdicts.judge}: {note}" for note in verdicts.notes]
        report.judgments.added += verdicts.judgments_added
        report.judgments.unchanged += verdicts.judgments_already_stored
    return result


def _refuse_repeats(records: Sequence[tuple[str, _Pair]]) -> None:
    seen: dict[str, str] = {}
    for location, pair in records:
        if pair.pair_id in seen:
            raise ValidationFailed(
                f"{location}: pair_id {pair.pair_id!r} repeats {seen[pair.pair_id]}"
            )
        seen[pair.pair_id] = location


def _metadata(pair: _Pair, side: str) -> dict[str, Any]:
    return {
        "pair_id": pair.pair_id,
        "original_id": pair.original_id,
        "judgebench_source": pair.source,
        "response_model": pair.response_model,
        "side": side,
    }


def import_judgebench_verdicts(
    session: Session,
    path: Path,
    judge: str | None = None,
    model: str | None = None,
    rubric: str | None = None,
    pairs: dict[str, _Pair] | None = None,
) -> VerdictImport:
    """One published judge's file (``outputs/...judge_name=...jsonl``) as the imported judge
    ``judge`` (default ``judgebench/<judge_name>/<judge_model>``), keyed under ``rubric``
    (default: the shared rubric's newest version, the one ``labels import`` names); the
    pairs must be stored (``labels import judgebench``)."""
    parsed = judge_file(path)
    records = [(location, parse(_Output, location, data)) for location, data in read_jsonl(path)]
    if judge is None:
        if parsed is None:
            raise ValidationFailed(
                f"{path}: not named as JudgeBench names a judge's file (dataset=judgebench,"
                "response_model=...,judge_name=...,judge_model=....jsonl): pass --judge"
            )
        judge = parsed.judge
    if pairs is not None:
        _check_texts(records, pairs)
    skipped = _same_text_pairs(session, [output.pair_id for _, output in records])
    kept = [(location, output) for location, output in records if output.pair_id not in skipped]
    if _scores_everywhere(kept):
        contents = stored_contents(
            session, [completion_id(o.pair_id, side) for _, o in kept for side in ("A", "B")]
        )
        lines, differing = _scalar(kept, path, contents)
    else:
        lines, differing = _pairwise(kept), 0
    model = model or _judge_model(kept) or (parsed.judge_model if parsed else None)
    report = import_scalar_verdicts(
        session,
        path,
        judge,
        lines,
        model=model,
        rubric=rubric,
        default_rubric=RUBRIC,
        differing=differing,
        differing_note="responses scored otherwise in the second order or in another pair: "
        "the first score is kept (one verdict per content)",
    )
    if skipped:
        report.notes.append(
            f"pairs of two identical responses left out, as the labels leave them: {len(skipped)}"
        )
    return report


def _check_texts(records: Sequence[tuple[str, _Output]], pairs: dict[str, _Pair]) -> None:
    for location, output in records:
        pair = pairs.get(output.pair_id)
        if pair is None:
            raise ValidationFailed(f"{location}: pair {output.pair_id!r} is not in the data file")
        for field in ("question", "response_A", "response_B", "label"):
            given = getattr(output, field)
            if given is not None and given != getattr(pair, field):
                raise ValidationFailed(
                    f"{location}: {field} of pair {output.pair_id!r} differs from the data file's"
                )


def _same_text_pairs(session: Session, pair_ids: Sequence[str]) -> set[str]:
    """Pairs whose two stored responses are one text (left out of the labels)."""
    ids = [completion_id(p, side) for p in pair_ids for side in ("A", "B")]
    hashes = stored_contents(session, ids)
    return {
        p
        for p in pair_ids
        if completion_id(p, "A") in hashes
        and hashes.get(completion_id(p, "A")) == hashes.get(completion_id(p, "B"))
    }


def _scores_everywhere(records: Sequence[tuple[str, _Output]]) -> bool:
    """A reward model's file: every judgment carries the two responses' scores."""
    judgments = [j for _, output in records for j in output.judgments if j is not None]
    return bool(judgments) and all(
        isinstance((j.judgment or {}).get("scores"), list) for j in judgments
    )


def _judge_model(records: Sequence[tuple[str, _Output]]) -> str | None:
    for _, output in records:
        for judgment in output.judgments:
            named = (judgment.judgment or {}).get("judge_model") if judgment else None
            if isinstance(named, str) and named:
                return named
    return None


def _pairwise(records: Sequence[tuple[str, _Output]]) -> list[tuple[str, Any]]:
    """Each order's decision as a pairwise verdict on the pair in the order it was shown."""
    lines: list[tuple[str, Any]] = []
    for location, output in records:
        if len(output.judgments) > 2:
            raise ValidationFailed(f"{location}: more than two judgments (one per order)")
        shown = [("A", "B"), ("B", "A")]
        for (first, second), judgment in zip(shown, output.judgments, strict=False):
            decision = judgment.decision if judgment is not None else None
            response = (judgment.judgment or {}).get("response") if judgment else None
            line: dict[str, Any] = {
                "kind": "pairwise",
                "first": completion_id(output.pair_id, first),
                "second": completion_id(output.pair_id, second),
                "verdict": DECISIONS.get(decision or ""),
                "item": item_name(output.pair_id),
                "raw": decision,
            }
            if isinstance(response, str) and response.strip():
                line["reasoning"] = response
            lines.append((location, line))
    return lines


def _scalar(
    records: Sequence[tuple[str, _Output]], path: Path, contents: dict[str, str]
) -> tuple[list[tuple[str, Any]], int]:
    """A reward model's score of each response (the first order's), as scalar verdicts; a
    response whose content another pair's holds (a question asked twice) is scored once."""
    scored: list[tuple[str, str, float, str]] = []
    differing = 0
    for location, output in records:
        judgments = [j for j in output.judgments if j is not None]
        if not judgments:
            continue
        scores = _two_scores(location, judgments[0])
        if len(judgments) > 1:
            swapped = _two_scores(location, judgments[1])
            differing += (swapped[1], swapped[0]) != scores
        for side, score in zip(("A", "B"), scores, strict=True):
            external_id = completion_id(output.pair_id, side)
            scored.append((location, external_id, score, contents.get(external_id, external_id)))
    lines, repeated = scalar_lines(scored, str(path))
    return lines, differing + repeated


def _two_scores(location: str, judgment: _Judgment) -> tuple[float, float]:
    scores = (judgment.judgment or {}).get("scores")
    if (
        not isinstance(scores, list)
        or len(scores) != 2
        or not all(isinstance(s, int | float) and not isinstance(s, bool) for s in scores)
    ):
        raise ValidationFailed(f"{location}: expected two numbers in judgment.scores")
    return float(scores[0]), float(scores[1])
