"""Sending judge calls to a backend: batching, retries with backoff, strict parsing.

The outcome of every judgment is either a verdict or a failure with its error; a failure
is retried while it may help (a transient backend error, or unparseable output of a judge
that samples: at temperature 0 the same prompt gives the same reply) and is never turned
into a low score. Each failure carries its class (``judging.failures``):
who caused it decides whether a score masks it or charges it to the response.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc import jsontext
from rubricsvc.backends.base import BackendCrash, BackendError, JudgeBackend
from rubricsvc.backends.retry import Backoff
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import FailureClass, classify_backend_error
from rubricsvc.judging.modes import (
    Call,
    CallBuilder,
    CallContext,
    CompletionView,
    Item,
    ModeError,
    get_mode,
)
from rubricsvc.judging.templates import PromptTemplate
from rubricsvc.judging.verdicts import Verdict, VerdictParseError
from rubricsvc.scoring.attribution import (
    Probe,
    canary_completion,
    canary_items,
    fresh_canary,
    needs_attribution,
    record,
    run_probes,
)
from rubricsvc.scoring.request_size import TooLong, too_long


@dataclass
class JudgeResult:
    key: str
    verdict: Verdict | None
    error: str | None
    attempts: int
    raw_output: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None
    failure: FailureClass | None = None  # set exactly when ``verdict`` is None
    # A failure's attribution (``scoring.attribution``): what the canary call showed.
    detail: dict[str, Any] | None = None


BackendResponse = Generation | ChoiceResult | BackendError


class CallExecutor:
    """Runs the calls of a verdict mode against one backend."""

    def __init__(
        self,
        backend_factory: Callable[[], JudgeBackend],
        spec: JudgeSpec,
        builder: CallBuilder,
        template: PromptTemplate,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backend_factory = backend_factory
        self._backend: JudgeBackend | None = None
        self.spec = spec
        self.builder = builder
        self.template = template
        self.backoff = Backoff(spec.retries, spec.retry_backoff, sleep)
        self.requests_sent = 0  # every request handed to the backend, retries included
        # Judgments given up on while the backend failed in a way that may pass (unreachable,
        # overloaded, rate-limited), and the longest wait a provider asked for meanwhile.
        self.unavailable = 0
        self.retry_after: float | None = None

    @property
    def _resamples(self) -> bool:
        """Whether asking again can give another reply: only a mode that decodes, at a
        temperature above 0 (a retry gets another seed). A greedy reply, or one forward
        pass's probabilities, would come back the same: such a failure is not retried."""
        return get_mode(self.spec.mode).decodes and self.spec.temperature > 0

    @property
    def backend(self) -> JudgeBackend:
        # Created on first use: a run served entirely from the cache never loads a model.
        if self._backend is None:
            self._backend = self._backend_factory()
        return self._backend

    def run(self, units: Sequence[tuple[CompletionView, list[Item]]]) -> dict[str, JudgeResult]:
        results: dict[str, JudgeResult] = {}
        pending = self._within_bound(units, results)
        items_by_key: dict[str, Item] = {}
        suspects: list[_Suspect] = []  # failed for good, perhaps because of what they showed
        attempt = 0
        while pending:
            calls: list[tuple[CompletionView, Call]] = []
            for completion, items in pending:
                items_by_key.update((item.key, item) for item in items)
                try:
                    context = CallContext(self.spec, self.template, completion, attempt)
                    built = self.builder(context, items)
                except ModeError as err:
                    for item in items:
                        results[item.key] = JudgeResult(
                            item.key,
                            None,
                            str(err),
                            attempt + 1,
                            failure=FailureClass.INFRASTRUCTURE,
                        )
                    continue
                calls.extend((completion, call) for call in built)
            retry: dict[int, tuple[CompletionView, list[Item]]] = {}
            retried: list[BackendError | None] = []
            sent = self._send([call for _, call in calls])
            for (completion, call), (response, latency) in zip(calls, sent, strict=True):
                failure = self._record(call, response, latency, attempt, results)
                if failure is None:
                    continue
                if self.backoff.allows(failure.retryable, attempt):
                    retried.append(failure.error)
                    unit = retry.setdefault(completion.id, (completion, []))
                    unit[1].extend(items_by_key[key] for key in call.keys)
                elif needs_attribution(failure.cls, failure.error):
                    suspects.append(_Suspect(completion, call, failure, attempt + 1))
                else:
                    self._count_unavailable(failure, len(call.keys))
                    for key in call.keys:
                        results[key] = JudgeResult(
                            key, None, str(failure), attempt + 1, failure.raw, failure=failure.cls
                        )
            pending = list(retry.values())
            if pending:
                self.backoff.wait(attempt, retried)
            attempt += 1
        if suspects:
            self._attribute(suspects, items_by_key, results)
        return results

    def _within_bound(
        self,
        units: Sequence[tuple[CompletionView, list[Item]]],
        results: dict[str, JudgeResult],
    ) -> list[tuple[CompletionView, list[Item]]]:
        """The units' judgments whose requests fit the judge's ``max_request_chars``; each of
        the others fails here, never sent, charged to its response when the response is why
        (``scoring.request_size``). A group one of whose responses is too long is judged again
        with only its culprits replaced by the canary, so the rest of it is still scored."""
        within = []
        regroup: list[tuple[CompletionView, Item, TooLong]] = []
        for completion, items in units:
            over = {found.key: found for found in too_long(self.spec, completion, items)}
            for item in items:
                found = over.get(item.key)
                if found is None:
                    continue
                results[item.key] = JudgeResult(
                    item.key,
                    None,
                    found.message(self.spec),
                    0,  # never sent
                    failure=FailureClass.RESPONSE if found.charged else FailureClass.INFRASTRUCTURE,
                    detail=found.detail(),
                )
                if found.innocent and len(item.responses) > 2:  # a group, as attribution does
                    regroup.append((completion, item, found))
            kept = [item for item in items if item.key not in over]
            if kept:
                within.append((completion, kept))
        if regroup:
            probes = [self._probe(c, [item], found.innocent) for c, item, found in regroup]
            run_probes(probes, self._send, self.spec.config_hash(), True)
            for (_, item, _), probe in zip(regroup, probes, strict=True):
                if probe.parsed:
                    (verdict,) = probe.verdicts.values()
                    detail = results[item.key].detail or {}
                    detail["attribution"]["rest"] = verdict.detail
        return within

    # -- attribution (``scoring.attribution``) ------------------------------------------

    def _attribute(
        self,
        suspects: Sequence[_Suspect],
        items_by_key: Mapping[str, Item],
        results: dict[str, JudgeResult],
    ) -> None:
        """Class each suspect failure by its canary: the response's when the same call without
        the judged text gives a verdict, else as it failed. Crashes' canaries are asked afresh
        (``fresh_canary``), the others' may come from the cache: two rounds of calls."""
        for fresh in (False, True):
            group = [s for s in suspects if fresh_canary(s.failure.error) == fresh]
            if group:
                self._attribute_group(group, items_by_key, results, fresh)

    def _attribute_group(
        self,
        suspects: Sequence[_Suspect],
        items_by_key: Mapping[str, Item],
        results: dict[str, JudgeResult],
        fresh: bool,
    ) -> None:
        judge = self.spec.config_hash()
        canaries = [
            self._probe(s.completion, [items_by_key[k] for k in s.call.keys]) for s in suspects
        ]
        run_probes(canaries, self._send, judge, need_verdicts=False, fresh=fresh)
        comparisons = []
        for suspect, canary in zip(suspects, canaries, strict=True):
            if canary.parsed and suspect.items_compared(items_by_key):
                comparisons.append(suspect)
                continue
            if canary.parsed:
                cls, note = FailureClass.RESPONSE, "the judge answers the same call without it"
                outcome = "parsed"
            elif canary.parsed is None:
                cls, note, outcome = (
                    suspect.failure.cls,
                    "the control call was not answered",
                    "unanswered",
                )
            else:
                cls, note = suspect.failure.cls, "it fails without the judged text too"
                outcome = "failed"
            if cls is not FailureClass.RESPONSE:
                self._count_unavailable(suspect.failure, len(suspect.call.keys))
            suspect.settle(results, cls, note, record(outcome))
        if comparisons:
            self._attribute_comparisons(comparisons, items_by_key, results, judge, fresh)

    def _attribute_comparisons(
        self,
        suspects: Sequence[_Suspect],
        items_by_key: Mapping[str, Item],
        results: dict[str, JudgeResult],
        judge: str,
        fresh: bool,
    ) -> None:
        """The culprits of failed comparisons whose canary parses: each response tried alone
        among canaries; then a group judged again without its culprits."""
        alone: list[list[tuple[str, Probe]]] = []
        for suspect in suspects:
            (item,) = (items_by_key[k] for k in suspect.call.keys)
            hashes = list(dict.fromkeys(r.response_hash for r in item.responses))
            alone.append(
                [(h, self._probe(suspect.completion, [item], frozenset({h}))) for h in hashes]
            )
        run_probes([p for probes in alone for _, p in probes], self._send, judge, False, fresh)
        rest: list[tuple[_Suspect, list[str], Probe | None]] = []
        for suspect, probes in zip(suspects, alone, strict=True):
            culprits = [h for h, probe in probes if probe.parsed is False]
            if not culprits:  # none breaks it alone: together they did
                culprits = [h for h, _ in probes]
            innocent = frozenset(h for h, _ in probes if h not in culprits)
            (item,) = (items_by_key[k] for k in suspect.call.keys)
            again = None
            if innocent and len(probes) > 2:  # a group: the others are still scored
                again = self._probe(suspect.completion, [item], innocent)
            rest.append((suspect, culprits, again))
        run_probes([p for _, _, p in rest if p is not None], self._send, judge, True)
        for suspect, culprits, again in rest:
            more: dict[str, Any] = {"culprits": culprits}
            if again is not None and again.parsed:
                (verdict,) = again.verdicts.values()
                more["rest"] = verdict.detail
            note = "the judge answers the same call without " + (
                "them" if len(culprits) > 1 else "one of them"
            )
            suspect.settle(results, FailureClass.RESPONSE, note, record("parsed", **more))

    def _probe(
        self, completion: CompletionView, items: Sequence[Item], keep: frozenset[str] = frozenset()
    ) -> Probe:
        """The control question for ``items``: the same calls with the judged text replaced
        (but the comparison responses in ``keep``)."""
        context = CallContext(self.spec, self.template, canary_completion(completion), 0)
        return Probe(self.builder(context, canary_items(items, keep)))

    def _count_unavailable(self, failure: _Failure, judgments: int) -> None:
        error = failure.error
        if error is None or not error.retryable:
            return
        self.unavailable += judgments
        if error.retry_after is not None:
            self.retry_after = max(self.retry_after or 0.0, error.retry_after)

    def _record(
        self,
        call: Call,
        response: BackendResponse,
        latency_ms: float,
        attempt: int,
        results: dict[str, JudgeResult],
    ) -> _Failure | None:
        if isinstance(response, BackendError):
            cls = classify_backend_error(response)
            return _Failure(str(response), response.retryable, cls, error=response)
        raw = response.text if isinstance(response, Generation) else jsontext.dumps(response.probs)
        try:
            verdicts = call.parse(response)
        except VerdictParseError as err:
            return _Failure(
                f"unparseable judge output: {err}", self._resamples, FailureClass.JUDGE, raw=raw
            )
        if self.spec.calibration is not None:
            verdicts = {key: self._calibrated(verdict) for key, verdict in verdicts.items()}
        completion_tokens = response.completion_tokens if isinstance(response, Generation) else 0
        share = 1 / len(call.keys)
        for key in call.keys:
            results[key] = JudgeResult(
                key,
                verdicts[key],
                None,
                attempt + 1,
                raw_output=raw,
                prompt_tokens=round(response.prompt_tokens * share),
                completion_tokens=round(completion_tokens * share),
                latency_ms=latency_ms * share,
            )
        return None

    def _calibrated(self, verdict: Verdict) -> Verdict:
        """The verdict with the judge's calibration map applied to its value; its label stays
        as the judge gave it, and its own value is kept in the detail (``uncalibrated``)."""
        assert self.spec.calibration is not None
        return dataclasses.replace(
            verdict,
            value=self.spec.calibration.apply(verdict.value),
            detail={**verdict.detail, "uncalibrated": verdict.value},
        )

    def _send(self, calls: Sequence[Call]) -> list[tuple[BackendResponse, float]]:
        """One batch per primitive; responses (and latency per call) in the order of ``calls``."""
        by_kind: dict[type, list[int]] = defaultdict(list)
        for index, call in enumerate(calls):
            by_kind[type(call.request)].append(index)
        responses: list[BackendResponse] = [BackendError("not sent", retryable=True) for _ in calls]
        latency = [0.0] * len(calls)
        for kind, indexes in by_kind.items():
            requests = [calls[i].request for i in indexes]
            started = time.perf_counter()
            batch = self._invoke(kind, requests)
            per_call = (time.perf_counter() - started) * 1000 / max(len(indexes), 1)
            for i, response in zip(indexes, batch, strict=True):
                responses[i] = response
                latency[i] = per_call
        return list(zip(responses, latency, strict=True))

    def _invoke(
        self, kind: type, requests: list[GenerationRequest | ChoiceRequest]
    ) -> list[BackendResponse]:
        # A backend that cannot even be created (unknown name, missing extra, no model) is a
        # configuration error: it stops the run with its message instead of failing judgments.
        backend = self.backend
        self.requests_sent += len(requests)
        try:
            if kind is ChoiceRequest:
                batch: list[BackendResponse] = list(
                    backend.choice_probs([r for r in requests if isinstance(r, ChoiceRequest)])
                )
            else:
                batch = list(
                    backend.generate([r for r in requests if isinstance(r, GenerationRequest)])
                )
        except BackendError as err:
            if err.retryable or len(requests) == 1:
                return [err] * len(requests)
            return self._split(kind, requests)  # refused: perhaps one request's doing
        except Exception as err:  # a crashing backend fails its calls; it never yields a score
            if len(requests) == 1:
                return [BackendCrash(err)]
            return self._split(kind, requests)
        if len(batch) != len(requests):
            error = BackendError(
                f"backend returned {len(batch)} results for {len(requests)} requests",
                retryable=True,
            )
            return [error] * len(requests)
        return batch

    def _split(
        self, kind: type, requests: list[GenerationRequest | ChoiceRequest]
    ) -> list[BackendResponse]:
        """``requests`` sent again in two halves, after the backend raised on all of them.

        One request that makes the backend raise (a text its tokenizer chokes on, a prompt too
        large to allocate beside the others) would otherwise fail its whole batch: other
        prompts, other callers' rollouts gathered with it, all masked, and itself among them,
        escaping its own low reward. Halving until the requests that raise on their own are
        found costs about two calls per culprit per halving; each found one fails as a
        ``BackendCrash``, which attribution charges to its response when the same call
        without the judged text is answered. A backend that raises on everything costs
        2n - 1 calls per attempt, each failing at once."""
        half = len(requests) // 2
        return self._invoke(kind, requests[:half]) + self._invoke(kind, requests[half:])

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None


@dataclass
class _Suspect:
    """A call that failed for good in a way the judged text may have caused."""

    completion: CompletionView
    call: Call
    failure: _Failure
    attempts: int

    def items_compared(self, items_by_key: Mapping[str, Item]) -> bool:
        return any(items_by_key[key].responses for key in self.call.keys)

    def settle(
        self,
        results: dict[str, JudgeResult],
        cls: FailureClass,
        note: str,
        detail: dict[str, Any],
    ) -> None:
        for key in self.call.keys:
            results[key] = JudgeResult(
                key,
                None,
                f"{self.failure}; {note} (canary)",
                self.attempts,
                self.failure.raw,
                failure=cls,
                detail=detail,
            )


@dataclass
class _Failure:
    message: str
    retryable: bool
    cls: FailureClass
    raw: str | None = None
    error: BackendError | None = None  # the backend's, when it failed the call

    def __str__(self) -> str:
        return self.message
