"""The evolve loop: a judged batch's prompt groups, each stepped once, and the one alarm.

Both doors call it: the reward API's complete groups (``evolution.served``, in the batch's
transaction) and ``rubricsvc train``'s in-process reward (``trainer/evolution.py``, one
transaction per prompt). Each prompt's group of two or more rollouts, all scored under a
rubric version, takes one step (``step.evolve_group``): numbered on its track, under the
track's lock, by whichever process takes it. The run is stepped by this loop's door only
(``store.ensure_run``): a server and a trainer never share a run's name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy.orm import Session

from rubricsvc.backends.provider import BackendProvider
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
from rubricsvc.evolution.store import ensure_run, find_track
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Prompt, RunDoor
from rubricsvc.scoring.rewards import RewardRequest, RewardResult, find_prompts

log = logging.getLogger(__name__)

# A transaction to step in: the server's is the batch's own, the trainer's one per prompt.
Sessions = Callable[[], AbstractContextManager[Session]]


@dataclass
class EvolveLoop:
    """One door's evolution (``settings``), judged and generated with ``backends``."""

    settings: EvolutionSettings
    backends: BackendProvider
    door: RunDoor

    def route(
        self, session: Session, run: str, requests: Sequence[RewardRequest]
    ) -> list[RewardRequest]:
        """Each request aimed at its prompt's current version in ``run``, where it has one."""
        return routed_to_current(session, run, requests)

    def evolve(
        self,
        sessions: Sessions,
        run: str,
        spec: JudgeSpec,
        requests: Sequence[RewardRequest],
        results: Sequence[RewardResult],
    ) -> list[StepReport]:
        """Each prompt's group in ``requests`` (judged by ``spec``: ``results``) stepped once;
        the steps' reports, each logged, and the alarm raised where it is due."""
        with sessions() as session:
            prompts = find_prompts(session, requests)
            prompt_ids = [prompt.id for prompt in prompts]
            groups = prompt_groups(prompts)
        reports = []
        for indices in groups.values():
            group = [results[i] for i in indices]
            if not evolvable(group):
                continue  # no group to evolve from, or nothing scored it
            with sessions() as session:
                prompt = session.get(Prompt, prompt_ids[indices[0]])
                assert prompt is not None  # found above; prompts are never deleted
                ensure_run(session, run, self.settings, self.door)
                track = find_track(session, run, prompt.id)
                reports.append(
                    evolve_group(
                        session,
                        run=run,
                        prompt=prompt,
                        persistent=persistent_version(session, track, group),
                        group=group_rollouts([requests[i] for i in indices], group),
                        settings=self.settings,
                        generator=self.backends.factory(self.settings.generator),
                        judge=ExecutorJudge(spec, self.backends.factory(spec)),
                    )
                )
        log_reports(run, reports, self.settings.generator_failure_alarm)
        return reports


def log_reports(run: str, reports: Sequence[StepReport], alarm: float) -> None:
    """Each step's criteria added and pruned, and why a step failed; a warning where the
    generator failed for more than ``alarm`` of the steps (it never stops a run), and for every
    step an outage of the judge left as it was."""
    for report in reports:
        for text in report.added:
            log.info("evolution %s prompt %s: added %r", run, report.prompt_id, text)
        for text in report.pruned:
            log.info("evolution %s prompt %s: pruned %r", run, report.prompt_id, text)
        if report.judge_failed:
            log.warning("evolution %s prompt %s: %s", run, report.prompt_id, report.error)
        elif report.error:
            log.info("evolution %s prompt %s: %s", run, report.prompt_id, report.error)
    failed = sum(1 for r in reports if r.generator_failed)
    if reports and failed / len(reports) > alarm:
        log.warning(
            "evolution %s: the generator failed for %d of %d prompts this step; their "
            "rubrics are left as they were",
            run,
            failed,
            len(reports),
        )
