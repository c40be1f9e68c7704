"""Evolving rubrics behind the reward API: the reward pipeline's ``GroupEvolution``.

The server gathers a prompt's group of rollouts (``scoring.groups``); for a call that names an
evolution run, the pipeline routes the group to each prompt's current evolved version before
judging (``route``), and once the group is judged, evolves its prompt by one step with the
group's verdicts (``evolve``), in the batch's transaction: what ``rubricsvc train`` does per
step (``trainer/evolution.py``), with a complete group as a step. A track's steps are numbered
0, 1, ... in the order its groups complete; the track's row is locked while one is taken, so
two server processes that complete groups of one prompt at once take turns.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.errors import ValidationFailed
from rubricsvc.evolution.judging import ExecutorJudge
from rubricsvc.evolution.rollouts import (
    evolvable,
    group_rollouts,
    persistent_version,
    prompt_groups,
    routed_to_current,
)
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.evolution.step import StepReport, evolve_group
from rubricsvc.evolution.store import ensure_run, find_track, locked_track
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import EvolutionStep
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest, find_prompts


class ServedEvolution:
    """The server's evolution (its ``RUBRICSVC_API_EVOLUTION`` settings), judged and generated
    with the server's kept models (``backends``)."""

    def __init__(self, settings: EvolutionSettings, backends: BackendProvider) -> None:
        if settings.every != 1:
            # The server has no training step to count: each complete group is one step.
            raise ValidationFailed(
                "RUBRICSVC_API_EVOLUTION: every must be 1 (the server evolves each complete group)"
            )
        self.settings = settings
        self.backends = backends
        self.last_reports: list[StepReport] = []

    def route(
        self, session: Session, run: str, requests: list[RewardRequest]
    ) -> list[RewardRequest]:
        return routed_to_current(session, run, requests)

    @property
    def max_new(self) -> int:
        return self.settings.max_new

    def evolve(
        self,
        session: Session,
        run: str,
        spec: JudgeSpec,
        requests: list[RewardRequest],
        batch: RewardBatch,
    ) -> None:
        prompts = find_prompts(session, requests)
        reports = []
        for indices in prompt_groups(prompts).values():
            results = [batch.results[i] for i in indices]
            if not evolvable(results):
                continue  # no group to evolve from, or nothing scored it
            prompt = prompts[indices[0]]
            run_row = ensure_run(session, run, self.settings)
            persistent = persistent_version(session, find_track(session, run, prompt.id), results)
            track = locked_track(session, run_row, prompt, persistent)
            taken = session.scalar(
                select(func.max(EvolutionStep.step)).where(EvolutionStep.track_id == track.id)
            )
            reports.append(
                evolve_group(
                    session,
                    run=run,
                    prompt=prompt,
                    persistent=persistent,
                    group=group_rollouts([requests[i] for i in indices], results),
                    step=0 if taken is None else taken + 1,
                    settings=self.settings,
                    generator=self.backends.factory(self.settings.generator),
                    judge=ExecutorJudge(spec, self.backends.factory(spec)),
                )
            )
        self.last_reports = reports
