"""Rubric assignments: which shared rubrics a prompt's completions, or one completion, are
scored against besides their prompt's own rubrics.

An assignment names a rubric, not a version: scoring uses the rubric's newest usable
version, as it does for a prompt's own rubric. It is made by a ``rubric`` field in a
completions or prompts file, or by a tag rule::

    scenario:writing_advertisement -> autoj/writing_advertisement

which assigns the rubric to every prompt whose tag ``scenario`` is ``writing_advertisement``
(or a list holding it); ``KEY=VALUE`` is read the same way. A rule file holds one rule per
line; blank lines and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import insert, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from rubricsvc.batching import batches
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.fileformats import read_text
from rubricsvc.models import Completion, Prompt, Rubric, RubricAssignment


def assignable_rubric(session: Session, name: str) -> Rubric:
    """The rubric ``name`` names, for an assignment: a rubric name, not a version."""
    name = name.strip()
    if "@" in name:
        raise ValidationFailed(
            f"assign a rubric by name, not a version ({name!r}): scoring uses its newest "
            "usable version (`rubricsvc score --rubric NAME@N` scores with another)"
        )
    rubric = session.scalar(select(Rubric).where(Rubric.name == name))
    if rubric is None:
        raise NotFoundError(f"no rubric named {name!r}")
    return rubric


def assign(
    session: Session,
    rubric: Rubric,
    *,
    prompt: Prompt | None = None,
    completion: Completion | None = None,
) -> bool:
    """Assign ``rubric`` to the prompt or the completion; whether a new assignment was stored.

    A prompt's own rubric needs no assignment (nothing is stored); a rubric that belongs to
    another prompt cannot be assigned."""
    if completion is not None and prompt is None:
        owner, target = completion.prompt_id, RubricAssignment.completion_id == completion.id
    elif prompt is not None and completion is None:
        owner, target = prompt.id, RubricAssignment.prompt_id == prompt.id
    else:
        raise ValueError("give a prompt or a completion")
    if not _needs_assignment(rubric, owner):
        return False
    found = session.scalar(
        select(RubricAssignment.id).where(RubricAssignment.rubric_id == rubric.id, target)
    )
    if found is not None:
        return False
    session.add(
        RubricAssignment(
            rubric_id=rubric.id,
            prompt_id=prompt.id if prompt is not None else None,
            completion_id=completion.id if completion is not None else None,
        )
    )
    session.flush()
    return True


@dataclass(frozen=True)
class CompletionAssignment:
    """A rubric a record of a completions file names for its completion (``where``: the
    record, for an error)."""

    where: str
    rubric: Rubric
    completion_id: int
    prompt_id: int


def assign_to_completions(session: Session, wanted: Sequence[CompletionAssignment]) -> int:
    """``assign`` for many completions at once: the assignments already stored read a few
    hundred completions at a time, the new ones inserted together; how many were new. The
    first assignment at fault (a rubric of another prompt) is refused naming its record."""
    pairs: dict[tuple[int, int], None] = {}
    for item in wanted:
        try:
            needed = _needs_assignment(item.rubric, item.prompt_id)
        except ValidationFailed as err:
            raise ValidationFailed(f"{item.where}: rubric: {err}") from None
        if needed:
            pairs[(item.rubric.id, item.completion_id)] = None
    completion_ids = sorted({completion_id for _, completion_id in pairs})
    stored: set[tuple[int, int | None]] = set()
    for part in batches(completion_ids):
        query = select(RubricAssignment.rubric_id, RubricAssignment.completion_id).where(
            RubricAssignment.completion_id.in_(part)
        )
        stored.update(
            (rubric_id, completion_id) for rubric_id, completion_id in session.execute(query)
        )
    new = [
        {"rubric_id": rubric_id, "prompt_id": None, "completion_id": completion_id}
        for rubric_id, completion_id in pairs
        if (rubric_id, completion_id) not in stored
    ]
    if new:
        session.execute(insert(RubricAssignment), new)
    return len(new)


def _needs_assignment(rubric: Rubric, owner_prompt_id: int) -> bool:
    """Whether ``rubric`` must be assigned to reach the prompt ``owner_prompt_id`` (or one of
    its completions): not its own prompt's rubric; a rubric of another prompt is refused."""
    if rubric.prompt_id is None:
        return True
    if rubric.prompt_id == owner_prompt_id:
        return False
    raise ValidationFailed(
        f"rubric {rubric.name!r} belongs to prompt {rubric.prompt_id}: only a shared "
        "rubric (one with no prompt) can be assigned to other prompts"
    )


def assigned_rubrics(session: Session, completions: Sequence[Completion]) -> dict[int, set[int]]:
    """Completion id -> the ids of the rubrics assigned to it or to its prompt."""
    of_prompt = _assigned_by(
        session, RubricAssignment.prompt_id, {c.prompt_id for c in completions}
    )
    by_completion = _assigned_by(
        session, RubricAssignment.completion_id, {c.id for c in completions}
    )
    for completion in completions:
        by_completion[completion.id] |= of_prompt.get(completion.prompt_id, set())
    return dict(by_completion)


def completions_assigned_to(session: Session, rubric_id: int) -> list[int]:
    """Ids of the completions assigned ``rubric_id``, directly or through their prompt."""
    direct = select(RubricAssignment.completion_id).where(
        RubricAssignment.rubric_id == rubric_id, RubricAssignment.completion_id.is_not(None)
    )
    by_prompt = select(RubricAssignment.prompt_id).where(
        RubricAssignment.rubric_id == rubric_id, RubricAssignment.prompt_id.is_not(None)
    )
    query = (
        select(Completion.id)
        .where(or_(Completion.id.in_(direct), Completion.prompt_id.in_(by_prompt)))
        .order_by(Completion.id)
    )
    return list(session.scalars(query))


# --- tag rules ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TagRule:
    """Prompts whose tag ``key`` is ``value`` (or a list holding it) get ``rubric``."""

    key: str
    value: str
    rubric: str

    def __str__(self) -> str:
        return f"{self.key}:{self.value} -> {self.rubric}"

    def matches(self, tags: object) -> bool:
        if not isinstance(tags, dict) or self.key not in tags:
            return False
        found = tags[self.key]
        items = found if isinstance(found, list) else [found]
        return any((i if isinstance(i, str) else json.dumps(i)) == self.value for i in items)


def parse_rule(text: str, where: str = "--assign") -> TagRule:
    """``KEY:VALUE -> RUBRIC`` (or ``KEY=VALUE -> RUBRIC``); a one-line error if malformed."""
    left, arrow, rubric = text.partition("->")
    if not arrow or not rubric.strip():
        raise ValidationFailed(f"{where}: expected 'KEY:VALUE -> RUBRIC', got {text!r}")
    left = left.strip()
    sep = "=" if "=" in left else ":"
    key, found, value = left.partition(sep)
    if not found or not key.strip() or not value.strip():
        raise ValidationFailed(f"{where}: expected 'KEY:VALUE -> RUBRIC', got {text!r}")
    return TagRule(key.strip(), value.strip(), rubric.strip())


def load_rule_file(path: Path) -> list[TagRule]:
    """The rules of a rule file: one per line, ``#`` comments and blank lines skipped."""
    lines = read_text(path).splitlines()
    return [
        parse_rule(line, f"{path}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


@dataclass
class RuleReport:
    assigned: int = 0  # new assignments stored
    matched: int = 0  # prompts matched by some rule
    unmatched_rules: list[str] | None = None


def apply_rules(
    session: Session, rules: Sequence[TagRule], prompts: Iterable[Prompt] | None = None
) -> RuleReport:
    """Assign each rule's rubric to the matching prompts (``prompts``, else every stored one).
    Every rule's rubric is checked before anything is stored."""
    rubrics = {rule.rubric: assignable_rubric(session, rule.rubric) for rule in rules}
    report = RuleReport(unmatched_rules=[])
    pool = list(prompts) if prompts is not None else list(session.scalars(select(Prompt)))
    used: set[TagRule] = set()
    matched: set[int] = set()
    for prompt in pool:
        for rule in rules:
            if rule.matches(prompt.tags):
                used.add(rule)
                matched.add(prompt.id)
                report.assigned += assign(session, rubrics[rule.rubric], prompt=prompt)
    report.matched = len(matched)
    report.unmatched_rules = [str(rule) for rule in rules if rule not in used]
    return report


def _assigned_by(
    session: Session, column: InstrumentedAttribute[int | None], ids: set[int]
) -> defaultdict[int, set[int]]:
    """Id in ``column`` (a prompt's or a completion's) -> the rubric ids assigned to it."""
    assigned: defaultdict[int, set[int]] = defaultdict(set)
    for chunk in batches(sorted(ids)):
        rows = session.execute(select(column, RubricAssignment.rubric_id).where(column.in_(chunk)))
        for owner, rubric_id in rows:
            if owner is not None:
                assigned[owner].add(rubric_id)
    return assigned
