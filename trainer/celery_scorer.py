"""Rewards scored by Celery workers: a score job per batch, followed until it finishes.

For a policy whose judge runs on other machines (vLLM on GPU workers): the trainer stores
the completions, submits a job for exactly those completions, sends its chunks after the
commit, waits, and reads the scores back. Needs RUBRICSVC_BROKER_URL and a worker for the
judge's queue (`rubricsvc worker --judge NAME`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rubricsvc.errors import RubricsvcError
from rubricsvc.scoring.rewards import RewardRequest, RewardResult, reward_results
from trainer.config import ScorerSettings
from trainer.scoredby import ScoredBy

if TYPE_CHECKING:
    from rubricsvc.config import BrokerSettings, JobSettings

POLL_SECONDS = 0.5


class CeleryScorer:
    """Scores through a job for the workers of the judge's queue; picklable (settings only)."""

    def __init__(
        self,
        settings: ScorerSettings,
        broker: BrokerSettings | None = None,
        jobs: JobSettings | None = None,
    ) -> None:
        self.settings = settings
        # None: the trainer process's environment, read on first use.
        self.broker = broker
        self.jobs = jobs
        self._engine: Any = None
        self.last_scored_by: ScoredBy | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "broker": self.broker, "jobs": self.jobs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state.get("broker"), state.get("jobs"))  # type: ignore[misc]

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        from rubricsvc.db import make_engine

        if self._engine is None:
            self._engine = make_engine(self.settings.engine_url())
        ids = self._store(requests)
        rubrics = [r.rubric or self.settings.rubric_for(r.prompt_id) for r in requests]
        by_rubric: dict[str | None, list[int]] = {}
        for rubric, completion_id in zip(rubrics, ids, strict=True):
            by_rubric.setdefault(rubric, []).append(completion_id)
        # Several usable rubrics and none named: refused before a job is submitted for it.
        ambiguous = self._ambiguous(by_rubric.get(None, []))
        scored: dict[tuple[int, str | None], list[Any]] = {}
        for rubric, completion_ids in by_rubric.items():
            wanted = [cid for cid in completion_ids if rubric is not None or cid not in ambiguous]
            if not wanted:
                continue
            for entry in self._run_job(rubric, wanted):
                scored.setdefault((entry.completion_id, rubric), []).append(entry)
        return reward_results(rubrics, ids, scored, ambiguous)

    def _ambiguous(self, completion_ids: list[int]) -> dict[int, list[str]]:
        from rubricsvc.db import session_scope
        from rubricsvc.scoring.rewards import ambiguous_rubrics

        if not completion_ids:
            return {}
        with session_scope(self._engine) as session:
            return ambiguous_rubrics(session, completion_ids, self.settings.include_drafts)

    def _store(self, requests: Sequence[RewardRequest]) -> list[int]:
        from rubricsvc.db import session_scope
        from rubricsvc.scoring.rewards import store_rewarded

        # The reward pipeline's store stage; its judge stage is the score job the workers run.
        with session_scope(self._engine) as session:
            return store_rewarded(session, requests, self.settings.source)

    def _run_job(self, rubric: str | None, completion_ids: list[int]) -> list[Any]:
        from rubricsvc.db import session_scope
        from rubricsvc.scoring import jobs, lifecycle
        from rubricsvc.scoring.dispatch import CeleryDispatcher
        from rubricsvc.scoring.judge_configs import find_reward_judge
        from rubricsvc.scoring.selection import Selection

        broker, policy = self._environment()
        dispatcher = CeleryDispatcher(broker)
        selection = Selection(
            completion_ids=tuple(sorted(set(completion_ids))),
            rubric_ref=rubric,
            include_drafts=self.settings.include_drafts,
        )
        options = self.settings.score_options()
        with session_scope(self._engine) as session:
            spec = find_reward_judge(session, self.settings.judge, self.settings.mode)
            self.last_scored_by = ScoredBy(spec.name, spec.config_hash())
            submission = lifecycle.submit(
                session, dispatcher, spec, selection, options, policy.chunk_judgments
            )
            job_id = submission.job.id
        deadline = time.monotonic() + self.settings.timeout
        for state in lifecycle.follow(self._engine, job_id, POLL_SECONDS):
            if state.finished:
                break
            if time.monotonic() > deadline:
                raise RubricsvcError(
                    f"reward job {job_id} not finished after {self.settings.timeout:g}s "
                    f"({state.done}/{state.total}): is a worker running for {self.settings.judge}?"
                )
        if state.status != "done":
            raise RubricsvcError(f"reward job {job_id} {state.status}: {state.error}")
        with session_scope(self._engine) as session:
            return list(jobs.job_report(session, job_id).scores)

    def _environment(self) -> tuple[BrokerSettings, JobSettings]:
        if self.broker is None or self.jobs is None:
            from rubricsvc.config import get_settings

            settings = get_settings()  # the trainer process's environment
            self.broker = self.broker or settings.broker
            self.jobs = self.jobs or settings.jobs
        return self.broker, self.jobs
