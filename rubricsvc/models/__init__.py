"""The ORM: every table is imported here so Alembic's autogenerate sees all of them."""

from rubricsvc.models.apikey import ApiKey, ReviewSession
from rubricsvc.models.assignment import RubricAssignment
from rubricsvc.models.base import Base
from rubricsvc.models.completion import Completion
from rubricsvc.models.document import CompletionDocument, Document
from rubricsvc.models.evolution import (
    CriterionSpread,
    EvolutionRun,
    EvolutionStep,
    EvolutionTrack,
    EvolvedCriterion,
    EvolvedState,
    RunDoor,
    StepOutcome,
)
from rubricsvc.models.judging import (
    JudgeAudit,
    JudgeConfig,
    JudgeGate,
    JudgeGateStatus,
    Judgment,
    JudgmentStatus,
)
from rubricsvc.models.labels import JudgeEvaluation, Label, LabelKind, LabelSet
from rubricsvc.models.prompt import Prompt
from rubricsvc.models.rubric import (
    MUTABLE_VERSION_COLUMNS,
    Category,
    Criterion,
    CriterionKind,
    CriterionTarget,
    Origin,
    Rubric,
    RubricVersion,
    VersionStatus,
)
from rubricsvc.models.scoring import (
    ChunkStatus,
    JobStatus,
    RewardGroupMember,
    Score,
    ScoreChunk,
    ScoreJob,
    ScoreStatus,
    WorkerPresence,
)

__all__ = [
    "MUTABLE_VERSION_COLUMNS",
    "ApiKey",
    "Base",
    "Category",
    "ChunkStatus",
    "Completion",
    "CompletionDocument",
    "Criterion",
    "CriterionKind",
    "CriterionSpread",
    "CriterionTarget",
    "Document",
    "EvolutionRun",
    "EvolutionStep",
    "EvolutionTrack",
    "EvolvedCriterion",
    "EvolvedState",
    "JobStatus",
    "JudgeAudit",
    "JudgeConfig",
    "JudgeEvaluation",
    "JudgeGate",
    "JudgeGateStatus",
    "Judgment",
    "JudgmentStatus",
    "Label",
    "LabelKind",
    "LabelSet",
    "Origin",
    "Prompt",
    "ReviewSession",
    "RewardGroupMember",
    "Rubric",
    "RubricAssignment",
    "RubricVersion",
    "RunDoor",
    "Score",
    "ScoreChunk",
    "ScoreJob",
    "ScoreStatus",
    "StepOutcome",
    "VersionStatus",
    "WorkerPresence",
]
