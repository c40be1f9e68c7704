"""Evolving rubrics behind the reward API: the reward pipeline's ``GroupEvolution``.

The server gathers a prompt's group of rollouts (``scoring.groups``); for a call that names an
evolution run, the pipeline routes the group to each prompt's current evolved version before
judging (``route``), and once the group is judged, evolves its prompt by one step with the
group's verdicts (``evolve``), in the batch's transaction: the evolve loop
``rubricsvc train`` runs too (``evolution.loop``), with a complete group as a step. A track's
steps are numbered 0, 1, ... in the order its groups complete; the track's row is locked while
one is taken, so two server processes that complete groups of one prompt at once take turns.

Who may name a run is decided before a rollout waits (``run_for``, ``store.served_run``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

from sqlalchemy.orm import Session

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.errors import ValidationFailed
from rubricsvc.evolution.loop import EvolveLoop
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.evolution.step import StepReport
from rubricsvc.evolution.store import find_track, served_run
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import EvolutionRun, RunDoor
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest, find_prompts


class ServedEvolution:
    """The server's evolution (its ``RUBRICSVC_API_EVOLUTION`` settings), judged and generated
    with the server's kept models (``backends``); ``creators``: the names of the keys that may
    create runs without the review scope (``RUBRICSVC_API_EVOLUTION_CREATORS``)."""

    def __init__(
        self,
        settings: EvolutionSettings,
        backends: BackendProvider,
        creators: Sequence[str] = (),
    ) -> None:
        if settings.every != 1:
            # The server has no training step to count: each complete group is one step.
            raise ValidationFailed(
                "RUBRICSVC_API_EVOLUTION: every must be 1 (the server evolves each complete group)"
            )
        self.settings = settings
        self.creators = tuple(creators)
        self.loop = EvolveLoop(settings, backends, RunDoor.SERVER)
        self.last_reports: list[StepReport] = []

    def run_for(
        self, session: Session, run: str, key: tuple[str, list[str]] | None
    ) -> EvolutionRun:
        """The run ``run`` for the key (name, scopes; None: a server that checks none),
        created if new and the key may create runs; ``ForbiddenError`` otherwise."""
        return served_run(session, run, self.settings, key, self.creators)

    def route(
        self, session: Session, run: str, requests: list[RewardRequest]
    ) -> list[RewardRequest]:
        return self.loop.route(session, run, requests)

    def growth(self, session: Session, run: str, requests: list[RewardRequest]) -> int:
        """The criteria per rollout a group of these (routed) requests may be judged with
        beyond its current set: the evolved ones the set may still gain before it is judged
        (up to ``max_active``), and the ``max_new`` its step judges. The most over their
        prompts."""
        room = 0
        for prompt in {p.id: p for p in find_prompts(session, requests)}.values():
            track = find_track(session, run, prompt.id)
            active = 0
            if track is not None:
                active = len(track.current_version.criteria) - len(
                    track.persistent_version.criteria
                )
            room = max(room, self.settings.max_active - active)
        return room + self.settings.max_new

    def evolve(
        self,
        session: Session,
        run: str,
        spec: JudgeSpec,
        requests: list[RewardRequest],
        batch: RewardBatch,
    ) -> None:
        self.last_reports = self.loop.evolve(
            lambda: nullcontext(session), run, spec, requests, batch.results
        )
