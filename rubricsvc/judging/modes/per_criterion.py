"""The base of modes that judge each criterion on its own (alone or several per call)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rubricsvc.hashing import content_hash
from rubricsvc.judging import keys
from rubricsvc.judging.aggregation import Outcome
from rubricsvc.judging.modes.assess import assess_criteria, plain_outcome
from rubricsvc.judging.modes.base import (
    Assessment,
    AssessOptions,
    Call,
    CallContext,
    Case,
    Item,
    Plan,
    RubricCriterion,
    Ruling,
)
from rubricsvc.judging.modes.citation import CitationPlan, plan_citations
from rubricsvc.judging.modes.text import (
    NO_REFERENCE_REASON,
    lacks_reference,
    lacks_trajectory,
    trajectory_hash,
)


class PerCriterionMode:
    """One judgment per judged criterion (criteria with the same content: one), scored with
    the run's aggregation. A subclass sets the class attributes and writes ``calls``."""

    name: str = ""
    template: str = ""
    aggregation: str | None = None
    decodes: bool = True
    options: frozenset[str] = frozenset()
    # 2: the reference answer's and the trajectory's framing, citation checks (their template,
    # questions and passage budget: modes.citation).
    wording: str = "2"
    compares = False
    gives_probability: bool = False  # decoded verdicts: 1 or 0 (ordinal: a level)
    per_criterion: bool = True
    judges_pairs = False

    def key(self, case: Case, criterion: RubricCriterion) -> str:
        """The cache key of ``criterion``'s judgment: the judge, criterion, prompt and response
        (and, for a judge that shows references, the reference answer: none is content too). A
        trajectory criterion's judgment also covers the trajectory it was shown."""
        judged_hash = case.response_hash
        if criterion.view.on_trajectory:
            judged_hash = trajectory_hash(case.response_hash, case.completion.trajectory or ())
        if case.spec is not None and case.spec.reference:
            return keys.reference_key(
                case.judge_hash,
                criterion.content_hash,
                case.prompt_hash,
                content_hash(case.completion.reference or ""),
                judged_hash,
            )
        return keys.criterion_key(
            case.judge_hash, criterion.content_hash, case.prompt_hash, judged_hash
        )

    def plan(self, case: Case) -> Plan:
        items: list[Item] = []
        key_of: dict[int, str] = {}
        seen: set[str] = set()
        citations: dict[int, CitationPlan] = {}
        for criterion in case.criteria:
            if criterion.citations:
                checks, citations[criterion.id] = plan_citations(case)
                items += [i for i in checks if i.key not in seen]
                seen.update(i.key for i in checks)
                continue
            if criterion.check is not None or lacks_trajectory(criterion, case.completion):
                continue  # computed, or masked with the reason (assess_criteria)
            key = self.key(case, criterion)
            if key not in seen:  # two criteria with the same content: judged once
                seen.add(key)
                items.append(Item(key, criterion.view))
            key_of[criterion.id] = key
        return Plan(items, key_of, citations)

    def count(self, criteria: Sequence[RubricCriterion]) -> int:
        return len({c.content_hash for c in criteria if c.check is None})

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        raise NotImplementedError

    def outcome(self, criterion: RubricCriterion, ruling: Ruling) -> Outcome:
        """A judged criterion's outcome from its (successful) ruling."""
        return plain_outcome(criterion, ruling)

    def assess(
        self, case: Case, plan: Plan, rulings: Mapping[str, Ruling], options: AssessOptions
    ) -> Assessment:
        assessment = assess_criteria(case, plan, rulings, options, self.outcome)
        if lacks_reference(case.spec, case.completion):
            assessment.reasons.append(NO_REFERENCE_REASON)
        return assessment
