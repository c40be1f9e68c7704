"""A judge's verdicts from JSON Lines (``rubricsvc judges import FILE --judge NAME``).

The verdicts are stored as judgments of the judge config NAME, backend ``imported`` (only ever
read, never called), on completions and criteria already stored (by external id), keyed exactly
as the judge's verdict mode keys them, so ``judges evaluate`` and ``score`` find them in the
judgment cache. One verdict per line::

    {"kind": "pairwise", "first": "c-1", "second": "c-2", "verdict": "first"}
    {"kind": "pointwise", "completion": "c-1", "rubric": "sleep@2", "criterion": 1, "met": true}
    {"kind": "pointwise", "completion": "c-1", "rubric": "sleep", "criterion": "...", "value": 0.8}
    {"kind": "scalar", "completion": "c-1", "score": 4, "scale": [1, 5]}

with optional ``item`` (the label item the verdict is on), ``reasoning`` and ``raw``. A pair is
in the order the judge was shown it (the other order is another line); a pairwise ``verdict``
null is a judgment the judge gave no valid verdict for, stored as failed. A judge has one
verdict mode, so one file holds one kind: pairwise (mode ``pairwise``), pointwise with ``met``
(``criterion-text``), pointwise with ``value`` (``criterion-prob``) or scalar (``holistic``:
the whole rubric judged at once, its value the score scaled to [0, 1]).

A judgment is keyed by content. Verdicts on the same content that name their items are one
judgment holding each item's own verdict (``detail.by_item``), and an evaluation compares an
item's labels with that item's verdict only; verdicts that name no item are on the content,
for every item on it, and must agree. Every line is read, resolved and checked before anything
is stored: the first bad one fails the file with one line ``FILE:LINE: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError, model_validator
from sqlalchemy.orm import Session

from rubricsvc.backends import replays_only
from rubricsvc.errors import ConflictError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error
from rubricsvc.importers.common import located, read_jsonl
from rubricsvc.importers.labels_jsonl import Resolver
from rubricsvc.importers.lines import Line, PairLine, PointwiseLine, ScalarLine, parse_line
from rubricsvc.judging import keys
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec, VerdictMode
from rubricsvc.judging.failures import FailureClass
from rubricsvc.judging.modes import get_mode
from rubricsvc.models import Completion, Judgment, JudgmentStatus, RubricVersion
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.scoring.judge_configs import ensure_judge_config, latest_judge_config, stored_spec
from rubricsvc.scoring.scorer import case_plan
from rubricsvc.scoring.store import judgments_by_key, save_judgments
from rubricsvc.validation.evaluation import own_rubric_versions
from rubricsvc.validation.labelsets import NAME_MAX, PAIRWISE_VALUES

# What each mode's verdicts are, as the file gives them.
# Each kind of verdict is stored under the built-in mode that keys and reads judgments that
# way: a setting of the imported judge (what its config records), not a branch on a mode.
PAIRWISE_MODE = VerdictMode.PAIRWISE.value
MET_MODE = VerdictMode.CRITERION_TEXT.value
VALUE_MODE = VerdictMode.CRITERION_PROB.value
SCALAR_MODE = VerdictMode.HOLISTIC.value
MODE_OF_KIND = {
    PAIRWISE_MODE: "pairwise verdicts",
    MET_MODE: "pointwise verdicts with 'met'",
    VALUE_MODE: "pointwise verdicts with 'value'",
    SCALAR_MODE: "scalar verdicts",
}
# The backend of an imported judge's config: it replays what was imported, never judges.
IMPORTED_BACKEND = "imported"
# A verdict as compared with another on the same content: a pairwise verdict (None: no
# valid verdict), else the value.
Said = str | float | None


class _Common(Line):
    reasoning: str | None = None
    raw: str | None = None

    @model_validator(mode="after")
    def _item_fits(self) -> _Common:
        if self.item is not None and not 1 <= len(str(self.item)) <= NAME_MAX:
            raise ValueError(f"item: expected 1 to {NAME_MAX} characters")
        return self

    @property
    def item_name(self) -> str | None:
        return str(self.item) if self.item is not None else None


class _Pairwise(PairLine, _Common):
    verdict: Literal["first", "second", "tie"] | None  # required; null: no valid verdict


class _Pointwise(PointwiseLine, _Common):
    pass


class _Scalar(ScalarLine, _Common):
    pass


MODELS: dict[str, type[_Common]] = {
    "pairwise": _Pairwise,
    "pointwise": _Pointwise,
    "scalar": _Scalar,
}


@dataclass
class VerdictImport:
    """What ``import_judge_verdicts`` did, for the CLI to print."""

    path: str
    judge: str
    mode: str
    model: str | None = None
    judge_config_hash: str = ""
    judge_created: bool = False  # the judge config was stored by this import
    rubrics: list[str] = field(default_factory=list)  # the versions the verdicts are keyed under
    verdicts: int = 0  # lines read
    ok: int = 0
    failed: int = 0  # pairwise verdicts null: stored as failed judgments
    added: int = 0  # verdicts stored by this import (a judgment, or an item's verdict)
    already_stored: int = 0  # verdicts the database held already
    repeats: int = 0  # lines on content an earlier line of the file holds
    conflicts: int = 0  # item verdicts that differ from the verdict their judgment holds
    judgments_added: int = 0
    judgments_already_stored: int = 0  # stored judgments the file names (some extended)
    judgments_extended: int = 0  # of those, given verdicts on items they did not hold
    notes: list[str] = field(default_factory=list)  # what a benchmark's reader left out or kept

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "notes": list(self.notes)}


@dataclass
class _Verdict:
    """One line, resolved: the judgment it makes and what it says."""

    location: str
    key: str
    item: str | None
    said: Said
    row: dict[str, Any]


@dataclass
class _Held:
    """What the database and the file's earlier lines hold on one content key."""

    where: str  # the first line, or the stored judgment
    said: Said  # the judgment's own verdict
    tied: bool  # its verdicts name their items
    stored: Judgment | None = None
    row: dict[str, Any] | None = None  # a new judgment
    by_item: dict[str, tuple[Said, str]] = field(default_factory=dict)  # item -> said, where
    new_items: bool = False


def import_judge_verdicts(
    session: Session,
    path: Path,
    judge: str,
    model: str | None = None,
    rubric: str | None = None,
    records: list[tuple[str, Any]] | None = None,
) -> VerdictImport:
    """Store the verdicts of ``path`` as judgments of the imported judge ``judge``; pairwise
    and scalar ones under the rubric version ``rubric`` (default: each prompt's own newest, as
    ``judges evaluate`` compares a label set without one). ``records``: the file's lines
    already read (a benchmark's own format written as this one's lines, each with its
    location). The caller owns the transaction."""
    read = records if records is not None else read_jsonl(path)
    if not read:
        raise ValidationFailed(f"{path}: no verdicts to import")
    lines = [(location, _parse_line(location, data)) for location, data in read]
    mode = _one_mode(lines)
    spec, created = _judge_spec(session, judge, model, mode)
    report = VerdictImport(str(path), spec.name, mode, spec.model, spec.config_hash(), created)
    chosen = None
    if rubric is not None:
        if get_mode(mode).per_criterion:
            raise ValidationFailed(
                "--rubric applies to pairwise and scalar verdicts; pointwise verdicts name "
                "their rubric on each line"
            )
        chosen = resolve_version(session, rubric)
    resolver = Resolver(session, [line for _, line in lines])
    keyer = _Keyer(session, spec, report.judge_config_hash, chosen, resolver)
    verdicts = []
    for location, line in lines:
        with located(location):
            verdicts.append(keyer.verdict(location, line))
    report.rubrics = sorted(keyer.used)
    held = _merge(session, verdicts, report)
    row = ensure_judge_config(session, spec)
    assert row.config_hash == report.judge_config_hash
    new = []
    for state in held.values():
        if state.row is not None:
            if state.tied:
                state.row["detail"]["by_item"] = {i: s for i, (s, _) in state.by_item.items()}
            new.append({**state.row, "judge_config_id": row.id})
        elif state.stored is not None and state.new_items:
            detail = dict(state.stored.detail or {})
            detail["by_item"] = {i: s for i, (s, _) in state.by_item.items()}
            state.stored.detail = detail  # a new dict: the JSON column sees the change
    save_judgments(session, new)
    session.flush()
    return report


def _parse_line(location: str, data: Any) -> _Common:
    return parse_line(MODELS, location, data)


def _mode_of(line: _Common) -> str:
    if isinstance(line, _Pairwise):
        return PAIRWISE_MODE
    if isinstance(line, _Scalar):
        return SCALAR_MODE
    assert isinstance(line, _Pointwise)
    return MET_MODE if line.met is not None else VALUE_MODE


def _one_mode(lines: list[tuple[str, _Common]]) -> str:
    """The verdict mode of the file: a judge has one, so every line must be of it."""
    first_location, first = lines[0]
    mode = _mode_of(first)
    for location, line in lines[1:]:
        if _mode_of(line) != mode:
            raise ValidationFailed(
                f"{location}: a judge has one verdict mode: line {_line(first_location)} holds "
                f"{MODE_OF_KIND[mode]} (mode {mode}), this line {MODE_OF_KIND[_mode_of(line)]} "
                "(import them as another judge)"
            )
    return mode


def _line(location: str) -> str:
    return location.rsplit(":", 1)[-1]


def _judge_spec(
    session: Session, name: str, model: str | None, mode: str
) -> tuple[JudgeSpec, bool]:
    """The imported judge ``name`` in ``mode``: stored already (with these settings), or new
    (model: ``model``, else the name, since a config's hash covers its model, not its name)."""
    if name in BUILTIN_JUDGES:
        raise ConflictError(f"judge {name!r} is built in: import the verdicts under another name")
    row = latest_judge_config(session, name)
    if row is not None:
        if "spec" not in row.settings:  # stored before configs kept their spec
            raise ConflictError(f"judge {name!r} is stored already: give another --judge")
        stored = stored_spec(row)
        if not replays_only(stored.backend) or stored.jury is not None:
            raise ConflictError(
                f"judge {name!r} is stored with backend {stored.backend}, not {IMPORTED_BACKEND}: "
                "imported verdicts need a judge of their own (give another --judge)"
            )
        if stored.mode != mode:
            raise ConflictError(
                f"judge {name!r} holds {MODE_OF_KIND.get(stored.mode, stored.mode)} (mode "
                f"{stored.mode}); this file holds {MODE_OF_KIND[mode]} (mode {mode}): import "
                "them under another --judge"
            )
        if model is not None and model != stored.model:
            raise ConflictError(
                f"judge {name!r} is stored with model {stored.model!r}, not {model!r} (configs "
                "are never edited): give another --judge"
            )
        return stored, False
    try:
        spec = JudgeSpec(name=name, backend=IMPORTED_BACKEND, model=model or name, mode=mode)
    except ValidationError as err:
        raise ValidationFailed(f"--judge {name!r}: {describe_validation_error(err)}") from None
    return spec, True


@dataclass(eq=False)
class _Keyer:
    """Each line's judgment row, under the key the judge's mode gives its content."""

    session: Session
    spec: JudgeSpec
    judge_hash: str
    chosen: RubricVersion | None
    resolver: Resolver
    own: dict[int, RubricVersion] | None = None  # prompt -> its rubric version
    used: set[str] = field(default_factory=set)  # the versions the verdicts are keyed under

    def verdict(self, location: str, line: _Common) -> _Verdict:
        base: dict[str, Any] = {
            "reasoning": line.reasoning,
            "raw_output": line.raw,
            "attempts": 1,
            "criterion_id": None,
            "other_completion_id": None,
            "status": JudgmentStatus.OK,
            "error": None,
            "failure": None,
            "detail": {"imported_from": location},
        }
        if isinstance(line, _Pairwise):
            return self._pairwise(location, line, base)
        if isinstance(line, _Scalar):
            completion = self.resolver.completion(line.completion)
            plan = case_plan(self.spec, self.judge_hash, completion, self._version(completion))
            low, high = line.scale
            value = (line.score - low) / (high - low)
            base["detail"].update(score=line.score, scale=[low, high])
            row = {
                **base,
                "cache_key": plan.items[0].key,
                "completion_id": completion.id,
                "value": value,
                "verdict": f"{line.score:g}/{high:g}",
            }
            return _Verdict(location, row["cache_key"], line.item_name, value, row)
        assert isinstance(line, _Pointwise)
        return self._pointwise(location, line, base)

    def _pairwise(self, location: str, line: _Pairwise, base: dict[str, Any]) -> _Verdict:
        first = self.resolver.completion(line.first)
        second = self.resolver.completion(line.second)
        if second.prompt_id != first.prompt_id:
            raise ValidationFailed(
                f"a pairwise verdict compares two completions of one prompt: {line.first!r} "
                f"answers prompt {first.prompt_id}, {line.second!r} prompt {second.prompt_id}"
            )
        if second.content_hash == first.content_hash:
            raise ValidationFailed(
                f"a pairwise verdict compares two different completions: {line.first!r} and "
                f"{line.second!r} have the same text"
            )
        version = self._version(first)
        key = keys.pairwise_key(
            self.judge_hash,
            version.content_hash,
            first.prompt.content_hash,
            first.content_hash,
            second.content_hash,
        )
        row = {
            **base,
            "cache_key": key,
            "completion_id": first.id,
            "other_completion_id": second.id,
            "value": PAIRWISE_VALUES[line.verdict] if line.verdict is not None else None,
            "verdict": line.verdict,
        }
        if line.verdict is None:
            row["status"] = JudgmentStatus.FAILED
            row["failure"] = FailureClass.JUDGE.value
            row["error"] = (
                f"unparseable verdict: {line.raw}" if line.raw is not None else "no valid verdict"
            )
        return _Verdict(location, key, line.item_name, line.verdict, row)

    def _pointwise(self, location: str, line: _Pointwise, base: dict[str, Any]) -> _Verdict:
        completion = self.resolver.completion(line.completion)
        criterion = self.resolver.criterion(line.rubric, line.criterion)
        version = criterion.version
        owner = version.rubric.prompt_id
        if owner is not None and owner != completion.prompt_id:
            raise ValidationFailed(
                f"rubric {version.ref} is the rubric of prompt {owner}, not of prompt "
                f"{completion.prompt_id} of completion {line.completion!r}"
            )
        plan = case_plan(self.spec, self.judge_hash, completion, version)
        self.used.add(version.ref)
        key = plan.key_of.get(criterion.id)
        if key is None:
            raise ValidationFailed(
                f"criterion {criterion.position + 1} of {version.ref} is not decided by a judge "
                "for this completion (a check, a citation check, or a trajectory criterion on a "
                "completion without a trajectory)"
            )
        value = (1.0 if line.met else 0.0) if line.met is not None else float(line.value or 0.0)
        row = {
            **base,
            "cache_key": key,
            "completion_id": completion.id,
            "criterion_id": criterion.id,
            "value": value,
            "verdict": "yes" if value >= 0.5 else "no",
        }
        return _Verdict(location, key, line.item_name, value, row)

    def _version(self, completion: Completion) -> RubricVersion:
        """The version a pairwise or scalar verdict on ``completion`` is keyed under."""
        if self.chosen is not None:
            owner = self.chosen.rubric.prompt_id
            if owner is not None and owner != completion.prompt_id:
                raise ValidationFailed(
                    f"--rubric {self.chosen.ref} is the rubric of prompt {owner}, not of prompt "
                    f"{completion.prompt_id} of completion {completion.external_id!r}"
                )
            self.used.add(self.chosen.ref)
            return self.chosen
        if self.own is None:
            ids = sorted(c.id for c in self.resolver.completions.values())
            self.own, _ = own_rubric_versions(self.session, ids)
        version = self.own.get(completion.prompt_id)
        if version is None:
            raise ValidationFailed(
                f"the prompt of completion {completion.external_id!r} has no rubric to key the "
                "verdict under (pass --rubric NAME@N)"
            )
        self.used.add(version.ref)
        return version


def _shown(said: Said) -> str:
    if said is None:
        return "none (no valid verdict)"
    return repr(said) if isinstance(said, str) else f"{said:g}"


def _merge(session: Session, verdicts: list[_Verdict], report: VerdictImport) -> dict[str, _Held]:
    """Each content key's judgment: new, or stored and maybe given new items' verdicts; a
    verdict that contradicts what is held for its content (and item) is refused."""
    stored = judgments_by_key(session, {v.key for v in verdicts})
    held: dict[str, _Held] = {}
    for verdict in verdicts:
        report.verdicts += 1
        report.failed += verdict.row["status"] == JudgmentStatus.FAILED
        report.ok += verdict.row["status"] == JudgmentStatus.OK
        state = held.get(verdict.key)
        if state is None:
            known = stored.get(verdict.key)
            if known is None:
                held[verdict.key] = _new(verdict)
                report.added += 1
                report.judgments_added += 1
                continue
            state = held[verdict.key] = _from_stored(known, report.mode)
            report.judgments_already_stored += 1
        else:
            report.repeats += 1
        _take(state, verdict, report)
    report.judgments_extended = sum(
        1 for state in held.values() if state.stored is not None and state.new_items
    )
    return held


def _new(verdict: _Verdict) -> _Held:
    state = _Held(verdict.location, verdict.said, verdict.item is not None, row=verdict.row)
    if verdict.item is not None:
        state.by_item[verdict.item] = (verdict.said, verdict.location)
    return state


STORED = "the stored judgment"


def _from_stored(judgment: Judgment, mode: str) -> _Held:
    by_item = (judgment.detail or {}).get("by_item") or {}
    said: Said = judgment.verdict if get_mode(mode).judges_pairs else judgment.value
    if judgment.status != JudgmentStatus.OK:
        said = None
    state = _Held(STORED, said, bool(by_item), stored=judgment)
    state.by_item = {str(item): (value, STORED) for item, value in by_item.items()}
    return state


def _place(where: str) -> str:
    return where if where == STORED else f"line {_line(where)}"


def _take(state: _Held, verdict: _Verdict, report: VerdictImport) -> None:
    """One more verdict on content ``state`` holds: checked, and counted."""
    if state.tied != (verdict.item is not None):
        named, others = (
            (f"names item {verdict.item!r}", "name none")
            if verdict.item is not None
            else ("names no item", "name theirs")
        )
        raise ValidationFailed(
            f"{verdict.location}: this verdict {named}, but the verdicts on the same content at "
            f"{_place(state.where)} {others}: on one content (a pair in one order, a completion "
            "and criterion, a completion) name the item on every verdict or on none"
        )
    if verdict.item is None:
        if verdict.said != state.said:
            raise _contradiction(verdict, state.said, _place(state.where))
        report.already_stored += state.where == STORED
        return
    known = state.by_item.get(verdict.item)
    if known is not None:
        if known[0] != verdict.said:
            raise _contradiction(verdict, known[0], _place(known[1]))
        report.already_stored += known[1] == STORED
        return
    state.by_item[verdict.item] = (verdict.said, verdict.location)
    state.new_items = True
    report.added += 1
    report.conflicts += verdict.said != state.said


def _contradiction(verdict: _Verdict, other: Said, where: str) -> ConflictError:
    item = f" for item {verdict.item!r}" if verdict.item is not None else ""
    return ConflictError(
        f"{verdict.location}: the verdict {_shown(verdict.said)}{item} contradicts "
        f"{_shown(other)} at {where} (one verdict per content and item: name each record's item "
        "to keep several)"
    )
