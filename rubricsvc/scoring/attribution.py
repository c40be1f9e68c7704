"""Who caused a failed judge call: the response, or the judge? A control call decides.

A judge reply that cannot be read (no verdict line, invalid JSON, a refusal), a verdict whose
probability mass falls below the floor, a request the server refuses as malformed (400,
413, 422) or an in-process backend refuses, or a call the backend raises on when sent on its
own (a batch it raises on is halved until the calls that raise alone are found:
``CallExecutor._split``) may be the judge's own fault, or something the judged text provoked. Masking the
latter would let a policy escape a low reward by breaking its judge, so once such a call has
failed after its retries it is sent once more with the judged text replaced by a fixed neutral
text, the canary:

- the canary call gives a verdict: without this response the judge answers, so the response
  caused the failure (class ``response``: charged the worst value);
- the canary call fails too: the judge fails on this question whatever it is shown (class
  ``judge`` or ``infrastructure`` as before: masked, counted, alarmed on);
- the canary call is not answered (a transport error): nothing can be said, masked.

Comparisons (pairwise, group) show several responses in one call. The canary replaces all of
them; when it parses, each response is tried alone among canaries, and those the judge fails on
are the culprits (all of them when none fails alone: they broke it together). A group is then
judged once more with only its culprits replaced, so the rest of the group is still scored.

A canary's outcome depends only on the request it sends, so it is kept per request (per judge
configuration, template, criterion and prompt): one extra call per failure at most, and none for
the same question asked again, as the responses of one prompt's group ask it. It is kept for a
few minutes only: a judge that starts failing on everything (an overloaded server cutting its
replies short) must not have its new failures charged to responses on the strength of a canary
that parsed before. A crash's canary is never read from the cache: a backend that has started
raising on everything would otherwise charge every response at once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rubricsvc.backends.base import BackendCrash, BackendError
from rubricsvc.backends.types import ChoiceResult, Generation
from rubricsvc.hashing import content_hash
from rubricsvc.judging.failures import FailureClass
from rubricsvc.judging.modes import Call, CompletionView, Item
from rubricsvc.judging.verdicts import Verdict, VerdictParseError

# What the judge is shown in place of the judged text. Plain, on topic for no prompt in
# particular, and short: a judge that cannot give a verdict on it cannot give one at all.
CANARY_RESPONSE = "Thank you for the question. Here is my answer, in a few plain sentences."
# Bumped whenever the canary's text or the way it is placed changes (stored with each
# attribution, so a judgment's class can be read back with what decided it).
CANARY_VERSION = 1
# Server answers that say "this request is malformed": the judged text may be why.
REQUEST_REFUSED_STATUSES = frozenset({400, 413, 422})
# Canary outcomes kept per process (each entry is a hash and a flag), and for how long.
CACHE_ENTRIES = 20_000
CACHE_SECONDS = 300.0


def needs_attribution(cls: FailureClass, error: BackendError | None) -> bool:
    """Whether a call that failed for good may have failed because of what it showed: the
    judge's reply was unreadable, the backend refused the request itself (a server's 400,
    413 or 422, or an in-process refusal, which has no status), or the backend raised on it
    alone (``BackendCrash``)."""
    if cls is FailureClass.JUDGE:
        return True
    if cls is not FailureClass.INFRASTRUCTURE or error is None:
        return False
    if isinstance(error, BackendCrash):
        return True
    return not error.retryable and (
        error.status is None or error.status in REQUEST_REFUSED_STATUSES
    )


def fresh_canary(error: BackendError | None) -> bool:
    """Whether this failure's canary must be asked now rather than read from the cache: a
    backend that has started raising on everything must not have its crashes charged to
    responses on the strength of a canary that was answered minutes ago."""
    return isinstance(error, BackendCrash)


def canary_completion(completion: CompletionView) -> CompletionView:
    """``completion`` with its response (and trajectory, when it has one) replaced."""
    trajectory = completion.trajectory
    if trajectory is not None:
        trajectory = ({"role": "assistant", "content": CANARY_RESPONSE},)
    return dataclasses.replace(completion, response=CANARY_RESPONSE, trajectory=trajectory)


def canary_items(items: Sequence[Item], keep: frozenset[str] = frozenset()) -> list[Item]:
    """``items`` with the judged text they carry replaced: a cited claim, the responses of a
    comparison (but those whose hash is in ``keep``)."""
    replaced = []
    for item in items:
        if item.citation is not None:
            item = dataclasses.replace(
                item, citation=dataclasses.replace(item.citation, claim=CANARY_RESPONSE)
            )
        if item.responses:
            shown = tuple(
                r if r.response_hash in keep else dataclasses.replace(r, response=CANARY_RESPONSE)
                for r in item.responses
            )
            item = dataclasses.replace(item, responses=shown)
        replaced.append(item)
    return replaced


@dataclass
class Probe:
    """One control question: the calls that ask it, and what came back."""

    calls: list[Call]
    parsed: bool | None = None  # None: not answered (transport), nothing to conclude
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return content_hash([_request_fields(call.request) for call in self.calls])


def _request_fields(request: Any) -> Any:
    return dataclasses.asdict(request)


class CanaryCache:
    """Canary outcomes by judge configuration and request, bounded, shared by the process's
    executors (threads of a reward server ask at once)."""

    def __init__(
        self,
        entries: int = CACHE_ENTRIES,
        seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries = entries
        self._seconds = seconds
        self._clock = clock
        # (judge, request) -> (outcome, when it was asked), oldest first
        self._outcomes: OrderedDict[tuple[str, str], tuple[bool, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, judge: str, probe: Probe) -> bool | None:
        with self._lock:
            kept = self._outcomes.get((judge, probe.key))
            if kept is None:
                return None
            if self._clock() - kept[1] > self._seconds:
                del self._outcomes[(judge, probe.key)]
                return None
            return kept[0]

    def put(self, judge: str, probe: Probe) -> None:
        if probe.parsed is None:
            return  # unanswered: ask again next time
        with self._lock:
            self._outcomes[(judge, probe.key)] = (probe.parsed, self._clock())
            self._outcomes.move_to_end((judge, probe.key))
            while len(self._outcomes) > self._entries:
                self._outcomes.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._outcomes.clear()


CANARIES = CanaryCache()

Send = Callable[[Sequence[Call]], list[tuple[Generation | ChoiceResult | BackendError, float]]]


def run_probes(
    probes: Sequence[Probe], send: Send, judge: str, need_verdicts: bool, fresh: bool = False
) -> None:
    """Answer ``probes`` with one batch through ``send`` (cached outcomes are not sent, unless
    their verdicts are wanted or the answer must be ``fresh``)."""
    pending: dict[str, list[Probe]] = {}  # the same question asked for several: sent once
    for probe in probes:
        cached = None if need_verdicts or fresh else CANARIES.get(judge, probe)
        if cached is not None:
            probe.parsed = cached
        else:
            pending.setdefault(probe.key, []).append(probe)
    asked = [same[0] for same in pending.values()]
    flat = [call for probe in asked for call in probe.calls]
    responses = iter(send(flat)) if flat else iter(())
    for probe in asked:
        outcomes = []
        for call in probe.calls:
            response, _ = next(responses)
            outcomes.append(_outcome(call, response, probe.verdicts))
        probe.parsed = None if None in outcomes else all(outcomes)
        CANARIES.put(judge, probe)
        for same in pending[probe.key][1:]:
            same.parsed, same.verdicts = probe.parsed, probe.verdicts


def _outcome(
    call: Call, response: Generation | ChoiceResult | BackendError, into: dict[str, Verdict]
) -> bool | None:
    if isinstance(response, BackendError):
        # A canary the server refuses (malformed, too long even without the response) or the
        # backend raises on fails like the original; one it never answered (connection,
        # time-out, 5xx) says nothing.
        if isinstance(response, BackendCrash):
            return False
        return None if response.retryable else False
    try:
        into.update(call.parse(response))
    except VerdictParseError:
        return False
    return True


def record(outcome: str, **more: Any) -> dict[str, Any]:
    """What a judgment's detail keeps of its attribution."""
    return {"attribution": {"canary": outcome, "canary_version": CANARY_VERSION, **more}}
