"""New completions inserted as rows, many per statement, each given back its id.

Used where many completions are stored at once (``completions.add_completions``, a reward
batch's rollouts): ORM instances and a flush per row were most of their cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from rubricsvc.models import Completion


def insert_completions(session: Session, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert completions given as rows (a dict of column values by attribute name each) and
    return their ids, in order.

    Multi-row inserts returning each row's external id, prompt and text hash, by which its id
    is matched: an external id names one row; rows without one by their (prompt, text hash)
    where no other such row of the batch shares it. Not returned "in the rows' order"
    (``sort_by_parameter_order``): SQLite promises no order for the rows RETURNING gives, so
    SQLAlchemy sent it one statement per row. Rows it cannot tell apart (the same prompt and
    text, no external id) go in one at a time, between the runs of rows before and after
    them: the rows take their ids in order. Every row is new: an external id stored already
    is a conflict."""
    pairs = Counter((r["prompt_id"], r["content_hash"]) for r in rows if r["external_id"] is None)
    ids: list[int] = []
    run: list[dict[str, Any]] = []  # consecutive rows told apart, inserted together
    for row in rows:
        if row["external_id"] is not None or pairs[row["prompt_id"], row["content_hash"]] == 1:
            run.append(row)
            continue
        ids += _insert_together(session, run)
        run = []
        ids.append(session.execute(insert(Completion).returning(Completion.id), row).scalar_one())
    return ids + _insert_together(session, run)


def _insert_together(session: Session, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Rows each told apart by its external id, or by its (prompt, text hash) among the rows
    without one, inserted by multi-row statements; their ids in order."""
    if not rows:
        return []
    returned = session.execute(
        insert(Completion).returning(
            Completion.external_id, Completion.prompt_id, Completion.content_hash, Completion.id
        ),
        list(rows),
    )
    by_name: dict[str, int] = {}
    by_pair: dict[tuple[int, str], int] = {}
    for name, prompt_id, digest, id_ in returned:
        if name is not None:
            by_name[name] = id_
        else:
            by_pair[prompt_id, digest] = id_
    return [
        by_name[row["external_id"]]
        if row["external_id"] is not None
        else by_pair[row["prompt_id"], row["content_hash"]]
        for row in rows
    ]
