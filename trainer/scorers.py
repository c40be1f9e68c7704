"""Where rewards come from: the platform in this process, or its HTTP API.

A scorer turns (prompt, completion) pairs into ``RewardResult``s. Both kinds are picklable
(TRL and data loaders may copy a reward function into other processes): they hold settings
only, and build their database engine, judge backend or HTTP client on first use.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine

from rubricsvc.errors import DependencyMissing, RubricsvcError
from rubricsvc.judging.failures import empty_counts
from rubricsvc.scoring.pipeline import RewardCall, RewardPipeline, RewardRequest, RewardResult
from trainer.config import ScorerSettings, ScorerVia
from trainer.retrying import next_wait
from trainer.scoredby import ScoredBy

if TYPE_CHECKING:
    from rubricsvc.backends.provider import BackendProvider, JudgeLimits


class Scorer(Protocol):
    settings: ScorerSettings

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]: ...


# The in-process scorers of a process (the reward's, the gold monitor's, the training gold
# scorer's) share one provider per set of limits and model folder, keyed by what is loaded:
# judges naming the same model, device and dtype load it once. Counted: (provider, users).
_SHARED: dict[str, list[Any]] = {}
_SHARED_LOCK = threading.Lock()


def shared_provider(settings: ScorerSettings, limits: JudgeLimits | None) -> BackendProvider:
    """The process's provider for ``limits`` (None: the settings'), made on first use."""
    limits, model_dir = settings.provider_inputs(limits)
    key = repr((limits, model_dir))
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is None:
            provider = settings.backend_provider(limits, share_models=True)
            entry = _SHARED[key] = [provider, 0]
        entry[1] += 1
        shared: BackendProvider = entry[0]
        return shared


def release_provider(provider: BackendProvider) -> None:
    """One user less of ``provider``; the last closes its backends."""
    with _SHARED_LOCK:
        for key, entry in list(_SHARED.items()):
            if entry[0] is provider:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _SHARED[key]
                    provider.close_all()
                return
    provider.close_all()


def close_shared_providers() -> int:
    """Close every shared provider still open (scorers made and never closed) and forget
    them; return how many there were. For a process that starts afresh (a test harness
    between tests): a later run then loads, and counts, only its own judges."""
    with _SHARED_LOCK:
        left = [entry[0] for entry in _SHARED.values()]
        _SHARED.clear()
    for provider in left:
        provider.close_all()
    return len(left)


def judge_loads() -> int:
    """How many judge backends (models, for the in-process ones) the in-process scorers of
    this process have loaded so far."""
    with _SHARED_LOCK:
        return sum(int(entry[0].loads) for entry in _SHARED.values())


class InProcessScorer:
    """Scores with the reward pipeline (``scoring.pipeline``); the judge model is loaded once
    per process and kept (``shared_provider``: shared with the process's other in-process
    scorers), behind the judge's shared API limits (``limits``, from the launcher's settings;
    None: none)."""

    def __init__(self, settings: ScorerSettings, limits: JudgeLimits | None = None) -> None:
        self.settings = settings
        self.limits = limits
        self._engine: Engine | None = None
        self._backends: BackendProvider | None = None
        self.last_scored_by: ScoredBy | None = None
        self._pipeline: RewardPipeline | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "limits": self.limits}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state.get("limits"))  # type: ignore[misc]

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        pipeline = self._reward_pipeline()
        settings = self.settings
        call = RewardCall(
            settings.judge,
            settings.mode,
            settings.score_options(),
            settings.include_drafts,
            settings.source,
        )
        # The API's pipeline, called without its bounds, end tokens or gathering: a step's
        # rollouts come together, from a policy whose text this process decoded itself.
        answer = pipeline.score(call, [_with_rubric(r, settings) for r in requests])
        self.last_scored_by = ScoredBy(answer.batch.judge, answer.batch.judge_config_hash)
        return answer.batch.results

    def _reward_pipeline(self) -> RewardPipeline:
        from rubricsvc.db import make_engine

        if self._pipeline is None:
            self._engine = make_engine(self.settings.engine_url())
            self._backends = shared_provider(self.settings, self.limits)
            self._pipeline = RewardPipeline(self._engine, self._backends)
        return self._pipeline

    def close(self) -> None:
        if self._backends is not None:
            release_provider(self._backends)
        if self._engine is not None:
            self._engine.dispose()
        self._engine = self._backends = self._pipeline = None


class HttpScorer:
    """Scores through the API's ``POST /v1/rewards``; the key comes from ``api_key_env``."""

    def __init__(self, settings: ScorerSettings) -> None:
        self.settings = settings
        self.last_scored_by: ScoredBy | None = None

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        data = post_json(self.settings, REWARDS_ROUTE, rewards_body(self.settings, requests))
        results = results_from_json(self.settings, data, len(requests))
        if data.get("judge_config_hash"):
            judge = str(data.get("judge") or self.settings.judge)
            self.last_scored_by = ScoredBy(judge, str(data["judge_config_hash"]))
        return results


REWARDS_ROUTE = "/v1/rewards"


def rewards_body(settings: ScorerSettings, requests: Sequence[RewardRequest]) -> dict[str, Any]:
    """The body of ``POST /v1/rewards`` for ``requests`` under ``settings``."""
    return {
        "judge": settings.judge,
        "mode": settings.mode,
        "aggregation": settings.aggregation,
        "min_coverage": settings.min_coverage,
        "include_drafts": settings.include_drafts,
        "source": settings.source,
        "items": [_with_rubric(r, settings).item() for r in requests],
        **({} if settings.group_size is None else {"group_size": settings.group_size}),
        **({} if settings.evolution_run is None else {"evolution": settings.evolution_run}),
    }


def results_from_json(
    settings: ScorerSettings, data: dict[str, Any], count: int
) -> list[RewardResult]:
    """The results of a ``/v1/rewards`` answer, one per item sent."""
    results = data.get("results")
    if not isinstance(results, list) or len(results) != count:
        raise RubricsvcError(
            f"{settings.base_url}{REWARDS_ROUTE} answered {len(results or [])} result(s) "
            f"for {count} item(s)"
        )
    return [_result_from_json(item) for item in results]


def api_headers(settings: ScorerSettings) -> dict[str, str]:
    """The reward key's header, from the variable ``api_key_env`` names (none if unset)."""
    key = os.environ.get(settings.api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


def post_json(
    settings: ScorerSettings,
    path: str,
    body: dict[str, Any],
    params: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST ``body`` to the API; errors become one-line ``RubricsvcError``s with the status."""
    try:
        import httpx
    except ImportError:
        raise DependencyMissing(
            "rewards over HTTP need httpx: pip install 'rubricsvc[trainer]'"
        ) from None
    url = f"{(settings.base_url or '').rstrip('/')}{path}"
    headers = api_headers(settings)
    for attempt in range(settings.retries + 1):
        response, error = None, None
        try:
            response = httpx.post(
                url, json=body, params=params, headers=headers, timeout=settings.timeout
            )
        except httpx.TransportError as err:
            error = err
        wait = next_wait(url, attempt, settings.retries, settings.retry_backoff, response, error)
        if wait is None:
            break
        time.sleep(wait)
    return json_answer(url, response)


def json_answer(url: str, response: Any) -> dict[str, Any]:
    """The JSON object of an HTTP 200 answer; any other answer as a one-line error."""
    assert response is not None  # the last try either answered or raised
    if response.status_code != 200:
        text = response.text.strip()
        detail = text.splitlines()[0][:300] if text else ""
        raise RubricsvcError(f"POST {url}: HTTP {response.status_code} {detail}".rstrip())
    data = response.json()
    if not isinstance(data, dict):
        raise RubricsvcError(f"POST {url}: expected a JSON object")
    return data


def _with_rubric(request: RewardRequest, settings: ScorerSettings) -> RewardRequest:
    """``request`` against the rubric ``settings`` name for it, unless it names its own."""
    if request.rubric is not None:
        return request
    rubric = settings.rubric_for(request.prompt_id)
    return request if rubric is None else replace(request, rubric=rubric)


def _result_from_json(item: dict[str, Any]) -> RewardResult:
    reward = item.get("reward")
    return RewardResult(
        reward=None if reward is None else float(reward),
        status=str(item.get("status", "")),
        coverage=float(item.get("coverage") or 0.0),
        rubric=item.get("rubric"),
        completion_id=item.get("completion_id"),
        reasons=list(item.get("reasons") or []),
        criteria=list(item.get("criteria") or []),
        failures={**empty_counts(), **(item.get("failures") or {})},
        confidence=None if item.get("confidence") is None else float(item["confidence"]),
        prompt_mean=None if item.get("prompt_mean") is None else float(item["prompt_mean"]),
        judge_mean=None if item.get("judge_mean") is None else float(item["judge_mean"]),
        group_status=item.get("group_status"),
    )


# The scorers each run in progress made (``closed_with_the_run``), innermost run last.
_RUN_SCORERS: list[list[Any]] = []


@contextlib.contextmanager
def closed_with_the_run() -> Iterator[None]:
    """Every scorer ``make_scorer`` makes within the block is closed when it ends: a run's
    reward, monitors and labellers give their judge models back, so that a later run in the
    same process (a notebook, a test) loads its own and ``judge_loads`` counts only those."""
    made: list[Any] = []
    with _SHARED_LOCK:
        _RUN_SCORERS.append(made)
    try:
        yield
    finally:
        with _SHARED_LOCK:
            _RUN_SCORERS.remove(made)
        for scorer in made:
            close = getattr(scorer, "close", None)
            if close is not None:
                close()


def make_scorer(settings: ScorerSettings, limits: JudgeLimits | None = None) -> Scorer:
    """The scorer ``settings.via`` names; in process, behind ``limits`` (see InProcessScorer)."""
    scorer: Scorer
    if settings.via == ScorerVia.HTTP:
        scorer = HttpScorer(settings)
    elif settings.via == ScorerVia.CELERY:
        from trainer.celery_scorer import CeleryScorer

        scorer = CeleryScorer(settings)
    else:
        scorer = InProcessScorer(settings, limits)
    with _SHARED_LOCK:
        if _RUN_SCORERS:
            _RUN_SCORERS[-1].append(scorer)
    return scorer
