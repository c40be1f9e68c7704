"""An evolution run's rows: the run, each prompt's track (locked while a step runs), lookups,
and who may step a run.

All of the state is in the database, none in a process: any process that holds the run's
name (a trainer, an API worker, a Celery worker) reads the same current version, and two
that step the same prompt at once take turns on its track's row.

A run is stepped by one door (``RunDoor``): the reward API's gathered groups, or a training
run's in-process reward. A name used by both is refused, not kept apart: its steps would be
one numbering over two streams of rollouts judged by two judges, and ``rubricsvc rubrics
evolution show RUN`` could no longer say which run a name is. A served run's evolved versions
are drafts no person approved, so only a key allowed to create runs creates one (``review``
or ``admin``, or a key the operator names in ``RUBRICSVC_API_EVOLUTION_CREATORS``), and only
the keys the run names (its creator, those added with ``rubricsvc rubrics evolution keys``)
and ``admin`` keys are rewarded under it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.apikeys import Scope, allows
from rubricsvc.db import insert_for
from rubricsvc.errors import ConflictError, ForbiddenError, NotFoundError, ValidationFailed
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.models import EvolutionRun, EvolutionTrack, Prompt, RubricVersion, RunDoor
from rubricsvc.models.base import utcnow

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_run_name(name: str) -> str:
    if not RUN_NAME.match(name):
        raise ValidationFailed(
            f"evolution run name {name!r}: letters, digits, '.', '_' and '-', at most 100, "
            "starting with a letter or digit"
        )
    return name


def ensure_run(
    session: Session,
    name: str,
    settings: EvolutionSettings,
    door: RunDoor | None = None,
    creator: str | None = None,
) -> EvolutionRun:
    """The run named ``name``, created with ``settings`` (stepped by ``door``, created by the
    key named ``creator``) if new; a run started with other settings is refused (its history
    would mix two configurations), and so is one another door steps (module docstring)."""
    check_run_name(name)
    recorded = settings.recorded()
    # Read first: a run that exists is only checked, so naming it (every reward request of a
    # served run does) writes nothing and never waits on another transaction's lock.
    run = _find_run(session, name)
    if run is None:
        session.execute(
            insert_for(session, EvolutionRun)
            .values(
                name=name,
                settings=recorded,
                door=door,
                created_by=creator,
                key_names=[creator] if creator else [],
                created_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=[EvolutionRun.name])
        )
        run = _find_run(session, name)
        assert run is not None  # inserted above, or by a transaction that has committed
    if run.settings != recorded:
        changed = sorted(k for k in recorded if run.settings.get(k) != recorded[k])
        raise ConflictError(
            f"evolution run {name!r} was started with other settings ({', '.join(changed)}): "
            "give this configuration a run name of its own"
        )
    if door is not None and run.door != door:
        if run.door is not None:
            raise ConflictError(
                f"evolution run {name!r} is stepped by the {run.door.value} "
                f"({_DOORS[run.door]}); the {door.value} does not step it too: one run's steps "
                "are one numbering of one stream of groups. Give this one a run name of its own"
            )
        run.door = door  # a run stored before doors were recorded: the first door takes it
    return run


def _find_run(session: Session, name: str) -> EvolutionRun | None:
    return session.scalars(
        select(EvolutionRun)
        .where(EvolutionRun.name == name)
        .execution_options(populate_existing=True)
    ).first()


_DOORS = {
    RunDoor.SERVER: "the reward API's gathered groups",
    RunDoor.TRAINER: "a training run's in-process reward",
}


def served_run(
    session: Session,
    name: str,
    settings: EvolutionSettings,
    key: tuple[str, list[str]] | None,
    creators: Sequence[str] = (),
) -> EvolutionRun:
    """The served run ``name`` for the API key ``key`` (its name and scopes; None: a server
    that checks no key), created if new where the key may create runs; ``ForbiddenError``
    where it may not create it, or not use it (module docstring)."""
    check_run_name(name)
    exists = _find_run(session, name)
    if exists is None and key is not None and not may_create(key, creators):
        raise ForbiddenError(
            f"evolution run {name!r} does not exist, and key {key[0]!r} may not create one: "
            "a run rewards under evolved versions no person approved, so creating one needs "
            "the review scope (or admin), or the key's name in "
            "RUBRICSVC_API_EVOLUTION_CREATORS"
        )
    run = ensure_run(
        session, name, settings, RunDoor.SERVER, creator=key[0] if key is not None else None
    )
    if key is not None and not may_use(run, key):
        raise ForbiddenError(
            f"evolution run {name!r} is not open to key {key[0]!r}: its creator "
            f"({run.created_by or 'unrecorded'}) names the keys it rewards with "
            "`rubricsvc rubrics evolution keys`"
        )
    return run


def may_create(key: tuple[str, list[str]], creators: Sequence[str]) -> bool:
    name, scopes = key
    return allows(scopes, Scope.REVIEW) or name in creators


def may_use(run: EvolutionRun, key: tuple[str, list[str]]) -> bool:
    name, scopes = key
    return allows(scopes, Scope.ADMIN) or name == run.created_by or name in run.key_names


def name_keys(
    session: Session, name: str, add: Sequence[str] = (), remove: Sequence[str] = ()
) -> EvolutionRun:
    """Open the run ``name`` to the keys named in ``add`` and close it to those in ``remove``
    (its creator included); keys are named, not checked: one made later may be named first."""
    run = get_run(session, name)
    kept = [k for k in run.key_names if k not in remove]
    run.key_names = kept + [k for k in dict.fromkeys(add) if k not in kept]
    if run.created_by in remove:
        run.created_by = None
    session.flush()
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
