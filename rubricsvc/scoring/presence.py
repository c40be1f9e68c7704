"""Which judges the running workers serve, kept in the database (it works on any broker).

A worker announces itself with the judges whose queues it consumes when it starts, refreshes
``seen_at`` every heartbeat interval, and removes its row when it shuts down cleanly; a worker
that was killed or cut off simply stops refreshing. A worker counts as live while its row is
younger than the jobs' heartbeat timeout, the bound after which its chunks are reclaimed too.

``jobs.progress`` reads this to say that a job waits for a worker of its judge, rather than
showing it as merely pending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from rubricsvc.db import insert_for
from rubricsvc.models import WorkerPresence
from rubricsvc.models.base import utcnow


@dataclass(frozen=True)
class Presence:
    name: str
    host: str
    judges: list[str]
    started_at: str
    seen_at: str
    live: bool


def announce(session: Session, name: str, host: str, judges: Sequence[str]) -> None:
    """Record (or refresh) worker ``name`` on ``host`` serving ``judges``."""
    now = utcnow()
    refreshed = session.execute(
        update(WorkerPresence)
        .where(WorkerPresence.name == name)
        .values(seen_at=now, judges=list(judges), host=host),
        execution_options={"synchronize_session": False},
    )
    if refreshed.rowcount:  # type: ignore[attr-defined]
        return
    session.execute(
        insert_for(session, WorkerPresence)
        .values(name=name, host=host, judges=list(judges), started_at=now, seen_at=now)
        .on_conflict_do_nothing(index_elements=["name"])
    )


def leave(session: Session, name: str) -> None:
    """Forget worker ``name`` (a clean shutdown)."""
    session.execute(delete(WorkerPresence).where(WorkerPresence.name == name))


def workers(session: Session, timeout: float, now: datetime | None = None) -> list[Presence]:
    """Every recorded worker, newest first, each with whether it is live."""
    since = (now or utcnow()) - timedelta(seconds=timeout)
    rows = session.scalars(select(WorkerPresence).order_by(WorkerPresence.seen_at.desc()))
    return [
        Presence(
            row.name,
            row.host,
            list(row.judges),
            row.started_at.isoformat(),
            row.seen_at.isoformat(),
            _aware(row.seen_at) >= since,
        )
        for row in rows
    ]


def serving(session: Session, judge: str, timeout: float) -> tuple[int, str | None]:
    """Live workers serving ``judge``, and when one was last seen (live or not), if ever."""
    found = [w for w in workers(session, timeout) if judge in w.judges]
    return sum(1 for w in found if w.live), (found[0].seen_at if found else None)


def live_judges(session: Session, timeout: float, now: datetime | None = None) -> set[str]:
    """The judges at least one live worker serves."""
    return {judge for w in workers(session, timeout, now) if w.live for judge in w.judges}


# How long the row of a worker that stopped without leaving (killed, cut off) is listed as
# lost before the reaper forgets it: long enough to read what happened, not forever (every
# worker process start is a row of its own).
KEPT_AFTER_LOST_SECONDS = 86_400.0


def forget_stale(session: Session, older_than: float = KEPT_AFTER_LOST_SECONDS) -> int:
    """Delete rows not refreshed for ``older_than`` seconds (workers long gone)."""
    result = session.execute(
        delete(WorkerPresence).where(
            WorkerPresence.seen_at < utcnow() - timedelta(seconds=older_than)
        )
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back: they were stored in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
