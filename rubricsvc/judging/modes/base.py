"""The verdict-mode seam: what a mode is given, what it returns, and the protocol it meets.

A mode decides which judgments a rubric version needs for one completion (one per
criterion, per theme, or one for the whole rubric) and what content each one's cache key
covers, builds the backend calls that decide them and parses the replies, and turns the
judgments back into a score's outcomes (or brings its own aggregation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE, Status
from rubricsvc.judging.failures import ResponseFailurePolicy, empty_counts
from rubricsvc.judging.templates import PromptTemplate


@dataclass(frozen=True)
class CriterionView:
    """What a judge needs of a criterion."""

    id: int
    text: str
    explanation: str | None
    weight: float
    scale: dict[str, Any]
    theme: str | None = None
    target: str = "response"  # "trajectory": judged on the rendered trajectory

    @classmethod
    def of(cls, criterion: Any) -> CriterionView:
        """The view of a stored criterion (``models.Criterion``)."""
        return cls(
            criterion.id,
            criterion.text,
            criterion.explanation,
            criterion.weight,
            criterion.scale,
            criterion.theme,
            getattr(criterion, "target", None) or "response",
        )

    @property
    def on_trajectory(self) -> bool:
        return self.target == "trajectory"

    @property
    def levels(self) -> list[dict[str, Any]] | None:
        return self.scale.get("levels") if self.scale.get("type") == "ordinal" else None

    @property
    def scores(self) -> list[int]:
        return [int(level["score"]) for level in self.levels or []]


@dataclass(frozen=True)
class DocumentView:
    """A document a completion drew on (a search result, a cited page)."""

    label: str  # how the completion cites it ("3" for [3])
    url: str | None
    title: str | None
    text: str
    content_hash: str


@dataclass(frozen=True)
class CompletionView:
    """What a judge needs of a completion: the conversation so far and the response, and for an agent
    rollout the trajectory that led to the answer."""

    id: int
    messages: list[dict[str, Any]]
    response: str
    reference: str | None = None
    response_hash: str = ""  # the completion's content hash: what a comparison is keyed on
    # The agent's turns (OpenAI-style messages with tool calls and tool results), when stored.
    trajectory: tuple[dict[str, Any], ...] | None = None
    # The evidence it used, in its order (what citation criteria check its claims against).
    documents: tuple[DocumentView, ...] = ()


@dataclass(frozen=True)
class Item:
    """One judgment to make, by its cache key: one criterion, or several judged as one."""

    key: str
    criterion: CriterionView | None
    # A judgment of the whole rubric at once: every criterion, in order.
    rubric: tuple[CriterionView, ...] = ()
    # A judgment that compares completions (pairwise, group): them, in a canonical order.
    responses: tuple[CompletionView, ...] = ()
    # A citation check: one cited claim and its document (``modes.citation.CitedPair``).
    citation: Any = None


Request = GenerationRequest | ChoiceRequest
Parser = Callable[[Generation | ChoiceResult], dict[str, v.Verdict]]


@dataclass(frozen=True)
class Call:
    """One backend request that decides the judgments ``keys``."""

    request: Request
    keys: tuple[str, ...]
    parse: Parser


class ModeError(Exception):
    """An item that this mode cannot judge at all (no reference report, ...): not retried."""


class JudgeSettings(Protocol):
    """What a mode reads of a judge's configuration: its sampling settings and the options
    modes declare (``VerdictModeImpl.options``). ``config.JudgeSpec`` is one; a judge config
    names a mode, so it is the config that knows the modes, never the other way round."""

    @property
    def max_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def max_criteria(self) -> int: ...
    @property
    def likert_max(self) -> int: ...
    @property
    def reference(self) -> bool: ...
    @property
    def group_size(self) -> int: ...
    @property
    def group_repeats(self) -> int: ...


@dataclass(frozen=True)
class CallContext:
    """What the calls for one completion share: the judge, its template, the completion, and
    which attempt this is (a retry with sampling on gets another seed)."""

    spec: JudgeSettings
    template: PromptTemplate
    completion: CompletionView
    attempt: int = 0


CallBuilder = Callable[[CallContext, Sequence[Item]], list[Call]]


@dataclass(frozen=True)
class RubricCriterion:
    """One criterion of a rubric version as a mode plans and scores it."""

    id: int  # the stored criterion's id (an audit uses its position)
    position: int
    view: CriterionView
    content_hash: str
    required: bool = False
    check: dict[str, Any] | None = None  # a check criterion: computed, never judged
    citations: bool = False  # a citations criterion: each cited claim checked (modes.citation)


@dataclass(frozen=True)
class Case:
    """One completion under one rubric version, with the hashes cache keys are made of."""

    completion: CompletionView
    criteria: tuple[RubricCriterion, ...]
    judge_hash: str
    rubric_hash: str
    prompt_hash: str
    response_hash: str
    dimension_weights: Mapping[str, float] | None = None
    # The completions of the same prompt this one is compared with under the same version
    # (modes that compare: pairwise, group), in a stable order; the others ignore them.
    peers: tuple[CompletionView, ...] = ()
    spec: JudgeSettings | None = None  # the judge's settings a mode's plan may read (repeats)


@dataclass(frozen=True)
class Plan:
    """The judgments a case needs, and which one decides each judged criterion."""

    items: list[Item]
    key_of: dict[int, str]  # criterion id -> judgment key
    # criterion id -> its citation checks (a ``modes.citation.CitationPlan``), for citations
    # criteria, which several judgments decide.
    citations: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ruling:
    """A judgment as a score reads it, stored (scoring) or in memory (an audit)."""

    value: float | None  # None: the judgment failed
    label: str | None = None
    detail: Mapping[str, Any] | None = None
    failure: str | None = None  # its failure class when it failed
    error: str | None = None
    judgment_id: int | None = None


@dataclass(frozen=True)
class AssessOptions:
    """How a case's rulings become a score."""

    aggregation: str = "rar"
    min_coverage: float = DEFAULT_MIN_COVERAGE
    gate_cap: float | None = 0.0
    response_failure: ResponseFailurePolicy = ResponseFailurePolicy.WORST


@dataclass
class Assessment:
    """One case's score with its breakdown, failures by class and judged values."""

    value: float | None
    coverage: float
    status: Status
    reasons: list[str]
    criteria: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=empty_counts)
    # Each judgment's own value in plan order (None: failed), before any worst value.
    verdicts: list[float | None] = field(default_factory=list)


class VerdictModeImpl(Protocol):
    """A verdict mode, registered by ``name``; the built-in ones are in this package."""

    name: str
    template: str  # the bundled template (or a path) used when a judge names none
    # The aggregation the mode brings (its scores are stored under this name); None: the run's.
    aggregation: str | None
    decodes: bool  # whether sampling settings (max_tokens, temperature, seed) shape a verdict
    # JudgeSpec fields only this mode reads ("max_criteria", "likert_max"): hashed when set.
    options: frozenset[str]
    # The version of the text the mode writes itself (questions, answer formats, how it lists
    # criteria), hashed with the judge config as the template is: bump it whenever that text
    # changes, so no cached verdict is replayed for another question
    # (tests/unit/test_mode_wording.py holds the built-in modes to it).
    wording: str
    # Whether a judgment compares several completions of a prompt (pairwise, group): scoring
    # then gives each case its peers and keeps a prompt's completions in one job chunk.
    compares: bool
    # Whether each verdict's value is the judge's probability that a criterion is met (not a
    # decoded yes or no, a score or a comparison): what a calibration map corrects, so only
    # such a mode's judges can be calibrated.
    gives_probability: bool
    # Whether each judgment says whether one criterion is met (a probability, or 1 or 0): what
    # pointwise labels are compared with and what a student judge learns from its teacher.
    per_criterion: bool
    # Whether each judgment compares two completions shown in one order, keyed by
    # ``keys.pair_keys`` with the probabilities of first, second and tie in its detail: what
    # pairwise labels are compared with.
    judges_pairs: bool

    def plan(self, case: Case) -> Plan:
        """The judgments ``case`` needs, each keyed by exactly the content it depends on."""
        ...

    def count(self, criteria: Sequence[RubricCriterion]) -> int:
        """How many judgments one completion needs under a rubric of ``criteria``."""
        ...

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        """The backend calls that decide ``items``, each with its parser."""
        ...

    def assess(
        self, case: Case, plan: Plan, rulings: Mapping[str, Ruling], options: AssessOptions
    ) -> Assessment:
        """The case's score from its rulings (a missing ruling: not judged)."""
        ...
