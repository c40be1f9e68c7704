"""What the label-set importers share: their report, and pairwise verdicts of imported judges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.importers.common import ImportReport
from rubricsvc.models import JudgmentStatus
from rubricsvc.scoring.store import judgments_by_key, save_judgments
from rubricsvc.validation.labelsets import LabelSetReport


@dataclass
class JudgeTally:
    """The verdicts of one imported judge: one per record, one stored judgment per content."""

    judge: str
    records: int = 0  # verdicts read, one per record
    ok: int = 0  # records whose verdict parsed
    failed: int = 0  # records whose verdict did not parse (stored as failed judgments)
    added: int = 0  # judgments stored by this import
    unchanged: int = 0  # judgments already stored (the same key)
    repeats: int = 0  # records with the content of an earlier record: its judgment holds them
    conflicts: int = 0  # of those, records whose verdict differs from the one kept


@dataclass
class LabelImport:
    """What a label-set import stored: items (prompts, completions...), labels, judgments."""

    report: ImportReport
    label_set: LabelSetReport
    judges: list[JudgeTally] = field(default_factory=list)


def store_imported_judgments(
    session: Session, rows: list[dict[str, Any]], tally: JudgeTally
) -> None:
    """Store judgments not stored yet (one per key: the caller merged repeats); a stored
    judgment is kept as it is, whatever this import says."""
    stored = judgments_by_key(session, (row["cache_key"] for row in rows))
    new = [row for row in rows if row["cache_key"] not in stored]
    for row in rows:
        known = stored.get(row["cache_key"])
        if known is not None and not _same(known.status, known.value, row):
            tally.conflicts += 1
    tally.added += len(new)
    tally.unchanged += len(rows) - len(new)
    save_judgments(session, new)


def _same(status: JudgmentStatus, value: float | None, row: dict[str, Any]) -> bool:
    return bool(status == row["status"] and value == row["value"])
