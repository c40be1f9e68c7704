"""The reward pipeline: (prompt, completion) pairs in, one reward (or None) each out.

Every caller that computes rewards runs these stages, in this order (each a method of
``RewardPipeline``):

1. ``normalize``: at most ``bounds.max_reward_items`` items (``TooManyItems``); each completion
   without the policy's end tokens (``rewards.without_end_tokens``). The input policy
   (``rubricsvc.inputpolicy``) is held by the door that read the text, where its whole form
   is still known (the API checks the raw JSON body before it is parsed).
2. ``resolve_judge`` and ``bound``: the judge by name (a judge its promotion gate has not
   approved refused, ``judge_configs.find_reward_judge``) once the process can keep its model
   (``JudgeCannotBeKept``); the batch's work, as the judge's mode plans it, within the
   bounds (``admission.TooMuchWork``). ``admit`` does both for one caller's requests alone,
   reading only; for a call that gathers groups, also ``bound_group``: a group of its size
   like these rollouts, projected, within the judgment bound (``field`` ``group_size``); an
   evolution run's group under its current set and the most it may grow
   (``GroupEvolution.growth``).
3. ``gather``: the requests put into the batch they are judged in by the pipeline's
   ``Gatherer`` (``scoring.coalescing``): alone, or with other callers' concurrent requests of
   the same kind within the coalescing window. A call with a ``GroupPolicy`` is gathered by
   the ``GroupGatherer`` instead (``scoring.groups``): its prompt's whole group of rollouts,
   sent one per request, held in the database until complete (or timed out).
4. ``store``: each completion stored once per (prompt, text, trajectory, documents) and
   source, or reused (``rewards.store_rewarded``).
5. ``judge``: every rubric's run planned, the batch's work bounded (stage 2's ``bound``),
   then judged (``rewards.judge_stored``).
   A gathered group of an evolution run is routed first to each prompt's current evolved
   version (``GroupEvolution.route``).
6. ``aggregate`` and ``answer``: each masked reward's stand-ins (its prompt's and the
   judge's means; in a gathered group, its group's mean); a complete group of an evolution
   run then evolves its prompt's set by one step in the same transaction
   (``GroupEvolution.evolve``; not where the judge was unavailable for every item: that
   answer changes no rubric); then what the caller asked back: ``JudgeUnavailable`` where
   no item got a reward because the judge was unavailable, a number for every item where a
   trainer needs one (``fill_masked``).

Stages 4 to 6's reads and writes are one transaction. Callers differ only in how they call
it: the API (``api.state``) passes its HTTP bounds, end tokens, the coalescing window and its
metrics, and awaits ``serve``; the trainer's in-process scorer passes none of them and runs
the stages on its own thread (``score``). Errors are the pipeline's own (``RewardRefusal``,
``TooMuchWork``) or the library's; the API makes its HTTP errors of them at its edge.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from math import ceil
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from rubricsvc.backends.kept import TooManyBackends
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.db import session_scope
from rubricsvc.errors import RubricsvcError, ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.prompts import prompt_hash
from rubricsvc.scoring.admission import TooMuchWork, bound_work
from rubricsvc.scoring.coalescing import Gatherer, JudgedAlone, Ungatherable, compares
from rubricsvc.scoring.groups import GroupGatherer, GroupPolicy, TakeGroup
from rubricsvc.scoring.judge_configs import find_reward_judge
from rubricsvc.scoring.rewards import (
    MaskedReward,
    RewardBatch,
    RewardRequest,
    RewardResult,
    add_prompt_means,
    fill_masked_by_prompt,
    judge_stored,
    parse_masked,
    store_rewarded,
    without_end_tokens,
)
from rubricsvc.scoring.scorer import ScoreOptions, Workload
from rubricsvc.scoring.workload import reward_work

# What a caller of the pipeline needs of it, so that it imports the pipeline alone.
__all__ = [
    "BadMaskedValue",
    "Bounds",
    "GroupEvolution",
    "GroupPolicy",
    "GroupsNotGathered",
    "JudgeCannotBeKept",
    "JudgeUnavailable",
    "MaskedReward",
    "RewardAnswer",
    "RewardBatch",
    "RewardBounds",
    "RewardCall",
    "RewardPipeline",
    "RewardRefusal",
    "RewardRequest",
    "RewardResult",
    "TooManyItems",
    "TooMuchWork",
    "masked_policy",
]


class RewardRefusal(RubricsvcError):
    """A reward request the pipeline refuses, or cannot answer."""


class TooManyItems(RewardRefusal):
    """More items in one request than ``RewardBounds.max_reward_items``."""

    def __init__(self, count: int, bound: int) -> None:
        super().__init__(f"{count} items: at most {bound} per request")
        self.count = count
        self.bound = bound


class JudgeCannotBeKept(RewardRefusal):
    """The judge's model (a jury member's) would pass the process's bound on models kept."""


class JudgeUnavailable(RewardRefusal):
    """No item got a reward because every failed judgment failed on the judge being
    unreachable, overloaded or rate-limited (a failure that may pass): come back after
    ``retry_after`` seconds (None: the judge named no delay)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BadMaskedValue(RewardRefusal):
    """A masked reward's value that is neither ``mean`` nor a finite number."""


class GroupsNotGathered(RewardRefusal):
    """A call that asks for groups (or an evolution run) the pipeline cannot serve."""


class GroupEvolution(Protocol):
    """What evolving rubrics does in the pipeline (``rubricsvc.evolution.served``): scoring
    knows no evolution, the door that has one passes it. Both run in the batch's transaction."""

    def growth(self, session: Session, run: str, requests: list[RewardRequest]) -> int:
        """The criteria per rollout a group of these routed requests may be judged with
        beyond its current set (evolved ones still to come, new ones its step judges)."""
        ...

    def route(
        self, session: Session, run: str, requests: list[RewardRequest]
    ) -> list[RewardRequest]:
        """Each request aimed at its prompt's current version in ``run``."""
        ...

    def evolve(
        self,
        session: Session,
        run: str,
        spec: JudgeSpec,
        requests: list[RewardRequest],
        batch: RewardBatch,
    ) -> None:
        """The judged group's prompt(s) evolved by one step."""
        ...


class RewardBounds(Protocol):
    """What one call may ask for (None: no bound), read at each call: items, judgments as
    the judge's mode plans them, the evidence cost of citation checks. The API passes its
    settings (``RUBRICSVC_API_MAX_REWARD_*``)."""

    @property
    def max_reward_items(self) -> int | None: ...

    @property
    def max_reward_judgments(self) -> int | None: ...

    @property
    def max_reward_evidence(self) -> int | None: ...


@dataclass(frozen=True)
class Bounds:
    """``RewardBounds`` given one by one (by default none: a trainer's own scorer)."""

    max_reward_items: int | None = None
    max_reward_judgments: int | None = None
    max_reward_evidence: int | None = None


@dataclass(frozen=True)
class RewardCall:
    """What is judged: the judge (in ``mode``, None: its own), the score options, whether
    draft rubrics count, and the source the completions are stored under. Calls that are equal
    may be judged as one batch."""

    judge: str
    mode: str | None
    options: ScoreOptions
    include_drafts: bool
    source: str
    group: GroupPolicy | None = None  # gather each prompt's group first (``scoring.groups``)


@dataclass
class RewardAnswer:
    """A call's batch (each item's result, in order, and the batch's counts) and, where the
    caller asked for a number for every item, those numbers."""

    batch: RewardBatch
    filled: list[float] | None = None


def masked_policy(given: str | None, default: MaskedReward) -> MaskedReward:
    """The value a masked reward is sent as: ``given`` (``mean`` or a finite number, as text),
    or ``default`` when not given; ``BadMaskedValue`` otherwise."""
    if given is None:
        return default
    try:
        return parse_masked(given)
    except ValidationFailed as err:
        raise BadMaskedValue(str(err)) from None


@dataclass
class RewardPipeline:
    """The stages of one process's rewards (see the module's docstring), with what its callers
    pass: ``judges`` (the process's models, kept), ``bounds``, ``end_tokens``, ``options`` (the
    score options a call starts from: ``call``), the ``gatherer`` (None: each call's requests
    are one batch) and ``judged``, told of every batch judged (once, however many calls it
    served). ``groups`` gathers calls with a group policy, ``evolution`` evolves their
    complete groups (None: such calls are refused)."""

    engine: Engine
    judges: BackendProvider
    bounds: RewardBounds = Bounds()
    end_tokens: Sequence[str] = ()
    options: ScoreOptions = field(default_factory=ScoreOptions)
    gatherer: Gatherer = field(default_factory=JudgedAlone)
    judged: Callable[[RewardBatch], None] | None = None
    groups: GroupGatherer | None = None
    evolution: GroupEvolution | None = None
    # On SQLite, one lock per judge around a whole batch's transaction: holding it before the
    # write transaction starts keeps SQLite's single writer from timing out behind a long
    # judge call. PostgreSQL takes concurrent batches (a model still runs one at a time).
    _writers: dict[str, threading.Lock] = field(default_factory=dict, init=False)
    _writers_guard: threading.Lock = field(default_factory=threading.Lock, init=False)

    def call(
        self,
        judge: str,
        mode: str | None,
        *,
        aggregation: str,
        min_coverage: float,
        include_drafts: bool,
        source: str,
        group: GroupPolicy | None = None,
    ) -> RewardCall:
        """A call under this pipeline's score options, with the aggregation and coverage floor
        the caller asked for, gathered by ``group`` where given."""
        options = replace(self.options, aggregation=aggregation, min_coverage=min_coverage)
        return RewardCall(judge, mode, options, include_drafts, source, group)

    # The callers' entries: every stage in order.

    async def serve(
        self,
        call: RewardCall,
        requests: Sequence[RewardRequest],
        *,
        refuse_unavailable: bool = False,
        fill_masked: MaskedReward | None = None,
    ) -> RewardAnswer:
        """``requests`` rewarded, gathered with other callers' as the gatherer decides (for a
        caller on an event loop: the judging itself runs on a worker thread).
        ``refuse_unavailable``: raise ``JudgeUnavailable`` rather than answer no reward at
        all; ``fill_masked``: answer a number for every item too (``answer``)."""
        normalized = self.normalize(requests)
        batch = await self.gather(call, normalized)
        return self.answer(requests, batch, refuse_unavailable, fill_masked)

    def score(
        self,
        call: RewardCall,
        requests: Sequence[RewardRequest],
        *,
        refuse_unavailable: bool = False,
        fill_masked: MaskedReward | None = None,
    ) -> RewardAnswer:
        """``serve`` on this thread, with nothing gathered: the caller's requests are the
        batch (a trainer's scorer, which is handed a step's rollouts together)."""
        normalized = self.normalize(requests)
        batch = self.judge_batch(call, normalized, gathered=False)
        return self.answer(requests, batch, refuse_unavailable, fill_masked)

    # 1. Normalize.

    def normalize(self, requests: Sequence[RewardRequest]) -> list[RewardRequest]:
        """``requests`` within the item bound, each completion without its end tokens: the
        policy's end-of-turn tokens are no part of its response, so the same text with or
        without them is one completion, one reward."""
        bound = self.bounds.max_reward_items
        if bound is not None and len(requests) > bound:
            raise TooManyItems(len(requests), bound)
        if not self.end_tokens:
            return list(requests)
        return without_end_tokens(requests, self.end_tokens)

    # 2. Resolve the judge and admit the work.

    def resolve_judge(self, call: RewardCall) -> JudgeSpec:
        """The call's judge, once its model (every member's, for a jury) can be kept."""
        with session_scope(self.engine) as session:
            spec = find_reward_judge(session, call.judge, call.mode)
            for one in spec.jury_members() or [spec]:  # a jury is judged by each member
                try:
                    self.judges.check(one)
                except TooManyBackends as err:
                    raise JudgeCannotBeKept(str(err)) from None
        return spec

    def bound(self, work: Workload, completions: int) -> None:
        """``TooMuchWork`` where a batch's planned work passes the bounds."""
        bound_work(
            work,
            max_judgments=_unbounded(self.bounds.max_reward_judgments),
            max_evidence=_unbounded(self.bounds.max_reward_evidence),
            what=f"completions: {completions}",
            advice="per reward request; send smaller batches",
            field="items",
        )

    def admit(self, call: RewardCall, requests: list[RewardRequest]) -> JudgeSpec:
        """Stage 2 for one caller's requests alone, reading only: what judging them would
        refuse before any judge call (an unknown prompt, a malformed item, a judge that
        cannot be kept, too much work). How a gathered batch that failed finds the callers
        at fault (``Gatherer``'s ``check``)."""
        spec = self.resolve_judge(call)
        run = call.group.evolution if call.group is not None else None
        new = 0
        with session_scope(self.engine) as session:
            if run is not None and self.evolution is not None:
                # Planned under the set the group is judged under, evolved criteria included,
                # and the most it may still grow: never refused once it has waited.
                requests = self.evolution.route(session, run, requests)
                # Each criterion is judged by each member of a jury.
                members = len(spec.jury_members()) or 1
                new = self.evolution.growth(session, run, requests) * members
            work = reward_work(
                session,
                spec,
                requests,
                source=call.source,
                include_drafts=call.include_drafts,
            )
        self.bound(work, len(requests))
        if call.group is not None:
            self.bound_group(work, len(requests), call.group.size, new_criteria=new)
        return spec

    def bound_group(self, work: Workload, rollouts: int, size: int, new_criteria: int = 0) -> None:
        """``TooMuchWork`` where a group of ``size`` rollouts like these ``rollouts`` would plan
        more judgments than a reward request may: refused before the rollouts wait for their
        group, not when it is judged. The projection is this caller's judgments per rollout
        times the size, plus ``new_criteria`` judged over the group when it evolves; the
        judged group is bounded again, in judgments and evidence, as any batch is. For an
        evolution run, ``new_criteria`` holds the evolved criteria the set may still gain as
        well (``GroupEvolution.growth``): the set grows to ``max_active`` at most."""
        bound = self.bounds.max_reward_judgments
        if bound is None or (size <= rollouts and not new_criteria):
            return
        # A group holds the oldest ``size`` rollouts waiting, so rollouts beyond ``size`` in
        # one request are judged in later groups, each of ``size``: project one of them.
        projected = ceil(work.total * size / rollouts) + new_criteria * size
        if projected > bound:
            raise TooMuchWork(
                f"{projected} judgments planned for a group of {size} rollouts like the "
                f"{rollouts} sent ({work.total} judgments"
                + (
                    f", and up to {new_criteria} evolved criteria over the group"
                    if new_criteria
                    else ""
                )
                + f"): at most {bound} per reward request, and a group is judged as one; lower "
                "group_size"
                + (" (or the evolution's max_active and max_new)" if new_criteria else ""),
                figure="judgments",
                total=projected,
                bound=bound,
                field="group_size",
            )

    # 3. Gather.

    async def gather(self, call: RewardCall, requests: list[RewardRequest]) -> RewardBatch:
        """This caller's part of the batch its requests were judged in. Equal calls may be
        judged together; what is gathered, and for how long, is the gatherer's."""
        kind: Hashable = call
        check = partial(self.admit, call)
        if call.group is not None:
            if self.groups is None:
                raise GroupsNotGathered("this server does not gather reward groups")
            if call.group.evolution is not None and self.evolution is None:
                raise GroupsNotGathered(
                    "this server has no evolution settings (RUBRICSVC_API_EVOLUTION): it "
                    "cannot evolve rubrics"
                )
            judge_group = partial(self.judge_group, call)
            return await self.groups.submit(kind, call.group, requests, judge_group, check)
        run = partial(self.judge_batch, call)
        return await self.gatherer.submit(kind, requests, run, check)

    # 4-6. Store, judge and aggregate: one transaction per batch.

    def judge_batch(
        self, call: RewardCall, requests: list[RewardRequest], gathered: bool
    ) -> RewardBatch:
        """``requests`` as one batch (``gathered``: several callers', which a judge that
        compares completions refuses: ``Ungatherable``), stored, judged and aggregated; the
        transaction keeps nothing of a batch refused or failed."""
        spec = self.resolve_judge(call)
        if gathered and compares(spec):
            raise Ungatherable(f"judge {spec.name!r} compares completions")
        with self._writer(call.judge), session_scope(self.engine) as session:
            completion_ids = self.store(session, call, requests)
            batch = self.judge(session, spec, call, requests, completion_ids)
            self.aggregate(session, batch)
        if self.judged is not None:
            self.judged(batch)
        return batch

    def judge_group(self, call: RewardCall, take: TakeGroup) -> RewardBatch | None:
        """The group ``take`` gives as one batch (a judge that compares completions compares
        the group's): taken, routed to its evolution run's current set, stored, judged,
        aggregated, when complete evolved, and its answers recorded, in one transaction,
        whose locks are the group's claim (``scoring.groups``). A group that timed out is
        judged under the current set and evolves nothing. None: this process writes another
        batch of the judge on SQLite; its caller tries again rather than queue for it."""
        assert call.group is not None
        run = call.group.evolution
        spec = self.resolve_judge(call)
        writer = self._writer_lock(call.judge)
        if writer is not None and not writer.acquire(blocking=False):
            return None
        try:
            with session_scope(self.engine) as session:
                taken = take(session)
                requests = taken.requests
                if run is not None:
                    assert self.evolution is not None
                    requests = self.evolution.route(session, run, requests)
                completion_ids = self.store(session, call, requests)
                batch = self.judge(session, spec, call, requests, completion_ids)
                self.aggregate(session, batch)
                # A group the judge failed whole is answered 503 or masked: it changes no
                # rubric.
                if run is not None and taken.complete and judge_unavailable(batch) is None:
                    assert self.evolution is not None
                    self.evolution.evolve(session, run, spec, requests, batch)
                taken.record(session, batch)
        finally:
            if writer is not None:
                writer.release()
        if self.judged is not None:
            self.judged(batch)
        return batch

    def store(self, session: Session, call: RewardCall, requests: list[RewardRequest]) -> list[int]:
        """Each request's completion id, stored or reused under its prompt."""
        return store_rewarded(session, requests, call.source)

    def judge(
        self,
        session: Session,
        spec: JudgeSpec,
        call: RewardCall,
        requests: list[RewardRequest],
        completion_ids: list[int],
    ) -> RewardBatch:
        """Each request's result: the batch planned, bounded as a whole before any judge call
        (when a gathered batch is refused, each caller's requests are admitted alone), and
        judged with the process's kept models."""
        bounds = self.bounds
        unbounded = bounds.max_reward_judgments is None and bounds.max_reward_evidence is None
        return judge_stored(
            session,
            spec,
            requests,
            completion_ids,
            call.options,
            self.judges.factory,
            include_drafts=call.include_drafts,
            admit=None if unbounded else partial(self._bound_batch, len(requests)),
        )

    def _bound_batch(self, completions: int, work: Workload) -> None:
        self.bound(work, completions)

    def aggregate(self, session: Session, batch: RewardBatch) -> None:
        """Each masked result's stand-ins: its prompt's mean so far under the judge, else the
        judge's mean (``rewards.add_prompt_means``)."""
        add_prompt_means(session, batch)

    # 6. Answer.

    def answer(
        self,
        requests: Sequence[RewardRequest],
        batch: RewardBatch,
        refuse_unavailable: bool,
        fill_masked: MaskedReward | None,
    ) -> RewardAnswer:
        """What the caller asked back (see ``serve``)."""
        if refuse_unavailable:
            unavailable = judge_unavailable(batch)
            if unavailable is not None:
                raise unavailable
        if fill_masked is None:
            return RewardAnswer(batch)
        return RewardAnswer(batch, filled_rewards(requests, batch, fill_masked))

    def _writer(self, judge: str) -> AbstractContextManager[object]:
        lock = self._writer_lock(judge)
        return nullcontext() if lock is None else lock

    def _writer_lock(self, judge: str) -> threading.Lock | None:
        if self.engine.dialect.name != "sqlite":
            return None
        with self._writers_guard:
            return self._writers.setdefault(judge, threading.Lock())


def judge_unavailable(batch: RewardBatch) -> JudgeUnavailable | None:
    """``JudgeUnavailable`` when no item got a reward because the judge was unreachable,
    overloaded or rate-limited (every failed judgment gave up on a failure that may pass): a
    client should come back later rather than train on nothing."""
    if not batch.failed or batch.unavailable < batch.failed:
        return None
    if any(result.reward is not None for result in batch.results):
        return None
    errors = (c.get("error") for r in batch.results for c in r.criteria if c.get("error"))
    first = next(errors, None) or next((m for r in batch.results for m in r.reasons), "")
    return JudgeUnavailable(
        f"the judge failed on every item ({batch.failed} judgment(s)): {first}",
        batch.retry_after,
    )


def filled_rewards(
    requests: Sequence[RewardRequest], batch: RewardBatch, masked: MaskedReward
) -> list[float]:
    """A number for every item, for a trainer that needs one (OpenRLHF): a masked reward is
    ``masked``, or with ``mean`` the mean of its prompt's other rewards in the request; one
    rollout of a prompt alone (as OpenRLHF sends them) has none, and its prompt's stored mean
    stands in (for a rollout judged in a gathered group: its group's mean)
    (``rewards.fill_masked_by_prompt``). Never a refusal."""
    keys = [r.prompt_id if r.prompt_id is not None else prompt_hash(r.messages()) for r in requests]
    stored = {
        r.completion_id: r.prompt_mean
        for r in batch.results
        if r.completion_id is not None and r.prompt_mean is not None
    }
    return fill_masked_by_prompt(batch.results, keys, masked, stored)


def _unbounded(bound: int | None) -> int:
    """A bound that is not set, as one no work passes."""
    return bound if bound is not None else 2**63 - 1
