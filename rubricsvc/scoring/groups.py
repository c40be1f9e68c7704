"""Reward groups: one prompt's rollouts, sent one per request, judged together.

Evolving rubrics (and a judge that compares a group's completions) need a prompt's whole
group at once, but RL frameworks such as OpenRLHF and verl's reward loop send one rollout
per request. ``GroupGatherer`` is the reward pipeline's gather stage for such calls: each
rollout is a row of ``reward_group_members`` (the database, not a process's memory, so
``serve --workers N`` processes share the groups and a group outlives a restart), and the
group is judged as one batch by whichever waiting caller first finds it complete:

- A group is the rollouts of one call (judge, options, source, evolution run) with one
  group id: the request's explicit one (verl's ``uid``) or its prompt's (OpenRLHF's label,
  a prompt id, else the prompt's hash). The oldest ``size`` unclaimed members are a group.
- A caller claims a group by marking its rows with a batch token (only rows still unmarked:
  two processes never judge one member twice), judges it (``run(requests, complete)``) and
  writes each member's part of the batch on its row; every caller polls its own rows until
  they are answered.
- A group that never fills is judged as it is once its oldest member has waited
  ``timeout`` seconds (``complete`` False: the current set, no evolution), and each of its
  answers says ``timed_out``. A group is the rollouts that came within ``timeout`` of its
  first: rollouts left by a client that stopped (a trainer restarted mid-step) are never
  judged in one group with those sent after it came back, which a policy has moved since.
- Rows do not pile up: every ``timeout`` seconds (at most) a process joining rollouts deletes
  answered rows claimed more than the stale-claim bound ago (their callers have read them, or
  are gone), and rows still unclaimed a stale-claim bound past their time-out (nobody is left
  to wait for them: a waiting caller claims its group at its time-out). A caller whose rows
  were deleted meanwhile gets ``GroupFailed`` rather than waiting forever.
- Each member's answer is written in the judged batch's own transaction (``run`` calls its
  ``record`` inside it), so a group is judged and evolved exactly when its answers are
  stored. A claim still unanswered after ``stale_after`` seconds belongs to a process that
  died (or hung) while judging: a waiting caller of that group clears it and claims the group
  again. Whatever the dead claimer had done was rolled back with its transaction, so the
  group is judged (and evolves its prompt) once, by the reclaimer; a claimer that was only
  slow finds its token gone when it records, and its transaction is rolled back instead.

A request that judging alone would refuse (an unknown prompt, too much work) is refused
before it joins a group (``check``), so one bad rollout never holds up or fails its group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, and_, delete, or_, select, update
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError
from rubricsvc.db import session_scope
from rubricsvc.errors import RubricsvcError
from rubricsvc.models import RewardGroupMember
from rubricsvc.models.base import utcnow
from rubricsvc.prompts import prompt_hash
from rubricsvc.scoring.coalescing import CheckRequests, split_batch
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest, RewardResult
from rubricsvc.scoring.scorer import JudgingTally

COMPLETE, TIMED_OUT = "complete", "timed_out"
# A claim unanswered for this many group time-outs (by default) is a dead process's.
STALE_TIMEOUTS = 4

# Records a judged group's answers, in the batch's transaction (its session, the batch).
RecordGroup = Callable[[Session, RewardBatch], None]
# Judges a claimed group as one batch: (its requests, whether the group is complete, what
# records its answers before the batch's transaction commits).
RunGroup = Callable[[list[RewardRequest], bool, RecordGroup], RewardBatch]
ToThread = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class GroupPolicy:
    """How a call's rollouts are gathered: ``size`` per group, judged as they are after
    ``timeout`` seconds, and the evolution run (None: none) that evolves on each complete
    group. A claim unanswered after ``stale_after`` seconds (None: four time-outs) is taken
    over; no part of the group's identity (``group_key`` reads the ``repr``)."""

    size: int
    timeout: float
    evolution: str | None = None
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


class ClaimTakenOver(RubricsvcError):
    """A claim went stale and another caller took the group over: this judging of it is
    rolled back, the other's stands."""


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
        self._swept_at: float | None = None  # when this process last deleted spent rows

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
                return _assembled(ready)
            waiting = {key for key, i in zip(keys, ids, strict=True) if answers[i] is None}
            for key in sorted(waiting):
                await self.to_thread(self._judge_ready, key, policy, run)
            await asyncio.sleep(self.poll)

    def _join(
        self, policy: GroupPolicy, requests: list[RewardRequest], keys: list[str]
    ) -> list[int]:
        now = utcnow()
        rows = [
            RewardGroupMember(
                group_key=key,
                group_size=policy.size,
                request=dataclasses.asdict(request),
                created_at=now,
            )
            for key, request in zip(keys, requests, strict=True)
        ]
        with session_scope(self.engine) as session:
            self._sweep(session, policy)
            session.add_all(rows)
            session.flush()
            return [row.id for row in rows]

    def _sweep(self, session: Session, policy: GroupPolicy) -> None:
        """Delete spent rows (see the module docstring), at most once per group time-out in
        this process: one statement over the table, not one per request."""
        now = time.monotonic()
        if self._swept_at is not None and now - self._swept_at < policy.timeout:
            return
        self._swept_at = now
        answered_before = utcnow() - policy.stale_claim
        # A waiting caller claims its group at the time-out at the latest: a row still
        # unclaimed a stale-claim bound after that has no caller left (whatever the two
        # settings are), so no live caller's row is ever deleted.
        unclaimed_before = answered_before - timedelta(seconds=policy.timeout)
        session.execute(
            delete(RewardGroupMember)
            .where(
                or_(
                    and_(
                        RewardGroupMember.answer.is_not(None),
                        RewardGroupMember.claimed_at < answered_before,
                    ),
                    and_(
                        RewardGroupMember.batch.is_(None),
                        RewardGroupMember.created_at < unclaimed_before,
                    ),
                )
            )
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

    def _judge_ready(self, key: str, policy: GroupPolicy, run: RunGroup) -> None:
        """Judge ``key``'s oldest unclaimed group if it is complete or its time is up."""
        claimed = self._claim(key, policy)
        if claimed is None:
            return
        token, members, complete = claimed
        requests = [RewardRequest(**member) for _, member in members]
        status = COMPLETE if complete else TIMED_OUT

        def record(session: Session, batch: RewardBatch) -> None:
            for result in batch.results:
                result.group_status = status
            parts = split_batch(batch, [1] * len(members))
            answers = [(row_id, _part(p)) for (row_id, _), p in zip(members, parts, strict=True)]
            self._answer(session, token, answers)

        try:
            run(requests, complete, record)
        except ClaimTakenOver:
            return  # the caller that took the group over answers it
        except Exception as err:  # every member's caller gets the error, none waits forever
            failed: dict[str, Any] = {"error": f"{type(err).__name__}: {err}"}
            if isinstance(err, BackendError):  # kept, so that each caller can retry or not
                failed["backend"] = {
                    "retryable": err.retryable,
                    "status": err.status,
                    "retry_after": err.retry_after,
                }
            try:
                with session_scope(self.engine) as session:
                    self._answer(session, token, [(row_id, failed) for row_id, _ in members])
            except ClaimTakenOver:
                pass  # the caller that took the group over answers it

    def _claim(
        self, key: str, policy: GroupPolicy
    ) -> tuple[str, list[tuple[int, dict[str, Any]]], bool] | None:
        with session_scope(self.engine) as session:
            self._release_stale(session, key, policy)
            rows = session.execute(
                select(
                    RewardGroupMember.id, RewardGroupMember.request, RewardGroupMember.created_at
                )
                .where(RewardGroupMember.group_key == key, RewardGroupMember.batch.is_(None))
                .order_by(RewardGroupMember.id)
                .limit(policy.size)
            ).all()
            if not rows:
                return None
            # The group: what came within the time-out of its first rollout.
            oldest = min(_aware(created) for _, _, created in rows)
            window = timedelta(seconds=policy.timeout)
            rows = [row for row in rows if _aware(row[2]) - oldest <= window]
            complete = len(rows) >= policy.size
            if not complete and utcnow() - oldest < window:
                return None
            token = str(uuid.uuid4())
            ids = [row_id for row_id, _, _ in rows]
            # Only rows nobody claimed meanwhile: another process that got there first wins.
            marked = session.execute(
                update(RewardGroupMember)
                .where(RewardGroupMember.id.in_(ids), RewardGroupMember.batch.is_(None))
                .values(batch=token, claimed_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if marked.rowcount != len(ids):  # type: ignore[attr-defined]
                session.rollback()
                return None
            return token, [(row_id, request) for row_id, request, _ in rows], complete

    def _release_stale(self, session: Session, key: str, policy: GroupPolicy) -> None:
        """Unclaim ``key``'s members whose claim has gone unanswered past the bound: their
        claimer died or hung, and they would otherwise wait forever."""
        session.execute(
            update(RewardGroupMember)
            .where(
                RewardGroupMember.group_key == key,
                RewardGroupMember.batch.is_not(None),
                RewardGroupMember.answer.is_(None),
                RewardGroupMember.claimed_at < utcnow() - policy.stale_claim,
            )
            .values(batch=None, claimed_at=None)
            .execution_options(synchronize_session=False)
        )

    def _answer(
        self, session: Session, token: str, answers: Sequence[tuple[int, dict[str, Any]]]
    ) -> None:
        """Write each member's answer, only under this caller's claim: ``ClaimTakenOver``
        where a member's claim was taken over meanwhile."""
        for row_id, answer in answers:
            written = session.execute(
                update(RewardGroupMember)
                .where(RewardGroupMember.id == row_id, RewardGroupMember.batch == token)
                .values(answer=answer)
                .execution_options(synchronize_session=False)
            )
            if written.rowcount != 1:  # type: ignore[attr-defined]
                raise ClaimTakenOver(f"reward group member {row_id} was claimed again")


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
