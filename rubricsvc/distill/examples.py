"""What a student judge learns from: a teacher's verdicts, split by prompt, rendered exactly as
the student will be asked when it serves.

A target is one (completion, criterion) and the teacher's P(met): its probability when it gave
one (criterion-prob), else 1 or 0; a label set's target is the mean of its labellers' values.
The split is by prompt, so no held-out prompt is seen in training, however many completions
and criteria it has. Training prompts are rendered by the student's own verdict mode from the
stored rows (``scoring.scorer``), so the text trained on is the text judged later.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc import neutral
from rubricsvc.backends.types import Chat, ChoiceRequest
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.judging.modes.base import CallContext
from rubricsvc.models import (
    Completion,
    Criterion,
    CriterionKind,
    JudgeConfig,
    Judgment,
    JudgmentStatus,
    Label,
    LabelKind,
    LabelSet,
    RubricVersion,
)
from rubricsvc.scoring.scorer import case_plan, completion_view
from rubricsvc.validation.calibration import split_prompts

# The verdict tokens a criterion-prob student is asked for ("Answer with one word: Yes or No").
YES, NO = "Yes", "No"


@dataclass(frozen=True)
class Target:
    prompt_id: int
    completion_id: int
    criterion_id: int
    value: float  # the teacher's P(met), in [0, 1]


@dataclass(frozen=True)
class Source:
    """Where the targets came from, for the lineage: a judge's configs or a label set."""

    kind: str  # "judge" or "labels"
    name: str
    hashes: tuple[str, ...]  # the judge's config hashes, or the label set's content hash

    def lineage(self) -> dict[str, Any]:
        key = "config_hashes" if self.kind == "judge" else "content_hash"
        value: Any = list(self.hashes) if self.kind == "judge" else self.hashes[0]
        return {"kind": self.kind, "name": self.name, key: value}


@dataclass(frozen=True)
class Split:
    train: list[Target]
    test: list[Target]
    train_prompts: list[int]
    test_prompts: list[int]


def teacher_targets(session: Session, teacher: str) -> tuple[list[Target], Source]:
    """Every stored per-criterion verdict of the judge ``teacher`` (all its configs; the newest
    config's verdict where several judged the same item)."""
    configs = list(
        session.scalars(
            select(JudgeConfig).where(JudgeConfig.name == teacher).order_by(JudgeConfig.id)
        )
    )
    if not configs:
        raise NotFoundError(
            f"judge {teacher!r} has no stored judgments to learn from (no stored config of "
            "that name): score completions with it first, or pass --labels"
        )
    # A teacher's judgments each say whether one criterion is met (a holistic or comparing
    # judge's verdicts are not per criterion, so there is nothing per criterion to learn).
    teaching = modes_that(per_criterion=True)
    usable = [c for c in configs if c.verdict_mode in teaching]
    if not usable:
        raise ValidationFailed(
            f"judge {teacher!r} gives {configs[-1].verdict_mode} verdicts, not one per criterion: "
            f"a teacher judges criteria ({', '.join(teaching)})"
        )
    query = (
        select(Judgment.completion_id, Judgment.criterion_id, Judgment.value, Completion.prompt_id)
        .join(Completion, Completion.id == Judgment.completion_id)
        .where(
            Judgment.judge_config_id.in_([c.id for c in usable]),
            Judgment.status == JudgmentStatus.OK,
            Judgment.criterion_id.is_not(None),
            Judgment.other_completion_id.is_(None),
            Judgment.value.is_not(None),
        )
        .order_by(Judgment.judge_config_id, Judgment.id)
    )
    found: dict[tuple[int, int], Target] = {}
    for completion_id, criterion_id, value, prompt_id in session.execute(query):
        # The query keeps rows with a completion, a criterion and a value only.
        assert completion_id is not None and criterion_id is not None and value is not None
        found[(completion_id, criterion_id)] = Target(
            prompt_id, completion_id, criterion_id, float(value)
        )
    targets = _judged_criteria(session, list(found.values()))
    if not targets:
        raise ValidationFailed(
            f"judge {teacher!r} has no stored per-criterion judgments of yes/no criteria to "
            f"learn from: score completions with it first (rubricsvc score --judge {teacher})"
        )
    return targets, Source("judge", teacher, tuple(c.config_hash for c in usable))


def label_targets(session: Session, label_set: LabelSet) -> tuple[list[Target], Source]:
    """The pointwise labels of ``label_set``: each item's mean labeller value."""
    values: dict[tuple[int, int], list[float]] = defaultdict(list)
    prompts: dict[tuple[int, int], int] = {}
    query = select(Label).where(
        Label.label_set_id == label_set.id, Label.kind == LabelKind.POINTWISE
    )
    for label in session.scalars(query.order_by(Label.id)):
        assert label.criterion_id is not None  # pointwise labels name their criterion
        key = (label.completion_id, label.criterion_id)
        values[key].append(label.value)
        prompts[key] = label.prompt_id
    found = [Target(prompts[key], key[0], key[1], sum(vs) / len(vs)) for key, vs in values.items()]
    targets = _judged_criteria(session, found)
    if not targets:
        raise ValidationFailed(
            f"label set {label_set.name!r} has no pointwise labels of yes/no criteria to learn from"
        )
    return targets, Source("labels", label_set.name, (label_set.content_hash,))


def _judged_criteria(session: Session, targets: list[Target]) -> list[Target]:
    """The targets on yes/no criteria a judge decides (not checks, citation lists or ordinal
    scales, which a yes/no student does not learn), in a stable order."""
    ids = {t.criterion_id for t in targets}
    criteria = {c.id: c for c in session.scalars(select(Criterion).where(Criterion.id.in_(ids)))}
    kept = [
        t
        for t in targets
        if criteria[t.criterion_id].kind == CriterionKind.JUDGE
        and criteria[t.criterion_id].scale.get("type", "binary") == "binary"
    ]
    return sorted(kept, key=lambda t: (t.prompt_id, t.completion_id, t.criterion_id))


def parse_split(text: str) -> float:
    """The training share of ``--split prompt:0.8``."""
    kind, _, share = text.partition(":")
    try:
        value = float(share)
    except ValueError:
        value = None
    if kind != "prompt" or value is None:
        raise ValidationFailed(
            f"--split {text!r}: expected prompt:SHARE (the share of prompts trained on, e.g. "
            "prompt:0.8); the split is always by prompt"
        )
    if not 0.0 < value < 1.0:
        side = "test" if value >= 1.0 else "training"
        raise ValidationFailed(
            f"--split {text!r} leaves the {side} side empty: the share of prompts trained on is "
            "between 0 and 1"
        )
    return value


def split_by_prompt(targets: Sequence[Target], train_share: float, seed: int) -> Split:
    """Training and test targets, no prompt on both sides."""
    prompt_ids = sorted({t.prompt_id for t in targets})
    try:
        train_prompts, test_prompts = split_prompts(prompt_ids, 1.0 - train_share, seed)
    except ValueError as err:
        raise ValidationFailed(
            f"cannot split the targets by prompt: {err} (the test side would be empty)"
        ) from None
    held = set(test_prompts)
    return Split(
        [t for t in targets if t.prompt_id not in held],
        [t for t in targets if t.prompt_id in held],
        train_prompts,
        test_prompts,
    )


@dataclass(frozen=True)
class Example:
    """One training example: the student's prompt as token ids, and the target P(met)."""

    target: Target
    input_ids: list[int]


def render_examples(
    session: Session, spec: JudgeSpec, tokenizer: Any, targets: Sequence[Target]
) -> list[Example]:
    """Each target's prompt as ``spec``'s mode renders it for the criterion, encoded with the
    student's chat template (the neutralizing step included) ready for the verdict token."""
    return [
        Example(target, neutral.encode_chat(tokenizer, chat))
        for target, chat in render_chats(session, spec, targets)
    ]


def render_chats(
    session: Session, spec: JudgeSpec, targets: Sequence[Target]
) -> list[tuple[Target, Chat]]:
    """Each target with the chat ``spec``'s criterion-prob mode sends for it when it serves
    (template, mode wording and neutralized judged text), in the targets' order."""
    mode = get_mode(spec.mode)
    completions = _completions(session, [t.completion_id for t in targets])
    criteria = {
        c.id: c
        for c in session.scalars(
            select(Criterion).where(Criterion.id.in_({t.criterion_id for t in targets}))
        )
    }
    versions = {
        v.id: v
        for v in session.scalars(
            select(RubricVersion)
            .where(RubricVersion.id.in_({c.version_id for c in criteria.values()}))
            .options(selectinload(RubricVersion.criteria))
        )
    }
    judge_hash = spec.config_hash()
    by_case: dict[tuple[int, int], list[Target]] = defaultdict(list)
    for target in targets:
        by_case[(target.completion_id, criteria[target.criterion_id].version_id)].append(target)
    chats: dict[Target, Chat] = {}
    for (completion_id, version_id), case_targets in by_case.items():
        completion = completions[completion_id]
        plan = case_plan(spec, judge_hash, completion, versions[version_id])
        items = {item.key: item for item in plan.items}
        context = CallContext(spec, spec.prompt_template(), completion_view(completion))
        for target in case_targets:
            item = items[plan.key_of[target.criterion_id]]
            (call,) = mode.calls(context, [item])
            request = call.request
            assert isinstance(request, ChoiceRequest)  # a criterion-prob student
            chats[target] = request.chat
    return [(target, chats[target]) for target in targets]


def _completions(session: Session, ids: Sequence[int]) -> dict[int, Completion]:
    query = (
        select(Completion)
        .where(Completion.id.in_(set(ids)))
        .options(selectinload(Completion.prompt), selectinload(Completion.documents))
    )
    return {c.id: c for c in session.scalars(query)}


def snapshot_hash(session: Session, split: Split, spec: JudgeSpec) -> str:
    """The hash of the data a student is trained and tested on: every target by the content
    hashes of its prompt, completion and criterion, its side of the split, and what shapes the
    student's prompt (template, mode wording, neutralizing step)."""
    completions = _completions(session, [t.completion_id for t in split.train + split.test])
    ids = {t.criterion_id for t in split.train + split.test}
    criteria = {
        c.id: c.content_hash
        for c in session.scalars(select(Criterion).where(Criterion.id.in_(ids)))
    }

    def rows(side: str, targets: Sequence[Target]) -> list[list[Any]]:
        return sorted(
            [
                side,
                completions[t.completion_id].prompt.content_hash,
                completions[t.completion_id].content_hash,
                criteria[t.criterion_id],
                round(t.value, 6),
            ]
            for t in targets
        )

    settings = spec.hashed_settings()
    return content_hash(
        {
            "train": rows("train", split.train),
            "test": rows("test", split.test),
            "template_sha256": settings["template_sha256"],
            "mode": spec.mode,
            "mode_wording": settings["mode_wording"],
            "neutralizer": settings["neutralizer"],
        }
    )
