"""Refining a rubric from scored completions of its prompt(s).

1. Read the stored scores of the version under one judge and aggregation, and the stored
   judgment behind each criterion of each scored completion.
2. Flag the criteria whose values do not vary (within ``tolerance``) across the completions of
   the same prompt: they separate nothing, so they give a policy no learning signal.
3. Propose new criteria with the generator: it sees the prompt, the rubric, and the best and
   the worst scored completion, and writes criteria that tell them apart. The reply is read as
   strictly as a draft and retried with the next seed until valid, or the refinement fails.
4. Save the rubric plus the proposals as a new draft version. Flagged criteria are kept (a
   reviewer decides), and the version's note lists what was flagged and what was proposed; the
   refined version itself is never changed.

Beside those, criterion validity (``rubricsvc.validation.validity``, found by the caller):
when the version has pointwise labels, each criterion the judge disagrees with the labellers
on (agreement below ``rubrics refine --validity-below``) is proposed for rewording or
removal. The proposal is listed in the report, the draft's note and its origin detail; the
criterion itself stays in the draft until a reviewer rewords or removes it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.retry import Backoff
from rubricsvc.backends.types import GenerationRequest
from rubricsvc.batching import batches
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error
from rubricsvc.judging.modes import render_conversation
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    Judgment,
    JudgmentStatus,
    RubricVersion,
    Score,
)
from rubricsvc.neutral import judged
from rubricsvc.rubrics.drafts import DraftError, parse_draft
from rubricsvc.rubrics.generator import GeneratorSpec, with_overrides
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec
from rubricsvc.rubrics.versions import SaveResult, save_rubric, spec_of

DEFAULT_TOLERANCE = 0.02  # values closer than this count as equal (probabilities)
REFINEMENT_TEMPLATE = "rubric_refinement"
MAX_RESPONSE_CHARS = 4000  # each response shown to the generator is cut to this


@dataclass(frozen=True)
class RefineOptions:
    aggregation: str = "rar"  # the stored scores that rank the completions
    tolerance: float = DEFAULT_TOLERANCE
    max_proposals: int = 3
    propose: bool = True  # False: only flag, save nothing
    template: str = REFINEMENT_TEMPLATE


@dataclass(frozen=True)
class ValidityProposal:
    """A criterion the judge disagrees with the labellers on: reword it or remove it."""

    position: int
    text: str
    agreement: float
    n: int
    interval: tuple[float, float] | None
    action: str = "reword or remove"


@dataclass(frozen=True)
class Flag:
    """A criterion whose judgments do not vary across the completions of a prompt."""

    position: int
    text: str
    value: float  # the mean of the compared values
    judgments: int


@dataclass
class _Scored:
    completion: Completion
    value: float | None
    values: dict[int, float]  # criterion id -> the value of its judgment (or check)


@dataclass
class RefinementReport:
    source: str
    judge: str
    aggregation: str
    completions: int
    groups: int  # prompts with at least two scored completions
    flagged: list[Flag] = field(default_factory=list)
    invalid: list[ValidityProposal] = field(default_factory=list)
    proposed: list[CriterionSpec] = field(default_factory=list)
    attempts: int = 0
    saved: SaveResult | None = None


def refine(
    session: Session,
    version: RubricVersion,
    judge_name: str,
    generator: GeneratorSpec,
    backend_factory: Callable[[], JudgeBackend],
    options: RefineOptions | None = None,
    invalid: Sequence[ValidityProposal] = (),
) -> RefinementReport:
    """Flag no-signal criteria of ``version`` and save a new draft with proposed criteria;
    ``invalid``: the criteria the judge disagrees with labellers on (criterion validity), listed
    as proposals to reword or remove and kept in the draft."""
    options = options or RefineOptions()
    judge = _judge(session, judge_name)
    scored = _scored_completions(session, version, judge, options.aggregation)
    groups = [g for g in _by_prompt(scored) if len(g) >= 2]
    if not groups:
        raise ValidationFailed(
            f"{version.ref} needs {options.aggregation} scores by judge {judge_name!r} for at "
            f"least two completions of one prompt (found {len(scored)} scored completion(s)); "
            f"score them first: rubricsvc score --rubric {version.ref} --judge {judge_name}"
        )
    report = RefinementReport(
        version.ref, judge_name, options.aggregation, len(scored), len(groups)
    )
    report.flagged = flag_constant(
        version.criteria, [[s.values for s in g] for g in groups], options.tolerance
    )
    report.invalid = list(invalid)
    if options.propose:
        generator = with_overrides(generator, template=options.template)
        spec = _Proposer(version, generator, options, report).run(backend_factory, groups)
        report.saved = save_rubric(session, spec)
    return report


def flag_constant(
    criteria: Sequence[Criterion], groups: Sequence[Sequence[dict[int, float]]], tolerance: float
) -> list[Flag]:
    """Criteria whose values spread by at most ``tolerance`` within every group that judged
    them at least twice (a criterion with fewer values anywhere is not flagged)."""
    flags = []
    for criterion in criteria:
        spreads: list[float] = []
        compared: list[float] = []
        for group in groups:
            values = [v[criterion.id] for v in group if criterion.id in v]
            if len(values) >= 2:
                spreads.append(max(values) - min(values))
                compared += values
        if spreads and max(spreads) <= tolerance:
            flags.append(Flag(criterion.position, criterion.text, fmean(compared), len(compared)))
    return flags


def _judge(session: Session, name: str) -> JudgeConfig:
    # The newest config of the name: the one that answers to it (scoring/judge_configs.py).
    newest = select(JudgeConfig).where(JudgeConfig.name == name).order_by(JudgeConfig.id.desc())
    judge = session.scalars(newest.limit(1)).first()
    if judge is None:
        raise NotFoundError(f"no stored judgments of a judge named {name!r}")
    return judge


def _scored_completions(
    session: Session, version: RubricVersion, judge: JudgeConfig, aggregation: str
) -> list[_Scored]:
    rows = session.execute(
        select(Score, Completion)
        .join(Completion, Score.completion_id == Completion.id)
        .where(
            Score.rubric_version_id == version.id,
            Score.judge_config_id == judge.id,
            Score.aggregation == aggregation,
        )
        .order_by(Completion.id)
    ).all()
    entries = [(score, completion, score.details.get("criteria", [])) for score, completion in rows]
    ids = sorted({e["judgment_id"] for _, _, es in entries for e in es if e.get("judgment_id")})
    judgments: dict[int, Judgment] = {}
    for batch in batches(ids):
        query = select(Judgment).where(Judgment.id.in_(batch))
        judgments.update((j.id, j) for j in session.scalars(query))
    return [
        _Scored(completion, score.value, _values(criteria, judgments))
        for score, completion, criteria in entries
    ]


def _values(entries: list[dict[str, Any]], judgments: dict[int, Judgment]) -> dict[int, float]:
    """Criterion id -> value: the stored judgment when it is ok, the check's own result."""
    values = {}
    for entry in entries:
        if entry.get("status") == "check" and entry.get("value") is not None:
            values[int(entry["criterion_id"])] = float(entry["value"])
        judgment = judgments.get(entry.get("judgment_id") or 0)
        if (
            judgment is not None
            and judgment.status == JudgmentStatus.OK
            and judgment.value is not None
        ):
            values[int(entry["criterion_id"])] = judgment.value
    return values


def _by_prompt(scored: list[_Scored]) -> list[list[_Scored]]:
    groups: dict[int, list[_Scored]] = defaultdict(list)
    for item in scored:
        groups[item.completion.prompt_id].append(item)
    return list(groups.values())


def _contrast(groups: list[list[_Scored]]) -> tuple[_Scored, _Scored]:
    """The best and worst scored completion of the prompt whose scores spread the most."""
    ranked = [
        sorted((s for s in group if s.value is not None), key=lambda s: s.value or 0.0)
        for group in groups
    ]
    ranked = [group for group in ranked if len(group) >= 2]
    if not ranked:
        raise ValidationFailed("no two completions of one prompt have a score value")
    widest = max(ranked, key=lambda g: (g[-1].value or 0.0) - (g[0].value or 0.0))
    return widest[-1], widest[0]


class _Proposer:
    """Asks the generator for criteria that separate the best completion from the worst."""

    def __init__(
        self,
        version: RubricVersion,
        generator: GeneratorSpec,
        options: RefineOptions,
        report: RefinementReport,
    ) -> None:
        self.version = version
        self.base = spec_of(version)
        self.generator = generator
        self.options = options
        self.report = report

    def run(
        self, backend_factory: Callable[[], JudgeBackend], groups: list[list[_Scored]]
    ) -> RubricSpec:
        best, worst = _contrast(groups)
        chat = self._chat(best, worst)
        backend = backend_factory()
        backoff = Backoff(self.generator.retries, self.generator.retry_backoff)
        error = "no attempt"
        try:
            for attempt in range(self.generator.retries + 1):
                self.report.attempts = attempt + 1
                (result,) = backend.generate([self._request(chat, attempt)])
                if isinstance(result, BackendError):
                    if not result.retryable:
                        raise result
                    error = str(result)
                    if backoff.allows(True, attempt):
                        backoff.wait(attempt, [result])
                    continue
                try:
                    return self._refined(result.text, attempt, backend.model, (best, worst))
                except DraftError as err:
                    error = str(err)
        finally:
            backend.close()
        raise ValidationFailed(
            f"no valid proposal for {self.version.ref} after {self.report.attempts} "
            f"attempt(s); last: {error}; nothing was stored"
        )

    def _request(self, chat: list[dict[str, str]], attempt: int) -> GenerationRequest:
        most = self.options.max_proposals
        schema = self.generator.json_schema(1, most) if self.generator.structured_output else None
        return GenerationRequest(chat, json_schema=schema, **self.generator.sampling(attempt))

    def _chat(self, best: _Scored, worst: _Scored) -> list[dict[str, str]]:
        criteria = "\n".join(
            f"{n}. [{c.category}, {c.theme or 'no theme'}] {c.text}"
            for n, c in enumerate(self.base.criteria, start=1)
        )
        return self.generator.prompt_template().render(
            prompt=render_conversation(best.completion.prompt.messages),
            criteria=criteria,
            best=_shown(best.completion.text),
            worst=_shown(worst.completion.text),
            best_score=f"{best.value:.3f}",
            worst_score=f"{worst.value:.3f}",
            max_criteria=str(self.options.max_proposals),
            themes=", ".join(self.generator.themes),
        )

    def _refined(
        self, text: str, attempt: int, model: str, pair: tuple[_Scored, _Scored]
    ) -> RubricSpec:
        proposed = parse_draft(text, self.generator, 1, self.options.max_proposals)
        data = self.base.model_dump()
        data["criteria"] += [c.model_dump() for c in proposed]
        data.update(
            origin="llm",
            origin_detail=self._detail(attempt, model, pair, proposed),
            note=self._note(proposed),
        )
        try:
            refined = RubricSpec.model_validate(data)
        except ValidationError as err:  # e.g. a proposal repeats a criterion of the rubric
            raise DraftError(describe_validation_error(err, limit=1)) from None
        self.report.proposed = proposed
        return refined

    def _detail(
        self, attempt: int, model: str, pair: tuple[_Scored, _Scored], proposed: list[CriterionSpec]
    ) -> dict[str, Any]:
        template = self.generator.prompt_template()
        return {
            "refined_from": self.version.ref,
            "judge": self.report.judge,
            "aggregation": self.report.aggregation,
            "tolerance": self.options.tolerance,
            "completions": self.report.completions,
            "flagged": [vars(flag) for flag in self.report.flagged],
            "criterion_validity": [vars(item) for item in self.report.invalid],
            "proposed": [c.text for c in proposed],
            "contrasted_completions": [s.completion.id for s in pair],
            "generator_model": model,
            "template": template.name,
            "template_sha256": template.sha256,
            "sampling": self.generator.sampling(attempt),
            "generator_hash": self.generator.config_hash(),
            "attempts": attempt + 1,
        }

    def _note(self, proposed: list[CriterionSpec]) -> str:
        flagged = "; ".join(
            f"#{f.position + 1} {f.text!r} (always {f.value:.2f})" for f in self.report.flagged
        )
        invalid = "; ".join(
            f"#{i.position + 1} {i.text!r} (agreement {i.agreement:.2f}, n={i.n})"
            for i in self.report.invalid
        )
        return (
            f"refined from {self.version.ref} with the {self.report.aggregation} scores of judge "
            f"{self.report.judge} over {self.report.completions} completion(s). "
            f"Flagged, no variation across completions (kept for review): {flagged or 'none'}. "
            f"Reword or remove, the judge disagrees with the labellers (kept for review): "
            f"{invalid or 'none'}. "
            f"Proposed: {'; '.join(repr(c.text) for c in proposed)}."
        )


def _shown(text: str) -> str:
    cut = text if len(text) <= MAX_RESPONSE_CHARS else text[:MAX_RESPONSE_CHARS] + " [...]"
    return judged(cut)
