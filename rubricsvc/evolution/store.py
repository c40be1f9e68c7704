"""An evolution run's rows: the run, each prompt's track (locked while a step runs), lookups.

All of the state is in the database, none in a process: any process that holds the run's
name (a trainer, an API worker, a Celery worker) reads the same current version, and two
that step the same prompt at once take turns on its track's row.
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.db import insert_for
from rubricsvc.errors import ConflictError, NotFoundError, ValidationFailed
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.models import EvolutionRun, EvolutionTrack, Prompt, RubricVersion
from rubricsvc.models.base import utcnow

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_run_name(name: str) -> str:
    if not RUN_NAME.match(name):
        raise ValidationFailed(
            f"evolution run name {name!r}: letters, digits, '.', '_' and '-', at most 100, "
            "starting with a letter or digit"
        )
    return name


def ensure_run(session: Session, name: str, settings: EvolutionSettings) -> EvolutionRun:
    """The run named ``name``, created with ``settings`` if new; a run started with other
    settings is refused (its history would mix two configurations)."""
    check_run_name(name)
    recorded = settings.recorded()
    session.execute(
        insert_for(session, EvolutionRun)
        .values(name=name, settings=recorded, created_at=utcnow())
        .on_conflict_do_nothing(index_elements=[EvolutionRun.name])
    )
    run = session.scalars(select(EvolutionRun).where(EvolutionRun.name == name)).one()
    if run.settings != recorded:
        changed = sorted(k for k in recorded if run.settings.get(k) != recorded[k])
        raise ConflictError(
            f"evolution run {name!r} was started with other settings ({', '.join(changed)}): "
            "give this configuration a run name of its own"
        )
    return run


def get_run(session: Session, name: str) -> EvolutionRun:
    run = session.scalars(select(EvolutionRun).where(EvolutionRun.name == name)).first()
    if run is None:
        raise NotFoundError(f"no evolution run named {name!r}")
    return run


def locked_track(
    session: Session, run: EvolutionRun, prompt: Prompt, persistent: RubricVersion
) -> EvolutionTrack:
    """The prompt's track in ``run``, created at ``persistent`` if new, its row locked until
    the transaction ends (PostgreSQL; SQLite has one writer at a time)."""
    now = utcnow()
    session.execute(
        insert_for(session, EvolutionTrack)
        .values(
            run_id=run.id,
            prompt_id=prompt.id,
            persistent_version_id=persistent.id,
            current_version_id=persistent.id,
            generator_calls=0,
            generator_failures=0,
            updated_at=now,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=[EvolutionTrack.run_id, EvolutionTrack.prompt_id])
    )
    track = session.scalars(
        select(EvolutionTrack)
        .where(EvolutionTrack.run_id == run.id, EvolutionTrack.prompt_id == prompt.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    if track.persistent_version_id != persistent.id:
        raise ConflictError(
            f"evolution run {run.name!r} grows prompt {prompt.external_id or prompt.id} from "
            f"{track.persistent_version.ref}, not from {persistent.ref}"
        )
    return track


def find_track(session: Session, run: str, prompt_id: int) -> EvolutionTrack | None:
    return session.scalars(
        select(EvolutionTrack)
        .join(EvolutionRun, EvolutionTrack.run_id == EvolutionRun.id)
        .where(EvolutionRun.name == run, EvolutionTrack.prompt_id == prompt_id)
    ).first()


def current_version(
    session: Session, run: str, prompt: Prompt, persistent: RubricVersion
) -> RubricVersion:
    """The version a reward of ``prompt`` in ``run`` is computed under now: the track's
    current evolved version, or ``persistent`` before the prompt's first evolution."""
    track = find_track(session, run, prompt.id)
    if track is None:
        return persistent
    if track.persistent_version_id != persistent.id:
        raise ConflictError(
            f"evolution run {run!r} grows prompt {prompt.external_id or prompt.id} from "
            f"{track.persistent_version.ref}, not from {persistent.ref}"
        )
    return track.current_version


def evolved_rubric_name(run: str, prompt: Prompt) -> str:
    """The rubric an evolution run's versions of one prompt are saved under. It has no prompt
    of its own (the track links it), so it never competes with the prompt's own rubrics when
    scoring picks a prompt's usable rubric: it is scored only when named."""
    return f"evolved/{run}/prompt-{prompt.id}"
