"""Reward requests that arrive together, judged together.

RL frameworks send one rollout per request, many at once, as each rollout finishes. A judge
engine's step costs about the same for one item as for a batch, so judging each request alone
leaves it mostly idle. A ``RewardCoalescer`` gathers the concurrent requests of one kind (the
same judge config, options and source) and hands them to the judge as one batch:

- The first request of a gathering leads it: it waits while others keep arriving (until
  none has for ``window`` seconds, ``max_items`` items have joined, or ``max_wait`` seconds
  have passed), then for the judge to be free (one batch per kind at a time in a process),
  taking everything that joined meanwhile. So the items that arrive while
  a batch is judged are the next batch, as a GPU engine batches continuously.
- Each request gets its own results and its own counts (``split_batch``); the batch's
  judgments are counted once, by the first request that named a completion.
- Errors stay per request: when the batch as a whole fails (an unknown prompt, a malformed
  trajectory in one request), each request is checked alone; those at fault get their own
  error and the others are judged together again.

Everything a request costs the database (its judge looked up, its work checked, its
completions stored) is done once per batch, by ``run``: what each request costs alone is only
its HTTP and its parsing. Modes that compare a completion with its peers (pairwise, group) are
never coalesced: their peers would depend on which requests happened to arrive together; a
``run`` that finds such a judge raises ``Ungatherable`` and each request is judged alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import get_mode
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest
from rubricsvc.scoring.scorer import JudgingTally

# Judges requests as one batch; ``gathered``: they are several callers' (see Ungatherable).
RunBatch = Callable[[list[RewardRequest], bool], RewardBatch]


# Raises what judging these requests alone would raise before judging (an unknown prompt, a
# malformed item, too much work): how a failed batch finds the requests that failed it.
CheckRequests = Callable[[list[RewardRequest]], object]


# Runs ``run(requests, gathered)`` on a worker thread, awaited on the event loop.
ToThread = Callable[[RunBatch, list[RewardRequest], bool], Awaitable[RewardBatch]]


class Ungatherable(Exception):
    """Raised by a ``RunBatch`` given several callers' requests that must be judged apart."""


class Gatherer(Protocol):
    """How the reward pipeline's gather stage puts callers' requests into the batches that
    are judged: each caller awaits ``submit`` with its requests and gets its own batch back.
    ``kind`` names what may be judged together (the judge config, its options, the source);
    ``run`` judges a list of requests as one batch, on the thread it is called on; ``check``
    raises what a request alone would raise before judging.

    Two gatherers today: ``JudgedAlone`` (each caller's requests one batch) and
    ``RewardCoalescer`` (concurrent callers of one kind, within a window). Gathering a whole
    group of one prompt's rollouts (evolving rubrics) is a third: it holds a prompt's
    rollouts until its group is complete, then hands them to ``run`` as one batch."""

    async def submit(
        self, kind: Hashable, requests: list[RewardRequest], run: RunBatch, check: CheckRequests
    ) -> RewardBatch: ...


class JudgedAlone:
    """No gathering: each caller's requests are one batch, judged on a worker thread by
    ``to_thread`` (``to_thread(function, *args)``; the API passes the one its routes' blocking
    work runs on, so a request judged alone waits for the same threads as before)."""

    def __init__(self, to_thread: ToThread = asyncio.to_thread) -> None:
        self.to_thread = to_thread

    async def submit(
        self, kind: Hashable, requests: list[RewardRequest], run: RunBatch, check: CheckRequests
    ) -> RewardBatch:
        return await self.to_thread(run, requests, False)


def compares(spec: JudgeSpec) -> bool:
    """Whether ``spec``'s scores depend on the other completions judged with them."""
    specs = spec.jury_members() if spec.jury is not None else [spec]
    return any(get_mode(member.mode).compares for member in specs)


@dataclass
class _Entry:
    """One caller's requests, and what it gets back."""

    requests: list[RewardRequest]
    batch: RewardBatch | None = None
    error: Exception | None = None


@dataclass
class _Gathering:
    entries: list[_Entry] = field(default_factory=list)
    items: int = 0
    full: asyncio.Event = field(default_factory=asyncio.Event)
    judged: asyncio.Task[None] | None = None
    last_arrival: float = 0.0  # the event loop's time when the latest entry joined


class RewardCoalescer:
    """Gathers concurrent reward requests by kind and judges each gathering as one batch.

    Used from one event loop (a server process's): callers await ``submit``; the judging
    itself (database, backend) runs on a worker thread, one batch per kind at a time.
    """

    def __init__(self, window: float, max_items: int, max_wait: float | None = None) -> None:
        max_wait = window if max_wait is None else max_wait
        if window < 0 or max_wait < window or max_items < 1:
            raise ValueError("need 0 <= window <= max_wait and max_items >= 1")
        self.window = window
        self.max_wait = max_wait
        self.max_items = max_items
        # By event loop and kind: asyncio's tasks and locks belong to one loop.
        self._open: dict[tuple[int, Hashable], _Gathering] = {}
        self._busy: dict[tuple[int, Hashable], asyncio.Lock] = {}

    async def _gather(self, gathering: _Gathering) -> None:
        """Wait while requests keep arriving: until none has for ``window`` seconds, the
        gathering is full, or ``max_wait`` seconds have passed. A lone request waits only
        ``window``; a burst (64 rollouts finishing together, each request parsed in turn) is
        gathered whole, and judged ``window`` after its last request joined (waiting out
        whole windows instead closed it up to two windows after)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while not gathering.full.is_set():
            wait = min(gathering.last_arrival + self.window, deadline) - loop.time()
            if wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gathering.full.wait(), wait)

    @property
    def enabled(self) -> bool:
        return self.max_items > 1

    async def submit(
        self,
        kind: Hashable,
        requests: list[RewardRequest],
        run: RunBatch,
        check: CheckRequests,
    ) -> RewardBatch:
        """``requests`` judged with the others of ``kind`` that arrive with them; ``run``
        judges a list of requests as one batch (every caller of a kind passes an equivalent
        one: a kind names the judge, its options and the source), ``check`` finds what is wrong
        with a request before it is judged. Raises what they raised for these requests alone."""
        entry = _Entry(list(requests))
        loop = asyncio.get_running_loop()
        key = (id(loop), kind)
        gathering = self._open.get(key)
        if gathering is None or gathering.items + len(requests) > self.max_items:
            gathering = _Gathering()
            self._open[key] = gathering
            # A task of its own: a caller that goes away (its client hung up) takes nothing
            # with it that the others wait for.
            gathering.judged = loop.create_task(self._lead(key, gathering, run, check))
        gathering.entries.append(entry)
        gathering.items += len(requests)
        gathering.last_arrival = loop.time()
        if gathering.items >= self.max_items:
            gathering.full.set()
        assert gathering.judged is not None
        await asyncio.shield(gathering.judged)
        if entry.error is not None:
            raise entry.error
        if entry.batch is None:
            raise RuntimeError("the reward batch this request joined was not judged")
        return entry.batch

    async def _lead(
        self,
        key: tuple[int, Hashable],
        gathering: _Gathering,
        run: RunBatch,
        check: CheckRequests,
    ) -> None:
        await self._gather(gathering)
        async with self._busy.setdefault(key, asyncio.Lock()):
            # Closed: later requests of this kind start the next gathering.
            if self._open.get(key) is gathering:
                del self._open[key]
            entries = list(gathering.entries)
            await asyncio.to_thread(_judge, entries, run, check)


def _judge(entries: Sequence[_Entry], run: RunBatch, check: CheckRequests) -> None:
    """Judge the entries as one batch. If that fails, each entry is checked alone: those that
    fail get their own error, the rest are judged together again (each alone as a last
    resort, and at once for a judge that must not gather)."""
    if len(entries) > 1:
        try:
            _together(entries, run)
            return
        except Ungatherable:
            pass
        except Exception:  # one request's error: found below, where it is that one's
            valid = []
            for entry in entries:
                try:
                    check(entry.requests)
                except Exception as err:
                    entry.error = err
                else:
                    valid.append(entry)
            entries = valid
            if len(entries) > 1:
                try:
                    _together(entries, run)
                    return
                except Exception:
                    pass
    for entry in entries:
        try:
            entry.batch = run(entry.requests, False)
        except Exception as err:
            entry.error = err


def _together(entries: Sequence[_Entry], run: RunBatch) -> None:
    batch = run([r for entry in entries for r in entry.requests], True)
    sizes = [len(e.requests) for e in entries]
    for entry, part in zip(entries, split_batch(batch, sizes), strict=True):
        entry.batch = part


def split_batch(batch: RewardBatch, sizes: Sequence[int]) -> list[RewardBatch]:
    """``batch``, judged for several callers' requests in order (``sizes`` items each), as
    each caller's batch: its results, and the counts of its completions. A completion named by
    an earlier caller too is counted there; here its judgments read as cached (which they
    were, for this caller: judged once for both), its failures as failures."""
    if sum(sizes) != len(batch.results):
        raise ValueError(f"{len(batch.results)} results for {sum(sizes)} requests")
    # Whether a failure is the judge being unavailable is known per batch, not per judgment:
    # a caller's failures read as unavailable only when every failure of the batch was.
    all_unavailable = batch.failed > 0 and batch.unavailable >= batch.failed
    counted: set[int] = set()
    parts = []
    start = 0
    for size in sizes:
        results = batch.results[start : start + size]
        start += size
        part = RewardBatch(
            judge=batch.judge,
            judge_config_hash=batch.judge_config_hash,
            aggregation=batch.aggregation,
            results=results,
            alarms=list(batch.alarms),
        )
        mine = dict.fromkeys(r.completion_id for r in results if r.completion_id is not None)
        for completion_id in mine:
            tally = batch.by_completion.get(completion_id, JudgingTally())
            if completion_id in counted:
                tally = JudgingTally(
                    judgments=tally.judgments,
                    cached=tally.cached + tally.computed,
                    failed=tally.failed,
                    failures=dict(tally.failures),
                )
            counted.add(completion_id)
            part.add(tally)
            part.by_completion[completion_id] = tally
        if all_unavailable:
            part.unavailable = part.failed
            part.retry_after = batch.retry_after
        parts.append(part)
    return parts
