"""Evolving rubrics in ``rubricsvc train`` (``reward.evolution``): each prompt's reward is
computed under its evolved version, and every ``every`` steps each prompt's group evolves it.

Per step, before scoring, each request is routed to the version its prompt's track holds now
(the persistent version before its first evolution: the reward then names the version it
was computed under). After scoring, each due prompt's group (its rollouts of the step, their
rewards and per-criterion verdicts) goes to the evolve loop (``rubricsvc.evolution.loop``,
the reward API's too), one transaction per prompt; the run is the trainer's alone (a server
never steps it). The criteria a step writes reward the prompt from the next step on.

Logged per step: ``evolution/prompts`` (the prompts that evolved: generator calls),
``evolution/active`` (evolved criteria active, summed over the step's prompts),
``evolution/new``, ``evolution/pruned``, ``evolution/refused``,
``evolution/generator_failures``, ``evolution/judge_failures`` (prompts whose step an
outage of the judge left as it was); ``evolution/persistent_reward`` and
``evolution/evolved_reward`` (each rollout's reward over the persistent criteria alone and
over the evolved ones alone, as DR Tulu logs them); and ``evolution/direction_agreement``,
the share of a group's pairs of rollouts that the two parts order the same way (pairs that
either part ties are left out). A generator that fails is counted and logged, past
``generator_failure_alarm`` of a step's calls as a warning (by the evolve loop,
``rubricsvc.evolution.loop``, which the reward API runs too); it never stops the run.

The new criteria are judged by the judge the reward judged the step with (``judged_by``): after
a judge refresh swaps the reward's judge, the evolution judges, prunes and logs with the new
one. A step is numbered on its prompt's track (its last + 1, under the track's lock), not by
TRL's global step; ``every`` still counts TRL's steps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricsvc.judging.aggregation import Outcome, aggregate
from rubricsvc.scoring.rewards import RewardRequest, RewardResult

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

    from rubricsvc.backends.provider import BackendProvider
    from rubricsvc.evolution.step import StepReport
    from trainer.config import ScorerSettings

LogMetric = Callable[[str, float], None]


class RubricEvolution:
    """The evolution of one training run's rubrics; settings only until first used."""

    def __init__(self, settings: ScorerSettings, run: str) -> None:
        assert settings.evolution is not None
        self.settings = settings
        self.evolution = settings.evolution
        self.run = settings.evolution.run or run
        self._engine: Engine | None = None
        self._backends: BackendProvider | None = None
        self.last_reports: list[StepReport] = []
        # The last batch's (persistent, evolved) reward parts, per result (see _parts).
        self.last_parts: list[tuple[float | None, float | None]] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "run": self.run}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["run"])  # type: ignore[misc]

    def _open(self) -> tuple[Engine, BackendProvider]:
        from rubricsvc.db import make_engine
        from trainer.scorers import shared_provider

        if self._engine is None or self._backends is None:
            self._engine = make_engine(self.settings.engine_url())
            self._backends = shared_provider(self.settings, None)
        return self._engine, self._backends

    def route(self, requests: Sequence[RewardRequest]) -> list[RewardRequest]:
        """Each request aimed at its prompt's current evolved version, where it has one. The
        run is the trainer's (created so at its first step): a run a server steps is refused
        before anything is rewarded under its versions."""
        from rubricsvc.db import session_scope
        from rubricsvc.evolution.rollouts import routed_to_current
        from rubricsvc.evolution.store import ensure_run
        from rubricsvc.models import RunDoor

        engine, _ = self._open()
        with session_scope(engine) as session:
            ensure_run(session, self.run, self.evolution, RunDoor.TRAINER)
            return routed_to_current(session, self.run, requests)

    def step(
        self,
        requests: Sequence[RewardRequest],
        results: Sequence[RewardResult],
        step: int,
        log_metric: LogMetric | None,
        judged_by: ScorerSettings | None = None,
    ) -> None:
        """Log the step's persistent and evolved rewards, and evolve each due prompt.
        ``judged_by``: the settings the reward judged ``results`` with now (a judge refresh
        swaps them): its judge judges the new criteria too, so a step never prunes by one
        judge what the reward judged with another. None: the settings given at the start."""
        from functools import partial

        from rubricsvc.db import session_scope
        from rubricsvc.evolution.loop import EvolveLoop
        from rubricsvc.evolution.rollouts import prompt_groups
        from rubricsvc.models import RunDoor
        from rubricsvc.scoring.judge_configs import find_reward_judge
        from rubricsvc.scoring.rewards import find_prompts

        judge = judged_by or self.settings
        engine, backends = self._open()
        with session_scope(engine) as session:
            groups = prompt_groups(find_prompts(session, requests))
            parts = self._parts(session, results)
            spec = find_reward_judge(session, judge.judge, judge.mode)
        self.last_parts = parts
        self._log_parts(parts, groups, log_metric)
        if not self.evolution.due(step):
            self.last_reports = []
            return
        # The evolve loop the reward API runs too; steps are numbered on each track.
        loop = EvolveLoop(self.evolution, backends, RunDoor.TRAINER)
        reports = loop.evolve(partial(session_scope, engine), self.run, spec, requests, results)
        self.last_reports = reports
        self._log_reports(reports, log_metric)

    def _parts(
        self, session: Session, results: Sequence[RewardResult]
    ) -> list[tuple[float | None, float | None]]:
        """Each result's reward over its persistent criteria and over its evolved ones (None:
        no such criteria, or no score)."""
        from sqlalchemy import select

        from rubricsvc.models import Criterion, EvolutionRun, EvolutionTrack, EvolvedCriterion

        ids = {int(e["criterion_id"]) for r in results for e in r.criteria if "criterion_id" in e}
        if not ids:
            return [(None, None) for _ in results]
        rows = session.execute(
            select(Criterion.id, Criterion.content_hash).where(Criterion.id.in_(ids))
        )
        hashes = {criterion_id: digest for criterion_id, digest in rows}
        # This run's evolved criteria only: another run may have grown one that is persistent here.
        evolved = set(
            session.scalars(
                select(EvolvedCriterion.content_hash)
                .join(EvolutionTrack, EvolvedCriterion.track_id == EvolutionTrack.id)
                .join(EvolutionRun, EvolutionTrack.run_id == EvolutionRun.id)
                .where(
                    EvolutionRun.name == self.run,
                    EvolvedCriterion.content_hash.in_(set(hashes.values())),
                )
            )
        )
        aggregation, floor = self.settings.aggregation, self.settings.min_coverage
        parts: list[tuple[float | None, float | None]] = []
        for result in results:
            entries = [e for e in result.criteria if "criterion_id" in e and "weight" in e]
            if result.reward is None or not entries:
                parts.append((None, None))
                continue
            grown = [e for e in entries if hashes.get(int(e["criterion_id"])) in evolved]
            kept = [e for e in entries if e not in grown]
            parts.append((_part(kept, aggregation, floor), _part(grown, aggregation, floor)))
        return parts

    def _log_parts(
        self,
        parts: list[tuple[float | None, float | None]],
        groups: dict[int, list[int]],
        log_metric: LogMetric | None,
    ) -> None:
        if log_metric is None:
            return
        persistent = [p for p, _ in parts if p is not None]
        evolved = [e for _, e in parts if e is not None]
        if persistent:
            log_metric("evolution/persistent_reward", sum(persistent) / len(persistent))
        if evolved:
            log_metric("evolution/evolved_reward", sum(evolved) / len(evolved))
        agreement = direction_agreement([[parts[i] for i in g] for g in groups.values()])
        if agreement is not None:
            log_metric("evolution/direction_agreement", agreement)

    def _log_reports(self, reports: list[StepReport], log_metric: LogMetric | None) -> None:
        # The steps themselves, and the generator's alarm, are logged by the evolve loop.
        if log_metric is None or not reports:
            return
        log_metric("evolution/prompts", float(len(reports)))  # the generator calls
        log_metric("evolution/active", float(sum(r.active for r in reports)))
        log_metric("evolution/new", float(sum(len(r.added) for r in reports)))
        log_metric("evolution/pruned", float(sum(len(r.pruned) for r in reports)))
        log_metric("evolution/refused", float(sum(len(r.refused) for r in reports)))
        log_metric(
            "evolution/generator_failures", float(sum(1 for r in reports if r.generator_failed))
        )
        log_metric("evolution/judge_failures", float(sum(1 for r in reports if r.judge_failed)))

    def write_history(self, path: Path) -> bool:
        """The run's whole evolution history (``rubricsvc rubrics evolution show``'s, every
        prompt's) as JSON at ``path``, so that a run directory holds what its rubrics grew;
        False when the run never evolved a prompt."""
        from rubricsvc.db import session_scope
        from rubricsvc.errors import NotFoundError
        from rubricsvc.evolution.history import run_history
        from rubricsvc.evolution.store import get_run

        engine, _ = self._open()
        with session_scope(engine) as session:
            try:
                data = run_history(get_run(session, self.run))
            except NotFoundError:
                return False
        # One line: its rollouts' texts make it long; `json.tool` or jq print it.
        path.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
        return True

    def close(self) -> None:
        from trainer.scorers import release_provider

        if self._backends is not None:
            release_provider(self._backends)
        if self._engine is not None:
            self._engine.dispose()
        self._engine = self._backends = None


def _part(entries: list[dict[str, Any]], aggregation: str, floor: float) -> float | None:
    if not entries or all(float(e["weight"]) < 0 for e in entries):
        return None  # no positive criterion: nothing to normalize by
    outcomes = [
        Outcome(
            int(e["criterion_id"]),
            float(e["weight"]),
            None if e.get("value") is None else float(e["value"]),
            e.get("theme"),
            bool(e.get("required", False)),
        )
        for e in entries
    ]
    return aggregate(aggregation, outcomes, min_coverage=floor).value


def direction_agreement(
    groups: Sequence[Sequence[tuple[float | None, float | None]]],
) -> float | None:
    """Over the pairs of rollouts within each group, the share that the persistent and the
    evolved part order the same way; pairs either part ties (or lacks) are left out."""
    agree = total = 0
    for group in groups:
        for (p1, e1), (p2, e2) in combinations(group, 2):
            if None in (p1, e1, p2, e2):
                continue
            assert p1 is not None and p2 is not None and e1 is not None and e2 is not None
            if p1 == p2 or e1 == e2:
                continue
            total += 1
            agree += (p1 > p2) == (e1 > e2)
    return agree / total if total else None
