"""Request and response bodies: what the OpenAPI schema documents and clients send."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from rubricsvc.documents import DocumentRecord
from rubricsvc.evolution.store import RUN_NAME
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE, AggregationName
from rubricsvc.judging.config import ModeName
from rubricsvc.rubrics.schemas import Message, TrajectoryMessage
from rubricsvc.scoring.rewards import RewardResult

EVOLUTION_RUN = RUN_NAME.pattern

MAX_PAGE = 500
MAX_OFFSET = 10**9  # bounded so that offset + limit fits any database integer
MAX_ID = 2**31 - 1  # ids and version numbers are 32-bit integers in the database

RowId = Annotated[int, Field(ge=1, le=MAX_ID)]


def _usable_ref(ref: str) -> str:
    """A version reference (NAME, NAME@N or a version id) whose number fits the database."""
    text = ref.strip()
    number = text if text.isdigit() else text.rpartition("@")[2] if "@" in text else ""
    if number.isdigit():
        if not (number.isascii() and number.isdecimal()):
            raise ValueError(f"{number!r} is not a version number (digits 0-9)")
        if int(number) > MAX_ID:
            raise ValueError(f"version number or id out of range (at most {MAX_ID})")
    return ref


RubricRef = Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_usable_ref)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Page(BaseModel):
    items: list[Any]
    total: int
    limit: int
    offset: int
    next_offset: int | None = Field(
        description="Pass as offset for the next page; null at the end."
    )


# A stored mapping column that may be NULL, shown as {}.
StoredMapping = Annotated[dict[str, Any], BeforeValidator(lambda value: value or {})]


class PromptOut(BaseModel):
    """A stored prompt (read from its row)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    external_id: str | None
    messages: list[dict[str, Any]]
    reference_answer: str | None
    tags: StoredMapping
    content_hash: str
    created_at: datetime | None


class PromptIn(_Body):
    text: str | None = Field(default=None, min_length=1, description="One user message.")
    messages: list[Message] | None = Field(default=None, min_length=1)
    external_id: str | None = Field(default=None, min_length=1, max_length=200)
    reference_answer: str | None = None
    tags: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _text_xor_messages(self) -> PromptIn:
        if (self.text is None) == (self.messages is None):
            raise ValueError("give exactly one of 'text' or 'messages'")
        return self


class CreatedPrompt(BaseModel):
    created: bool
    prompt: PromptOut


class VersionOut(BaseModel):
    id: int
    ref: str
    rubric: str
    number: int
    status: str
    origin: str
    parent_id: int | None
    content_hash: str
    prompt_id: int | None
    reviewed_by: str | None
    review_note: str | None = None
    created_at: datetime | None
    rubric_spec: dict[str, Any] = Field(description="The version in the rubric file format.")


class SavedRubric(BaseModel):
    outcome: str = Field(description="created, new version, or unchanged")
    version: VersionOut


class ReviewIn(_Body):
    """The reviewer is the API key's name; a note says why (kept with the version)."""

    note: str | None = Field(default=None, max_length=4000)


class GenerateIn(_Body):
    """Drafting with the server's generator (the bundled model unless the server is configured
    otherwise); a client chooses only what to draft and the sampling, never a backend URL."""

    prompt_ids: list[str] = Field(min_length=1, description="External ids of stored prompts.")
    name_prefix: str = Field(default="gen/", min_length=1, max_length=100)
    with_generic: bool = False
    min_criteria: int | None = Field(default=None, ge=1, le=100)
    max_criteria: int | None = Field(default=None, ge=1, le=100)
    temperature: float | None = Field(default=None, ge=0, le=2)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    retries: int | None = Field(default=None, ge=0, le=10)


class DraftOut(BaseModel):
    prompt: str
    status: str
    ref: str | None
    attempts: int
    error: str | None


class GenerateOut(BaseModel):
    generator_hash: str
    drafts: list[DraftOut]
    backend_requests: int


class CompletionOut(BaseModel):
    """A stored completion (read from its row, whose ``meta`` is shown as ``metadata``)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    prompt_id: int
    external_id: str | None
    text: str
    source: str | None
    metadata: StoredMapping = Field(validation_alias="meta")
    created_at: datetime | None


class IngestOut(BaseModel):
    added: int
    unchanged: int


class JobIn(_Body):
    judge: str = Field(default="embedded", min_length=1)
    mode: ModeName | None = None
    aggregation: AggregationName = "rar"
    min_coverage: float = Field(default=DEFAULT_MIN_COVERAGE, ge=0, le=1)
    completion_ids: list[RowId] = Field(default_factory=list)
    prompt_ids: list[str] = Field(default_factory=list, description="Prompt external ids.")
    sources: list[str] = Field(default_factory=list)
    rubric: RubricRef | None = Field(default=None, description="One rubric version (REF) for all.")
    include_drafts: bool | None = None


class RewardItem(_Body):
    completion: str = Field(description="The response to score.")
    prompt_id: str | None = Field(default=None, description="The prompt's external id.")
    prompt: str | list[Message] | None = Field(
        default=None,
        description="The prompt itself (text is one user message), found by its hash.",
    )
    rubric: RubricRef | None = Field(default=None, description="A rubric version (REF) to use.")
    trajectory: list[TrajectoryMessage] | None = Field(
        default=None,
        min_length=1,
        description="An agent's messages (tool calls, tool results) that led to the completion: "
        "what trajectory criteria and checks read.",
    )

    documents: list[DocumentRecord] | None = Field(
        default=None,
        description="The evidence it used (text, or a stored document's content_hash; url, "
        "title, label): what citation criteria check its cited claims against.",
    )

    group: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The group it belongs to (verl's uid): the server gathers a group's "
        "rollouts before judging them (see group_size). Default: its prompt's.",
    )

    @model_validator(mode="after")
    def _prompt_given(self) -> RewardItem:
        if self.prompt_id is None and self.prompt is None:
            raise ValueError("give prompt_id or prompt")
        return self


class RewardsIn(_Body):
    items: list[RewardItem] = Field(min_length=1)
    judge: str = Field(default="embedded", min_length=1)
    mode: ModeName | None = None
    aggregation: AggregationName = "rar"
    min_coverage: float = Field(default=DEFAULT_MIN_COVERAGE, ge=0, le=1)
    include_drafts: bool | None = None
    source: str = Field(default="rewards", min_length=1, max_length=200)
    group_size: int | None = Field(
        default=None,
        ge=2,
        le=1024,
        description="Gather each group (an item's group, else its prompt) until it has this "
        "many rollouts, over requests, then judge it as one batch. Default: the server's "
        "RUBRICSVC_API_REWARD_GROUP_SIZE where an item names a group or evolution is given.",
    )
    evolution: str | None = Field(
        default=None,
        pattern=EVOLUTION_RUN,
        description="An evolution run: each group is judged under its prompt's current "
        "evolved set, and each complete group evolves it by one step.",
    )


class RewardsOut(BaseModel):
    rewards: list[float | None] = Field(description="One per item, null where masked.")
    results: list[RewardResult]
    judge: str
    judge_config_hash: str
    aggregation: str
    judgments: int
    computed: int
    cached: int
    failed: int


class OpenRLHFIn(BaseModel):
    """The body of OpenRLHF's remote reward model client."""

    query: list[str] = Field(min_length=1, description="Prompt and response, as the policy saw it.")
    prompts: list[str] = Field(description="The prompt part of each query.")
    labels: list[str | None] | None = Field(
        default=None, description="Each prompt's external id (OpenRLHF's --data.label_key column)."
    )

    @model_validator(mode="after")
    def _same_lengths(self) -> OpenRLHFIn:
        if len(self.prompts) != len(self.query):
            raise ValueError("prompts must have one entry per query")
        if self.labels is not None and len(self.labels) != len(self.query):
            raise ValueError("labels must have one entry per query")
        return self


class OpenRLHFOut(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


class JudgeOut(BaseModel):
    name: str
    backend: str
    model: str | None
    mode: str
    stored: bool
    config_hash: str | None
