"""Reward requests that arrive together, judged together.

RL frameworks send one rollout per request, many at once, as each rollout finishes. A judge
engine's step costs about the same for one item as for a batch, so judging each request alone
leaves it mostly idle. A ``RewardCoalescer`` gathers the concurrent requests of one kind (the
same judge config, options and source) and hands them to the judge as one batch:

- The first request of a gathering leads it: it waits ``window`` seconds (or until
  ``max_items`` items have joined), then for the judge to be free (one batch per kind at a
  time in a process), taking everything that joined meanwhile. So the items that arrive while
  a batch is judged are the next batch, as a GPU engine batches continuously.
- Each request gets its own results and its own counts (``split_batch``); the batch's
  judgments are counted once, by the first request that named a completion.
- Errors stay per request: when the batch as a whole fails (an unknown prompt, a malformed
  trajectory in one request), each request is run again alone and gets its own outcome.

Modes that compare a completion with its peers (pairwise, group) are never coalesced: their
peers would depend on which requests happened to arrive together (``compares``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import get_mode
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest
from rubricsvc.scoring.service import JudgingTally

RunBatch = Callable[[list[RewardRequest]], RewardBatch]


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
    full: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class RewardCoalescer:
    """Gathers concurrent reward requests by kind and judges each gathering as one batch."""

    def __init__(self, window: float, max_items: int) -> None:
        if window < 0 or max_items < 1:
            raise ValueError("window must be >= 0 and max_items >= 1")
        self.window = window
        self.max_items = max_items
        self._guard = threading.Lock()
        self._open: dict[Hashable, _Gathering] = {}
        self._busy: dict[Hashable, threading.Lock] = {}

    @property
    def enabled(self) -> bool:
        return self.max_items > 1

    def submit(self, kind: Hashable, requests: list[RewardRequest], run: RunBatch) -> RewardBatch:
        """``requests`` judged with the others of ``kind`` that arrive with them; ``run``
        judges a list of requests as one batch (every caller of a kind passes an equivalent
        one). Raises what ``run`` raised for these requests alone."""
        entry = _Entry(list(requests))
        with self._guard:
            gathering = self._open.get(kind)
            leads = gathering is None or gathering.items + len(requests) > self.max_items
            if gathering is None or leads:
                gathering = _Gathering()
                self._open[kind] = gathering
            gathering.entries.append(entry)
            gathering.items += len(requests)
            if gathering.items >= self.max_items:
                gathering.full.set()
            busy = self._busy.setdefault(kind, threading.Lock())
        if leads:
            self._lead(kind, gathering, busy, run)
        else:
            gathering.done.wait()
        if entry.error is not None:
            raise entry.error
        if entry.batch is None:  # the leader was interrupted before judging
            raise RuntimeError("the reward batch this request joined was not judged")
        return entry.batch

    def _lead(
        self, kind: Hashable, gathering: _Gathering, busy: threading.Lock, run: RunBatch
    ) -> None:
        try:
            gathering.full.wait(self.window)
            with busy:
                with self._guard:
                    # Closed: later requests of this kind start the next gathering.
                    if self._open.get(kind) is gathering:
                        del self._open[kind]
                    entries = list(gathering.entries)
                _judge(entries, run)
        finally:
            gathering.done.set()


def _judge(entries: Sequence[_Entry], run: RunBatch) -> None:
    """Judge the entries as one batch; if that fails, each alone, so an error is its own."""
    if len(entries) > 1:
        try:
            batch = run([r for entry in entries for r in entry.requests])
        except Exception:  # one request's error: found again below, where it is that one's
            pass
        else:
            for entry, part in zip(
                entries, split_batch(batch, [len(e.requests) for e in entries]), strict=True
            ):
                entry.batch = part
            return
    for entry in entries:
        try:
            entry.batch = run(entry.requests)
        except Exception as err:
            entry.error = err


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
