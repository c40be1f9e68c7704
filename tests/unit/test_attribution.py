"""The canary's pieces: what it replaces, and how long its outcome is kept."""

from __future__ import annotations

from rubricsvc.backends.base import BackendCrash, BackendError
from rubricsvc.backends.types import GenerationRequest
from rubricsvc.judging.failures import FailureClass
from rubricsvc.judging.modes import Call, CompletionView, Item
from rubricsvc.judging.modes.citation import CitedPair
from rubricsvc.scoring.attribution import (
    CANARY_RESPONSE,
    CanaryCache,
    Probe,
    canary_completion,
    canary_items,
    fresh_canary,
    needs_attribution,
)


def _view(text: str, digest: str) -> CompletionView:
    return CompletionView(1, [{"role": "user", "content": "Q?"}], text, response_hash=digest)


def _probe(text: str) -> Probe:
    request = GenerationRequest([{"role": "user", "content": text}], max_tokens=8)
    return Probe([Call(request, ("k",), lambda _result: {})])


def test_the_canary_replaces_the_judged_text_and_nothing_else() -> None:
    trajectory = ({"role": "assistant", "content": "I searched."},)
    completion = CompletionView(
        1, [{"role": "user", "content": "Q?"}], "an answer", "a reference", "h", trajectory
    )
    canary = canary_completion(completion)
    assert canary.response == CANARY_RESPONSE
    assert canary.trajectory == ({"role": "assistant", "content": CANARY_RESPONSE},)
    assert (canary.messages, canary.reference, canary.response_hash) == (
        completion.messages,
        "a reference",
        "h",
    )
    pair = CitedPair("a claim", "1", None)
    (cited,) = canary_items([Item("c", None, citation=pair)])
    assert cited.citation.claim == CANARY_RESPONSE and cited.citation.label == "1"
    compared = Item("p", None, responses=(_view("first", "a"), _view("second", "b")))
    (both,) = canary_items([compared])
    assert [r.response for r in both.responses] == [CANARY_RESPONSE, CANARY_RESPONSE]
    (one,) = canary_items([compared], keep=frozenset({"b"}))
    assert [r.response for r in one.responses] == [CANARY_RESPONSE, "second"]
    assert [r.response_hash for r in one.responses] == ["a", "b"]


def test_which_failures_are_attributed() -> None:
    assert needs_attribution(FailureClass.JUDGE, None)
    refused = BackendError("bad request", retryable=False, status=400)
    assert needs_attribution(FailureClass.INFRASTRUCTURE, refused)
    unavailable = BackendError("overloaded", retryable=True, status=503)
    assert not needs_attribution(FailureClass.INFRASTRUCTURE, unavailable)
    assert not needs_attribution(FailureClass.RESPONSE, None)
    # An in-process backend's refusal has no status: the judged text may be why.
    refused_here = BackendError("cannot encode judged text safely", retryable=False)
    assert needs_attribution(FailureClass.INFRASTRUCTURE, refused_here)
    unauthorized = BackendError("bad key", retryable=False, status=401)
    assert not needs_attribution(FailureClass.INFRASTRUCTURE, unauthorized)
    # A call the backend raised on, alone: retryable, yet the response may have caused it;
    # its canary is always asked afresh.
    crash = BackendCrash(RuntimeError("index out of range in self"))
    assert crash.retryable and needs_attribution(FailureClass.INFRASTRUCTURE, crash)
    assert fresh_canary(crash) and not fresh_canary(refused)


def test_canary_outcomes_are_kept_per_judge_and_request_for_a_while() -> None:
    now = [0.0]
    cache = CanaryCache(entries=2, seconds=60, clock=lambda: now[0])
    answered = _probe("question one")
    answered.parsed = True
    cache.put("judge-a", answered)
    assert cache.get("judge-a", _probe("question one")) is True
    assert cache.get("judge-b", _probe("question one")) is None  # another judge config
    assert cache.get("judge-a", _probe("question two")) is None  # another request
    unanswered = _probe("question two")
    cache.put("judge-a", unanswered)  # parsed None: nothing to keep
    assert cache.get("judge-a", _probe("question two")) is None
    now[0] = 61.0
    assert cache.get("judge-a", _probe("question one")) is None  # too old to trust
    for n in range(3):
        probe = _probe(f"q{n}")
        probe.parsed = False
        cache.put("judge-a", probe)
    assert cache.get("judge-a", _probe("q0")) is None  # the oldest gave way
    assert cache.get("judge-a", _probe("q2")) is False
    cache.clear()
    assert cache.get("judge-a", _probe("q2")) is None
