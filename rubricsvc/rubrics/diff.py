"""Differences between two rubric versions, criterion by criterion.

Criteria are matched by their normalized text: a reworded criterion shows as one
removed and one added, a re-weighted one as a change of fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rubricsvc.models import Criterion, RubricVersion

COMPARED_FIELDS = (
    "weight",
    "category",
    "theme",
    "kind",
    "scale",
    "check",
    "required",
    "explanation",
    "tags",
)


@dataclass
class CriterionChange:
    text: str
    changes: dict[str, tuple[Any, Any]]


@dataclass
class RubricDiff:
    old: str
    new: str
    added: list[Criterion] = field(default_factory=list)
    removed: list[Criterion] = field(default_factory=list)
    changed: list[CriterionChange] = field(default_factory=list)
    reordered: bool = False
    title: tuple[str | None, str | None] | None = None

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.reordered or self.title)

    def to_dict(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "added": [_brief(c) for c in self.added],
            "removed": [_brief(c) for c in self.removed],
            "changed": [
                {
                    "text": c.text,
                    "changes": {k: {"old": o, "new": n} for k, (o, n) in c.changes.items()},
                }
                for c in self.changed
            ],
            "reordered": self.reordered,
            "title": None if self.title is None else {"old": self.title[0], "new": self.title[1]},
        }


def _key(criterion: Criterion) -> str:
    return " ".join(criterion.text.lower().split())


def _brief(criterion: Criterion) -> dict[str, Any]:
    return {
        "text": criterion.text,
        "weight": criterion.weight,
        "category": criterion.category.value,
    }


def _value(criterion: Criterion, name: str) -> Any:
    value = getattr(criterion, name)
    return value.value if hasattr(value, "value") else value


def diff_versions(old: RubricVersion, new: RubricVersion) -> RubricDiff:
    result = RubricDiff(old=old.ref, new=new.ref)
    if old.title != new.title:
        result.title = (old.title, new.title)
    old_by_key = {_key(c): c for c in old.criteria}
    new_by_key = {_key(c): c for c in new.criteria}
    result.removed = [c for k, c in old_by_key.items() if k not in new_by_key]
    result.added = [c for k, c in new_by_key.items() if k not in old_by_key]
    for key, before in old_by_key.items():
        after = new_by_key.get(key)
        if after is None:
            continue
        changes = {
            name: (_value(before, name), _value(after, name))
            for name in COMPARED_FIELDS
            if _value(before, name) != _value(after, name)
        }
        if before.text != after.text:
            changes["text"] = (before.text, after.text)
        if changes:
            result.changed.append(CriterionChange(after.text, changes))
    common_old = [k for k in old_by_key if k in new_by_key]
    common_new = [k for k in new_by_key if k in old_by_key]
    result.reordered = common_old != common_new
    return result
