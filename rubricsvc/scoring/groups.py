"""Reward groups: one prompt's rollouts, sent one per request, judged together.

Evolving rubrics (and a judge that compares a group's completions) need a prompt's whole
group at once, but RL frameworks such as OpenRLHF and verl's reward loop send one rollout
per request. ``GroupGatherer`` is the reward pipeline's gather stage for such calls: each
rollout is a row of ``reward_group_members`` (the database, not a process's memory, so
``serve --workers N`` processes share the groups and a group outlives a restart), and the
group is judged as one batch by whichever waiting caller first finds it complete:

- A group is the rollouts of one client (its API key: ``GroupPolicy.owner``) and one call
  (judge, options, source, evolution run) with one group id: the request's explicit one
  (verl's ``uid``) or its prompt's (OpenRLHF's label, a prompt id, else the prompt's hash).
  The oldest ``size`` unanswered members are a group; another key's rollouts never join it.
- A waiting caller only reads: its own rows, for their answers, and its group's rows, for
  whether the group is complete (or its time is up). Only then does it try to take the
  group, without waiting for anyone: the take, the judging, each member's answer and the
  evolution step are one transaction (``run(take)``: the pipeline calls ``take`` first in
  its transaction and ``record`` last). Its locks are the claim: PostgreSQL's row locks on
  the members (another taker skips locked rows), SQLite's one write lock (another taker
  finds the database busy and tries again at its next poll). A claim is thus kept exactly
  as long as its holder works, and given up by the database itself when the holder is gone
  (killed: its connection closes; its transaction, and whatever it judged, rolled back):
  the group is then taken by the next waiting caller and judged once. A slow judge never
  has its group judged twice, and nothing is written while a caller waits.
- The writes of a caller are few: its rollouts joining (once), its answers marked collected
  (once), a failed group's error; on SQLite each waits its turn behind the groups being
  judged (the writer is busy for the length of their model calls) rather than fail.
- A group that never fills is judged as it is once its oldest member has waited
  ``timeout`` seconds (``complete`` False: the current set, no evolution), and each of its
  answers says ``timed_out``. A group is the rollouts that came within ``timeout`` of its
  first: rollouts left by a client that stopped (a trainer restarted mid-step) are never
  judged in one group with those sent after it came back, which a policy has moved since.
- A retry is not a rollout. A framework that lost its connection after its rollout was
  stored (the server process it talked to was killed) sends the same request again; a
  request equal to a stored member of its group (same client, call, group and item) whose
  caller is gone (``group_callers``: its process no longer holds its lock) and which no
  caller has collected takes that member over: it waits for, or reads, that member's answer
  and joins no group. Two equal rollouts whose callers both wait are two members.
- Rows do not pile up: every ``timeout`` seconds (at most) a process joining rollouts deletes
  answered rows older than the stale-claim bound (their callers have read them, or are
  gone), and rows still unanswered a stale-claim bound past their time-out (nobody is left
  to wait for them: a waiting caller judges its group at its time-out). A caller whose rows
  were deleted meanwhile gets ``GroupGivenUp`` rather than waiting forever.

A request that judging alone would refuse (an unknown prompt, too much work) is refused
before it joins a group (``check``), so one bad rollout never holds up or fails its group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine, and_, delete, or_, select, update
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from rubricsvc import jsontext
from rubricsvc.backends.base import BackendError
from rubricsvc.db import session_scope
from rubricsvc.errors import RubricsvcError
from rubricsvc.models import RewardGroupMember
from rubricsvc.models.base import utcnow
from rubricsvc.prompts import prompt_hash
from rubricsvc.scoring.coalescing import CheckRequests, split_batch
from rubricsvc.scoring.group_callers import Callers
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest, RewardResult
from rubricsvc.scoring.scorer import JudgingTally

log = logging.getLogger(__name__)

COMPLETE, TIMED_OUT = "complete", "timed_out"
# Rows answered (or left unanswered past their time-out) this many group time-outs ago, by
# default, are spent: the sweep deletes them.
STALE_TIMEOUTS = 4
Written = TypeVar("Written")

# Records a judged group's answers, in the batch's transaction (its session, the batch).
RecordGroup = Callable[[Session, RewardBatch], None]


@dataclass(frozen=True)
class TakenGroup:
    """A group taken for judging in the judging transaction: its requests, whether it is
    complete, and what records its answers before that transaction commits."""

    requests: list[RewardRequest]
    complete: bool
    record: RecordGroup


# Takes a group, as the first statements of the judging transaction (``NotNow``: none).
TakeGroup = Callable[[Session], TakenGroup]
# Judges the group ``take`` gives it as one batch, in one transaction (None: did not try,
# the process's writer being busy: try again at the next poll).
RunGroup = Callable[[TakeGroup], RewardBatch | None]
ToThread = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class GroupPolicy:
    """How a call's rollouts are gathered: ``size`` per group, judged as they are after
    ``timeout`` seconds, the evolution run (None: none) that evolves on each complete
    group, and the client whose rollouts they are (``owner``: its API key; None: a caller
    without one). Rows spent ``stale_after`` seconds ago (None: four time-outs) are deleted;
    no part of the group's identity (``group_key`` reads the ``repr``)."""

    size: int
    timeout: float
    evolution: str | None = None
    owner: str | None = None
    stale_after: float | None = field(default=None, repr=False, compare=False)

    @property
    def stale_claim(self) -> timedelta:
        return timedelta(
            seconds=STALE_TIMEOUTS * self.timeout if self.stale_after is None else self.stale_after
        )


class GroupFailed(RubricsvcError):
    """The batch a gathered group was judged in failed as a whole, with an error other than
    its judge backend's (a backend's failure reaches every member as a ``BackendError``, so
    that a caller answers it as it would an ungrouped one: retry, or not)."""


class GroupGivenUp(GroupFailed):
    """A rollout's row was deleted before its group was judged: it waited past the
    stale-claim bound. Sending the rollout again may succeed."""


class NotNow(RubricsvcError):
    """No group to take now: none is complete or timed out, another caller holds it, or
    (SQLite) the database's writer is busy. The judging transaction is rolled back."""


class GroupGatherer:
    """Gathers a call's rollouts into groups in the database (see the module docstring).
    ``to_thread`` runs the blocking work (the API passes the threads its routes use);
    ``poll`` is how often a waiting caller looks at its rows."""

    def __init__(
        self,
        engine: Engine,
        to_thread: ToThread = asyncio.to_thread,
        poll: float = 0.05,
    ) -> None:
        self.engine = engine
        self.to_thread = to_thread
        self.poll = poll
        self.callers = Callers(engine)
        self._swept_at: float | None = None  # when this process last deleted spent rows

    def close(self) -> None:
        """Let go of this process's caller lock (a clean shutdown)."""
        self.callers.close()

    async def submit(
        self,
        kind: Hashable,
        policy: GroupPolicy,
        requests: list[RewardRequest],
        run: RunGroup,
        check: CheckRequests,
    ) -> RewardBatch:
        """This caller's part of the batches its requests' groups were judged in."""
        await self.to_thread(check, requests)
        keys = [group_key(kind, request) for request in requests]
        ids: list[int] = await self.to_thread(self._join, policy, requests, keys)
        while True:
            answers: dict[int, dict[str, Any] | None] = await self.to_thread(self._answers, ids)
            if len(answers) < len(ids):
                raise GroupGivenUp(
                    "this rollout's group was given up: it waited past the stale-claim bound "
                    "(RUBRICSVC_API_REWARD_GROUP_STALE_CLAIM_S) unjudged"
                )
            ready = [answer for i in ids if (answer := answers[i]) is not None]
            if len(ready) == len(ids):
                await self.to_thread(self._collect, ids, policy)
                return _assembled(ready)
            waiting = {key for key, i in zip(keys, ids, strict=True) if answers[i] is None}
            for key in sorted(waiting):
                try:
                    await self.to_thread(self._judge_ready, key, policy, run)
                except SQLAlchemyError as err:
                    # Trying to judge a group (or to answer its failure) met the database
                    # busy or gone: this caller's rows are as they were; it looks again.
                    log.warning("reward group %s not judged now: %s", key[:12], err)
            await asyncio.sleep(self.poll)

    # A caller's own writes: joining, collecting.

    def _join(
        self, policy: GroupPolicy, requests: list[RewardRequest], keys: list[str]
    ) -> list[int]:
        """Each request's row: a retry's (see the module docstring), else a new one."""
        mine = self.callers.token()

        def join(session: Session) -> list[int]:
            self._sweep(session, policy)
            ids: list[int] = []
            for request, key in zip(requests, keys, strict=True):
                found = self._retried(session, key, request, mine, taken=set(ids))
                if found is None:
                    row = RewardGroupMember(
                        group_key=key,
                        group_size=policy.size,
                        request=dataclasses.asdict(request),
                        created_at=utcnow(),
                        caller=mine,
                    )
                    session.add(row)
                    session.flush()
                    found = row.id
                ids.append(found)
            return ids

        return self._write(join, policy)

    def _retried(
        self, session: Session, key: str, request: RewardRequest, mine: int, taken: set[int]
    ) -> int | None:
        """The uncollected member of ``key`` equal to ``request`` whose caller is gone, taken
        over by this caller (None: there is none, ``request`` is a rollout of its own)."""
        wanted = _stored(dataclasses.asdict(request))
        rows = session.execute(
            select(RewardGroupMember.id, RewardGroupMember.caller, RewardGroupMember.request)
            .where(
                RewardGroupMember.group_key == key,
                RewardGroupMember.collected_at.is_(None),
                RewardGroupMember.caller.is_not(None),
                RewardGroupMember.caller != mine,
            )
            .order_by(RewardGroupMember.id)
        ).all()
        for row_id, caller, stored in rows:
            if row_id in taken or _stored(stored) != wanted:
                continue
            if self.callers.alive(session, caller):
                continue  # its caller waits for it: this is a second, equal rollout
            adopted = session.execute(
                update(RewardGroupMember)
                .where(RewardGroupMember.id == row_id, RewardGroupMember.caller == caller)
                .values(caller=mine)
                .execution_options(synchronize_session=False)
            )
            if adopted.rowcount == 1:  # type: ignore[attr-defined]
                return int(row_id)
        return None

    def _collect(self, ids: list[int], policy: GroupPolicy) -> None:
        """Mark ``ids`` collected: an equal request that comes later is a rollout of its own,
        never a retry of these. Where SQLite's writer stays busy past its busy timeout
        (judging other groups), the caller is answered at once and the mark is written on a
        thread of its own when the writer is free."""

        def mark(session: Session) -> None:
            session.execute(
                update(RewardGroupMember)
                .where(RewardGroupMember.id.in_(ids))
                .values(collected_at=utcnow())
                .execution_options(synchronize_session=False)
            )

        try:
            with session_scope(self.engine) as session:
                mark(session)
        except OperationalError as err:
            if not _busy(err):
                # The answers were stored and read: the caller gets them whatever the mark.
                log.warning("reward group rows %s not marked collected: %s", ids, err)
                return
            threading.Thread(target=self._write, args=(mark, policy), daemon=True).start()

    def _write(self, work: Callable[[Session], Written], policy: GroupPolicy) -> Written:
        """``work`` in a transaction of its own, tried again while SQLite's writer is busy
        judging other groups (each try waits its busy timeout), for up to the stale-claim
        bound: a caller waits its turn rather than be told the database is locked."""
        deadline = time.monotonic() + policy.stale_claim.total_seconds()
        while True:
            try:
                with session_scope(self.engine) as session:
                    return work(session)
            except OperationalError as err:
                if not _busy(err) or time.monotonic() > deadline:
                    raise
                time.sleep(self.poll)

    def _sweep(self, session: Session, policy: GroupPolicy) -> None:
        """Delete spent rows (see the module docstring), at most once per group time-out in
        this process: one statement over the table, not one per request. Rows a judging
        transaction holds (PostgreSQL's row locks) are skipped, not waited for."""
        now = time.monotonic()
        if self._swept_at is not None and now - self._swept_at < policy.timeout:
            return
        self._swept_at = now
        answered_before = utcnow() - policy.stale_claim
        # A waiting caller judges its group at the time-out at the latest: a row still
        # unanswered a stale-claim bound after that has no caller left (whatever the two
        # settings are), so no live caller's row is ever deleted.
        unanswered_before = answered_before - timedelta(seconds=policy.timeout)
        spent = (
            select(RewardGroupMember.id)
            .where(
                or_(
                    and_(
                        RewardGroupMember.answer.is_not(None),
                        RewardGroupMember.claimed_at < answered_before,
                    ),
                    and_(
                        RewardGroupMember.answer.is_(None),
                        RewardGroupMember.created_at < unanswered_before,
                    ),
                )
            )
            .with_for_update(skip_locked=True)
        )
        session.execute(
            delete(RewardGroupMember)
            .where(RewardGroupMember.id.in_(spent))
            .execution_options(synchronize_session=False)
        )

    def _answers(self, ids: list[int]) -> dict[int, dict[str, Any] | None]:
        """Each of ``ids`` still stored, with its answer (None: not yet answered)."""
        with session_scope(self.engine) as session:
            rows = session.execute(
                select(RewardGroupMember.id, RewardGroupMember.answer).where(
                    RewardGroupMember.id.in_(ids)
                )
            )
            return {row_id: answer for row_id, answer in rows}

    # Judging a group: read whether it is due, then take it in the judging transaction.

    def _judge_ready(self, key: str, policy: GroupPolicy, run: RunGroup) -> None:
        """Judge ``key``'s oldest unanswered group if it is complete or its time is up, and
        nobody else is judging it."""
        with session_scope(self.engine) as session:
            due = _due(session, key, policy, lock=False)
        if due is None:
            return
        token = str(uuid.uuid4())
        taken: list[int] = []

        def take(session: Session) -> TakenGroup:
            if self.engine.dialect.name == "sqlite":
                _take_sqlite_writer(session)
            group = _due(session, key, policy, lock=True)
            if group is None:
                raise NotNow(f"reward group {key[:12]} is not due, or is being judged")
            members, complete = group
            taken.extend(row_id for row_id, _ in members)
            requests = [RewardRequest(**request) for _, request in members]
            record = _Recorder(token, members, complete).record
            return TakenGroup(requests, complete, record)

        try:
            run(take)
        except NotNow:
            return
        except Exception as err:  # every member's caller gets the error, none waits forever
            self._fail(token, taken or [row_id for row_id, _ in due[0]], err, policy)

    def _fail(self, token: str, ids: list[int], err: Exception, policy: GroupPolicy) -> None:
        """Answer the members of a group whose judging failed (nothing of it was kept) with
        its error; members another caller is judging meanwhile, or has answered, are left
        to that caller's answer."""
        failed: dict[str, Any] = {"error": f"{type(err).__name__}: {err}"}
        if isinstance(err, BackendError):  # kept, so that each caller can retry or not
            failed["backend"] = {
                "retryable": err.retryable,
                "status": err.status,
                "retry_after": err.retry_after,
            }
        free = (
            select(RewardGroupMember.id)
            .where(RewardGroupMember.id.in_(ids), RewardGroupMember.answer.is_(None))
            .with_for_update(skip_locked=True)
        )

        def answer(session: Session) -> None:
            session.execute(
                update(RewardGroupMember)
                .where(RewardGroupMember.id.in_(free))
                .values(batch=token, claimed_at=utcnow(), answer=failed)
                .execution_options(synchronize_session=False)
            )

        self._write(answer, policy)


@dataclass(frozen=True)
class _Recorder:
    """Writes a judged group's answers, each member's part of the batch, in the judging
    transaction (which holds the members: nobody else can have answered them)."""

    token: str
    members: list[tuple[int, dict[str, Any]]]
    complete: bool

    def record(self, session: Session, batch: RewardBatch) -> None:
        status = COMPLETE if self.complete else TIMED_OUT
        for result in batch.results:
            result.group_status = status
        with_group_means(batch.results)
        parts = split_batch(batch, [1] * len(self.members))
        now = utcnow()
        for (row_id, _), part in zip(self.members, parts, strict=True):
            written = session.execute(
                update(RewardGroupMember)
                .where(RewardGroupMember.id == row_id, RewardGroupMember.answer.is_(None))
                .values(batch=self.token, claimed_at=now, answer=_part(part))
                .execution_options(synchronize_session=False)
            )
            if written.rowcount != 1:  # type: ignore[attr-defined]
                raise GroupFailed(f"reward group member {row_id} was answered meanwhile")


def with_group_means(results: Sequence[RewardResult]) -> None:
    """A masked member's stand-in is its group's mean: the rewards of the members judged
    with it, under the set they were judged with (not its prompt's history, which other
    sources and rubric versions wrote), so that it moves none of its group's advantages.
    A group with no reward at all keeps its prompt's mean: one value for every member."""
    rewards = [r.reward for r in results if r.reward is not None]
    if not rewards:
        return
    mean = sum(rewards) / len(rewards)
    for result in results:
        if result.reward is None:
            result.prompt_mean = mean


def _due(
    session: Session, key: str, policy: GroupPolicy, *, lock: bool
) -> tuple[list[tuple[int, dict[str, Any]]], bool] | None:
    """``key``'s oldest unanswered group, if complete or timed out, and whether complete.
    ``lock``: hold its rows (PostgreSQL; rows another transaction holds are skipped)."""
    query = (
        select(RewardGroupMember.id, RewardGroupMember.request, RewardGroupMember.created_at)
        .where(RewardGroupMember.group_key == key, RewardGroupMember.answer.is_(None))
        .order_by(RewardGroupMember.id)
        .limit(policy.size)
    )
    if lock:
        query = query.with_for_update(skip_locked=True)
    rows = session.execute(query).all()
    if not rows:
        return None
    # The group: what came within the time-out of its first rollout.
    oldest = min(_aware(created) for _, _, created in rows)
    window = timedelta(seconds=policy.timeout)
    rows = [row for row in rows if _aware(row[2]) - oldest <= window]
    complete = len(rows) >= policy.size
    if not complete and utcnow() - oldest < window:
        return None
    return [(row_id, request) for row_id, request, _ in rows], complete


def _take_sqlite_writer(session: Session) -> None:
    """Begin the judging transaction with SQLite's write lock, or ``NotNow`` at once where
    another connection holds it (a group being judged): a waiting caller never queues for
    the writer, it looks again at its next poll."""
    raw: Any = session.connection().connection.dbapi_connection
    before = raw.execute("PRAGMA busy_timeout").fetchone()[0]
    raw.execute("PRAGMA busy_timeout = 0")
    try:
        # Any write takes the lock; this one changes nothing.
        session.execute(
            update(RewardGroupMember)
            .where(RewardGroupMember.id == -1)
            .values(batch=None)
            .execution_options(synchronize_session=False)
        )
    except OperationalError as err:
        if not _busy(err):
            raise
        raise NotNow("the database's writer is busy") from None
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(before)}")


def _busy(err: OperationalError) -> bool:
    """Whether ``err`` is SQLite's writer being held by another connection."""
    return "database is locked" in str(err.orig)


def _stored(request: dict[str, Any]) -> Any:
    """A request as its row's JSON holds it, to compare a new request with stored ones."""
    return json.loads(jsontext.dumps(request))


def group_key(kind: Hashable, request: RewardRequest) -> str:
    """What makes rollouts one group, as one hash that every process computes alike: the
    call (its ``repr``: judge, options, source, group policy) and the group id."""
    if request.group is not None:
        group = f"group:{request.group}"
    elif request.prompt_id is not None:
        group = f"prompt:{request.prompt_id}"
    else:
        group = f"hash:{prompt_hash(request.messages())}"
    return hashlib.sha256(f"{kind!r}\n{group}".encode()).hexdigest()


def _aware(moment: Any) -> Any:
    # SQLite hands back naive datetimes; they were written in UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=utcnow().tzinfo)


def _part(batch: RewardBatch) -> dict[str, Any]:
    """One member's part of a judged batch, as its row stores it."""
    tally = {
        name: getattr(batch, name)
        for name in (
            "judgments",
            "computed",
            "cached",
            "failed",
            "backend_requests",
            "failures",
            "alarms",
            "unavailable",
            "retry_after",
        )
    }
    return {
        "judge": batch.judge,
        "judge_config_hash": batch.judge_config_hash,
        "aggregation": batch.aggregation,
        "result": dataclasses.asdict(batch.results[0]),
        "tally": tally,
    }


def _assembled(answers: list[dict[str, Any]]) -> RewardBatch:
    """A caller's batch from its members' answers, in its order."""
    for answer in answers:
        if "error" in answer:
            message = f"the group this rollout was gathered in failed: {answer['error']}"
            if "backend" in answer:
                raise BackendError(message, **answer["backend"])
            raise GroupFailed(message)
    first = answers[0]
    batch = RewardBatch(
        judge=first["judge"],
        judge_config_hash=first["judge_config_hash"],
        aggregation=first["aggregation"],
        results=[RewardResult(**answer["result"]) for answer in answers],
    )
    for answer, result in zip(answers, batch.results, strict=True):
        tally = JudgingTally(**answer["tally"])
        alarms = [a for a in tally.alarms if a not in batch.alarms]
        tally.alarms = alarms
        batch.add(tally)
        if result.completion_id is not None:
            batch.by_completion[result.completion_id] = tally
    return batch
