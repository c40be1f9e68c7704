"""What one app holds for its lifetime: the database, loaded judges, metrics, local job runner."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from rubricsvc.api.authfailures import FailedAuthThrottle
from rubricsvc.api.keycache import KeyCache
from rubricsvc.api.metrics import Metrics
from rubricsvc.api.ratelimit import RateLimiter, failed_auth_limiter, rate_limiter
from rubricsvc.apikeys import authenticate
from rubricsvc.backends import BackendChoice, JudgeBackend
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.config import Settings
from rubricsvc.db import session_scope
from rubricsvc.evolution.served import ServedEvolution
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.models import ApiKey
from rubricsvc.scoring.coalescing import JudgedAlone, RewardCoalescer
from rubricsvc.scoring.groups import GroupGatherer
from rubricsvc.scoring.options import score_options
from rubricsvc.scoring.pipeline import RewardBatch, RewardPipeline

log = logging.getLogger(__name__)


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    metrics: Metrics = field(default_factory=Metrics)
    # Builds a judge's (or the rubric generator's) backend the first time it is needed
    # (None: the real backends, the embedded model from RUBRICSVC_JUDGE_MODEL_DIR).
    build_backend: Callable[[BackendChoice], JudgeBackend] | None = None
    # Every model this server uses, loaded once and kept (at most RUBRICSVC_API_MAX_JUDGES),
    # behind the judges' shared API limits.
    judges: BackendProvider = field(init=False)
    # Requests per minute per API key (None: no limit).
    rate_limiter: RateLimiter | None = field(init=False)
    # Failed authentications per client address, and the addresses refused (None: not counted).
    failed_auth: FailedAuthThrottle | None = field(init=False)
    # Live keys read recently, so most requests skip the key lookup.
    key_cache: KeyCache = field(init=False)
    # The reward routes' pipeline: the API's bounds and end tokens, concurrent requests of
    # one judge config judged as one batch, counted in the metrics.
    rewards: RewardPipeline = field(init=False)
    # The reward routes' evolving rubrics (RUBRICSVC_API_EVOLUTION; None: refused).
    evolution: ServedEvolution | None = field(init=False)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)
    _jobs: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        self.judges = BackendProvider.from_settings(
            self.settings,
            max_backends=self.settings.api.max_judges,
            limit_name="RUBRICSVC_API_MAX_JUDGES",
            share_models=True,
            build=self.build_backend,
        )
        self.rate_limiter = rate_limiter(self.settings.api)
        failures = failed_auth_limiter(self.settings.api)
        self.failed_auth = FailedAuthThrottle(failures) if failures is not None else None
        self.key_cache = KeyCache(self.settings.api.key_cache_seconds)
        self.evolution = self._evolution()
        self.rewards = self._reward_pipeline()

    def _reward_pipeline(self) -> RewardPipeline:
        api = self.settings.api
        window = api.reward_batch_window_ms / 1000
        coalescer = RewardCoalescer(
            window,
            api.reward_batch_max_items,
            max(window, api.reward_batch_max_wait_ms / 1000),
        )
        return RewardPipeline(
            self.engine,
            self.judges,
            bounds=api,  # read at each request: RUBRICSVC_API_MAX_REWARD_*
            end_tokens=api.end_tokens,
            options=score_options(
                self.settings.scoring, chunk_judgments=api.reward_chunk_judgments
            ),
            # A request judged alone runs on the threads the routes' blocking work runs on.
            gatherer=coalescer if coalescer.enabled else JudgedAlone(run_in_threadpool),
            judged=self._count_rewards,
            # A prompt's rollouts sent one per request, gathered in the database.
            groups=GroupGatherer(self.engine, run_in_threadpool),
            evolution=self.evolution,
        )

    def _evolution(self) -> ServedEvolution | None:
        """The server's evolving rubrics (RUBRICSVC_API_EVOLUTION), or None."""
        given = self.settings.api.evolution
        if given is None:
            return None
        return ServedEvolution(
            EvolutionSettings.model_validate(given),
            self.judges,
            creators=self.settings.api.evolution_creators,
        )

    def _count_rewards(self, batch: RewardBatch) -> None:
        """Counted once per batch judged, however many requests it served."""
        self.metrics.count_judgments(batch.judge, batch.computed, batch.cached, batch.failed)
        self.metrics.count_failures(batch.judge, batch.failures)
        nulls = sum(1 for r in batch.rewards if r is None)
        self.metrics.rewards.labels(batch.judge, "ok").inc(len(batch.rewards) - nulls)
        self.metrics.rewards.labels(batch.judge, "null").inc(nulls)

    def authenticate(self, secret: str) -> ApiKey | None:
        """The live key with this secret (detached from any session), or None."""
        return self.key_cache.lookup(secret, self._read_key)

    def kept_key(self, secret: str) -> ApiKey | None:
        """``authenticate`` from the cache alone: None when it would have to read."""
        return self.key_cache.kept(secret)

    def _read_key(self, secret: str) -> ApiKey | None:
        with session_scope(self.engine) as session:
            key = authenticate(session, secret)
            if key is not None:
                session.expunge(key)
        return key

    def local_jobs(self) -> ThreadPoolExecutor | None:
        """Threads that run score jobs in this process when there is no broker (or None)."""
        threads = self.settings.api.local_job_threads
        if self.settings.broker.url or threads == 0:
            return None
        with self._locks_guard:
            if self._jobs is None:
                self._jobs = ThreadPoolExecutor(threads, thread_name_prefix="rubricsvc-job")
            return self._jobs

    def close(self) -> None:
        if self._jobs is not None:
            # Chunks not started stay pending (submitting the job again runs them); the one
            # running finishes, so nothing is left half-written when the engine goes.
            self._jobs.shutdown(wait=True, cancel_futures=True)
        self.judges.close_all()
        if self.rewards.groups is not None:
            self.rewards.groups.close()  # its lock (and PostgreSQL session) before the engine
        if self.failed_auth is not None:
            self.failed_auth.close()
        self.engine.dispose()
