"""The evolution step: one prompt's group in, its evolved set moved on by one step.

Every door (the trainer, and later the reward API with a gathered group) calls
``evolve_group`` with the group's rollouts and their verdicts under the current set:

1. The generator sees the prompt, the current criteria and the rollouts (neutralized, best
   first) and writes 0 to ``max_new`` new criteria, read as strictly as a draft. An answer it
   cannot give (a backend failure, garbage after every retry) leaves the set as it was; the
   step is recorded as ``generator_failed`` and counted on the track. It never raises.
2. Proposals copied word for word from a rollout (``proposals.refuse_copied``: the policy
   wrote them) and those that repeat or mirror a known criterion (``refuse_known``) are
   refused.
3. The new criteria are judged over the group; every evolved candidate's spread is measured;
   those that do not vary go inactive, and at most ``max_active`` stay (``selection``).
   Persistent criteria are never pruned.
4. When the active set (or a weight) changed, it is saved as a new immutable version (origin
   ``evolved``, parent the current version, never approved here), which rewards of the prompt
   are computed under from then on. The step, the criteria it added (with the rollouts and the
   generator they came from) and each candidate's spread are stored.

A verdict that failed for a reason outside the response (the judge's own reply unusable, or
the infrastructure: ``judging.failures``), in the group's verdicts or in the new criteria's,
says nothing of how a criterion separates the rollouts: such a step neither prunes nor adds,
and is recorded as ``judge_failed`` (the generator is not asked when the group's verdicts
already failed). A failure the response caused is a value (its worst), as in scoring.

The track's row is locked for the step, which is numbered there: the track's last step + 1,
whichever door takes it. A caller that names a step number already taken gets what was
stored, so a repeated request does not evolve twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.retry import Backoff
from rubricsvc.errors import ValidationFailed
from rubricsvc.evolution.judging import CriterionJudge
from rubricsvc.evolution.proposals import (
    Refusal,
    ShownRollout,
    evolution_chat,
    evolution_request,
    parse_proposal,
    refuse_copied,
    refuse_known,
)
from rubricsvc.evolution.selection import Candidate, Decision, decide
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.evolution.store import ensure_run, evolved_rubric_name, locked_track
from rubricsvc.hashing import content_hash
from rubricsvc.models import (
    CriterionSpread,
    EvolutionStep,
    EvolutionTrack,
    EvolvedCriterion,
    EvolvedState,
    Prompt,
    RubricVersion,
    StepOutcome,
)
from rubricsvc.models.base import utcnow
from rubricsvc.rubrics.drafts import DraftError
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec
from rubricsvc.rubrics.versions import save_grown, spec_of


@dataclass(frozen=True)
class GroupRollout:
    """One rollout of the prompt: its text, its reward under the current set, and its
    verdicts there (criterion id in the current version -> value; None: failed)."""

    text: str
    score: float | None
    values: Mapping[int, float | None] = field(default_factory=dict)
    # Of its verdicts, those that failed for a reason outside the response (an outage).
    outages: int = 0


@dataclass
class StepReport:
    run: str
    prompt_id: int
    step: int
    outcome: StepOutcome
    version_before: str
    version_after: str
    added: list[str] = field(default_factory=list)  # new criteria that are active now
    pruned: list[str] = field(default_factory=list)  # criteria active before, inactive now
    born_inactive: list[str] = field(default_factory=list)  # new, pruned at once
    refused: list[Refusal] = field(default_factory=list)
    spreads: dict[str, float | None] = field(default_factory=dict)  # text -> spread
    active: int = 0  # evolved criteria active after the step
    error: str | None = None
    replayed: bool = False  # the step was taken before: this is what it stored

    @property
    def generator_failed(self) -> bool:
        return self.outcome == StepOutcome.GENERATOR_FAILED

    @property
    def judge_failed(self) -> bool:
        return self.outcome == StepOutcome.JUDGE_FAILED


def evolve_group(
    session: Session,
    *,
    run: str,
    prompt: Prompt,
    persistent: RubricVersion,
    group: Sequence[GroupRollout],
    settings: EvolutionSettings,
    generator: Callable[[], JudgeBackend],
    judge: CriterionJudge,
    step: int | None = None,
) -> StepReport:
    """Evolve ``prompt``'s set in ``run`` by one step; see the module docstring. ``step``:
    None for the track's next (what every door takes); a number replays that step when it was
    taken. Flushes only: the caller's transaction keeps the step, or nothing of it."""
    if len(group) < 2:
        raise ValidationFailed(
            f"an evolution step needs a group of 2 or more rollouts of one prompt, got {len(group)}"
        )
    run_row = ensure_run(session, run, settings)
    track = locked_track(session, run_row, prompt, persistent)
    if step is None:
        # Under the track's lock: two groups of the prompt completing at once take turns.
        last = session.scalar(
            select(func.max(EvolutionStep.step)).where(EvolutionStep.track_id == track.id)
        )
        step = 0 if last is None else last + 1
    taken = session.scalars(
        select(EvolutionStep).where(EvolutionStep.track_id == track.id, EvolutionStep.step == step)
    ).first()
    if taken is not None:
        return _replayed(run, prompt, taken, track)
    return _Step(session, run, prompt, track, group, step, settings).run(generator, judge)


class _Step:
    def __init__(
        self,
        session: Session,
        run: str,
        prompt: Prompt,
        track: EvolutionTrack,
        group: Sequence[GroupRollout],
        step: int,
        settings: EvolutionSettings,
    ) -> None:
        self.session = session
        self.run_name = run
        self.prompt = prompt
        self.track = track
        self.group = group
        self.step = step
        self.settings = settings
        # By id: the relationship may hold what an earlier step of this session replaced.
        current = session.get(RubricVersion, track.current_version_id)
        assert current is not None  # a foreign key
        self.current = current
        self.persistent = spec_of(track.persistent_version).criteria
        self.active = [c for c in track.criteria if c.state == EvolvedState.ACTIVE]
        self.outages = 0  # the candidates' verdicts that failed outside the responses

    def run(self, generator: Callable[[], JudgeBackend], judge: CriterionJudge) -> StepReport:
        outages = sum(r.outages for r in self.group)
        if outages:
            return self._judge_failed(outages, "the group's", {})
        current_specs = spec_of(self.current).criteria
        shown = [ShownRollout(r.text, r.score) for r in self.group]
        chat = evolution_chat(
            self.settings.generator,
            self.prompt.messages,
            current_specs,
            shown,
            self.settings.max_new,
        )
        self.track.generator_calls += 1
        answer = self._ask(generator, chat)
        if isinstance(answer, str):
            self.track.generator_failures += 1
            return self._failed(answer)
        proposed, detail = answer
        known = [*self.persistent, *(_spec_of_evolved(c) for c in self.track.criteria)]
        fresh, copied = refuse_copied(proposed, [r.text for r in self.group])
        accepted, refused = refuse_known(fresh, known)
        refused = copied + refused
        candidates, new_specs = self._candidates(accepted, judge)
        if self.outages:
            return self._judge_failed(self.outages, "the candidates'", detail)
        decisions = decide(candidates, self.settings)
        return self._record(detail, refused, candidates, new_specs, decisions)

    def _ask(
        self, generator: Callable[[], JudgeBackend], chat: list[dict[str, str]]
    ) -> tuple[list[CriterionSpec], dict[str, Any]] | str:
        """The parsed proposals and the generator's detail, or why there are none."""
        spec = self.settings.generator
        backoff = Backoff(spec.retries, spec.retry_backoff)
        error = "no attempt"
        backend = generator()
        try:
            for attempt in range(spec.retries + 1):
                request = evolution_request(spec, chat, self.settings.max_new, attempt)
                (result,) = backend.generate([request])
                if isinstance(result, BackendError):
                    error = f"generator failed: {result}"
                    if not result.retryable:
                        break
                    if backoff.allows(True, attempt):
                        backoff.wait(attempt, [result])
                    continue
                try:
                    proposed = parse_proposal(result.text, spec, self.settings.max_new)
                except DraftError as err:
                    error = f"unusable answer: {err}"
                    continue
                return proposed, self._generator_detail(backend.model, attempt)
        finally:
            backend.close()
        return error

    def _generator_detail(self, model: str, attempt: int) -> dict[str, Any]:
        spec = self.settings.generator
        template = spec.prompt_template()
        return {
            "model": model,
            "backend": spec.backend,
            "generator_hash": spec.config_hash(),
            "template": template.name,
            "template_sha256": template.sha256,
            "sampling": spec.sampling(attempt),
            "attempts": attempt + 1,
        }

    def _candidates(
        self, accepted: list[CriterionSpec], judge: CriterionJudge
    ) -> tuple[list[Candidate], dict[str, CriterionSpec]]:
        """The active evolved criteria (their verdicts from the group's, judged where the
        group lacks them) and the accepted proposals (judged over the group)."""
        by_hash = {c.content_hash: c.id for c in self.current.criteria}
        known: dict[str, list[float | None]] = {}
        to_judge: list[CriterionSpec] = []
        for criterion in self.active:
            criterion_id = by_hash.get(criterion.content_hash)
            if criterion_id is not None and all(criterion_id in r.values for r in self.group):
                known[criterion.content_hash] = [r.values[criterion_id] for r in self.group]
            else:
                to_judge.append(_spec_of_evolved(criterion))
        new_specs = {content_hash(c.judged_content()): c for c in accepted}
        to_judge += accepted
        judged = judge(self.prompt.messages, to_judge, [r.text for r in self.group])
        for spec, values in zip(to_judge, judged, strict=True):
            known[content_hash(spec.judged_content())] = values
        # The judge gives None only for a failure outside the response (it charges the
        # response's own failures their worst value), so every None here is an outage.
        self.outages = sum(v is None for values in judged for v in values)
        candidates = [
            Candidate(c.content_hash, c.weight, c.id, tuple(known[c.content_hash]))
            for c in self.active
        ]
        first_new = max((c.id for c in self.track.criteria), default=0) + 1
        candidates += [
            Candidate(key, spec.weight, first_new + n, tuple(known[key]))
            for n, (key, spec) in enumerate(new_specs.items())
        ]
        return candidates, new_specs

    def _record(
        self,
        detail: dict[str, Any],
        refused: list[Refusal],
        candidates: list[Candidate],
        new_specs: dict[str, CriterionSpec],
        decisions: list[Decision],
    ) -> StepReport:
        row = self._step_row(StepOutcome.UNCHANGED, detail, refused)
        rows = {c.content_hash: c for c in self.active}
        for key, spec in new_specs.items():
            rows[key] = EvolvedCriterion(
                track_id=self.track.id,
                step_id=row.id,
                text=spec.text,
                explanation=spec.explanation,
                category=spec.category,
                theme=spec.theme,
                weight=spec.weight,
                content_hash=key,
                state=EvolvedState.ACTIVE,
            )
            self.track.criteria.append(rows[key])
        self.session.flush()
        report = self._report(row)
        report.refused = refused
        for candidate, decision in zip(candidates, decisions, strict=True):
            criterion = rows[candidate.key]
            report.spreads[criterion.text] = decision.spread
            row.spreads.append(
                CriterionSpread(
                    criterion=criterion,
                    values=list(candidate.values),
                    spread=decision.spread,
                    weight=decision.weight,
                    active=decision.active,
                )
            )
            new = candidate.key in new_specs
            if not decision.active:
                criterion.state = EvolvedState.INACTIVE
                criterion.inactive_step = self.step
                criterion.inactive_reason = decision.reason
                (report.born_inactive if new else report.pruned).append(criterion.text)
            elif new:
                report.added.append(criterion.text)
        active = [(rows[d.key], d.weight) for d in decisions if d.active]
        active.sort(key=lambda pair: pair[0].id)
        version = self._save(active, row)
        if version.id != self.current.id:
            row.outcome = StepOutcome.EVOLVED
        row.version_after_id = version.id
        self.track.current_version = version
        self.track.updated_at = utcnow()
        self.session.flush()
        report.outcome = row.outcome
        report.version_after = version.ref
        report.active = len(active)
        return report

    def _save(
        self, active: list[tuple[EvolvedCriterion, float]], row: EvolutionStep
    ) -> RubricVersion:
        """The version of the persistent criteria plus the active evolved ones: the current
        one when that is its content, else a new evolved version grown from it."""
        base = spec_of(self.track.persistent_version)
        data = base.model_dump()
        data["criteria"] += [
            _spec_of_evolved(criterion, weight).model_dump() for criterion, weight in active
        ]
        generator: dict[str, Any] = {
            k: row.generator[k] for k in ("generator_hash", "template_sha256") if k in row.generator
        }
        data.update(
            name=evolved_rubric_name(self.run_name, self.prompt),
            prompt=None,
            description=f"evolution run {self.run_name}: {base.name} and criteria grown in training",
            origin="evolved",
            origin_detail={
                "run": self.run_name,
                "step": self.step,
                "evolution_step_id": row.id,
                "prompt_id": self.prompt.id,
                "prompt_external_id": self.prompt.external_id,
                "persistent": self.track.persistent_version.ref,
                "grown_from": self.current.ref,
                "evolved_criteria": [criterion.id for criterion, _ in active],
                **generator,
            },
            note=(
                f"grown by evolution run {self.run_name} at step {self.step} from "
                f"{self.current.ref}: {len(active)} evolved criteria active. Not approved: a "
                "reviewer decides."
            ),
        )
        spec = RubricSpec.model_validate(data)
        if spec.content_hash() == self.current.content_hash:
            return self.current
        return save_grown(self.session, spec, self.current).version

    def _step_row(
        self,
        outcome: StepOutcome,
        detail: dict[str, Any],
        refused: list[Refusal],
        error: str | None = None,
    ) -> EvolutionStep:
        row = EvolutionStep(
            track_id=self.track.id,
            step=self.step,
            version_before_id=self.current.id,
            version_after_id=self.current.id,
            outcome=outcome,
            rollouts=[
                {"text": r.text, "score": r.score, "sha256": content_hash(r.text)}
                for r in self.group
            ],
            generator=detail,
            refused=[vars(r) for r in refused],
            error=error,
        )
        self.session.add(row)
        self.session.flush()
        return row

    def _failed(self, error: str) -> StepReport:
        detail = self._generator_detail(
            self.settings.generator.model or "", self.settings.generator.retries
        )
        row = self._step_row(StepOutcome.GENERATOR_FAILED, detail, [], error)
        self.track.updated_at = utcnow()
        self.session.flush()
        report = self._report(row)
        report.active = len(self.active)
        return report

    def _judge_failed(self, outages: int, whose: str, detail: dict[str, Any]) -> StepReport:
        """The step recorded as ``judge_failed``: nothing pruned, nothing added."""
        error = (
            f"{outages} of {whose} verdicts failed for reasons outside the responses (the "
            "judge or the infrastructure): nothing pruned or added"
        )
        row = self._step_row(StepOutcome.JUDGE_FAILED, detail, [], error)
        self.track.updated_at = utcnow()
        self.session.flush()
        report = self._report(row)
        report.active = len(self.active)
        return report

    def _report(self, row: EvolutionStep) -> StepReport:
        return StepReport(
            self.run_name,
            self.prompt.id,
            self.step,
            row.outcome,
            self.current.ref,
            self.current.ref,
            error=row.error,
        )


def _spec_of_evolved(criterion: EvolvedCriterion, weight: float | None = None) -> CriterionSpec:
    return CriterionSpec(
        text=criterion.text,
        explanation=criterion.explanation,
        weight=criterion.weight if weight is None else weight,
        category=criterion.category,
        theme=criterion.theme,
    )


def _replayed(run: str, prompt: Prompt, row: EvolutionStep, track: EvolutionTrack) -> StepReport:
    added = [c for c in track.criteria if c.step_id == row.id]
    spreads = {s.criterion.text: s.spread for s in row.spreads}
    return StepReport(
        run,
        prompt.id,
        row.step,
        row.outcome,
        row.version_before.ref,
        row.version_after.ref,
        added=[
            c.text for c in added if c.state == EvolvedState.ACTIVE or c.inactive_step != row.step
        ],
        pruned=[
            s.criterion.text for s in row.spreads if not s.active and s.criterion.step_id != row.id
        ],
        born_inactive=[c.text for c in added if c.inactive_step == row.step],
        spreads=spreads,
        # The evolved criteria of the version the step left: those after the persistent ones.
        active=len(row.version_after.criteria) - len(track.persistent_version.criteria),
        error=row.error,
        replayed=True,
    )
