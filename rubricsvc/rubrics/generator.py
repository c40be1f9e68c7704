"""Rubric generator configurations: everything that shapes a drafted rubric, hashed like judges.

The hash covers backend, model, template (by its sha256), sampling, the criteria count range,
category weights, themes and structured output; the same prompt drafted under the same hash
reuses the stored draft instead of asking the model again. Retries are not hashed: they
change how often a prompt is tried, not what a valid draft looks like.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from rubricsvc.backends import hashed_backend_options
from rubricsvc.backends.weights_hash import local_model_sha256
from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_records
from rubricsvc.hashing import content_hash
from rubricsvc.judging.templates import PromptTemplate, load_template
from rubricsvc.models import Category
from rubricsvc.rubrics.schemas import THEMES

DEFAULT_CATEGORY_WEIGHTS: dict[Category, float] = {
    Category.ESSENTIAL: 5.0,
    Category.IMPORTANT: 3.0,
    Category.OPTIONAL: 1.0,
    Category.PITFALL: -3.0,
}
DEFAULT_THEMES = THEMES  # the rubric files' list (``schemas.THEMES``)
MAX_CRITERION_CHARS = 300  # a criterion is one checkable sentence, not a paragraph


class GeneratorSpec(BaseModel):
    """How rubrics are drafted: the model, its prompt and sampling, and what a draft must hold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = "transformers"
    model: str | None = None  # None: the backend's default (the embedded model)
    template: str = "rubric_generation"  # a bundled template name or a file path
    max_tokens: int = Field(default=1536, ge=1)
    temperature: float = Field(default=0.7, ge=0.0)
    seed: int = 0  # attempt N samples with seed + N
    min_criteria: int = Field(default=7, ge=1)
    max_criteria: int = Field(default=20, ge=1)
    category_weights: dict[Category, float] = Field(
        default_factory=lambda: dict(DEFAULT_CATEGORY_WEIGHTS)
    )
    themes: tuple[str, ...] = DEFAULT_THEMES
    # Ask the backend to decode only JSON that fits the draft's schema (every backend can).
    structured_output: bool = True
    backend_options: dict[str, Any] = Field(default_factory=dict)
    retries: int = Field(default=3, ge=0)  # further attempts after an invalid draft
    # Seconds before retrying a failed backend call, doubled each time (not hashed: it does
    # not change a draft).
    retry_backoff: float = Field(default=0.5, ge=0.0)
    # Read once, when the configuration is validated: the hash and every rendered request of
    # a run come from the same read of the file.
    _template: PromptTemplate = PrivateAttr()
    _model_sha256: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _consistent(self) -> GeneratorSpec:
        if self.min_criteria > self.max_criteria:
            raise ValueError(
                f"min_criteria ({self.min_criteria}) is greater than max_criteria ({self.max_criteria})"
            )
        missing = [c.value for c in Category if c not in self.category_weights]
        if missing:
            raise ValueError(f"category_weights has no weight for {', '.join(missing)}")
        for category, weight in self.category_weights.items():
            if (category == Category.PITFALL) != (weight < 0) or weight == 0:
                raise ValueError(
                    f"category_weights.{category.value}: pitfalls weigh less than 0, "
                    f"the other categories more than 0 (got {weight:g})"
                )
        if not self.themes or len(set(self.themes)) != len(self.themes):
            raise ValueError("themes must be a non-empty list of distinct names")
        self._template = load_template(self.template)
        # A local model folder is hashed by its files (as a judge's is): another model at the
        # same path is another generator.
        try:
            self._model_sha256 = local_model_sha256(self.backend, self.model)
        except ValidationFailed as err:
            raise ValueError(str(err)) from None
        return self

    def prompt_template(self) -> PromptTemplate:
        return self._template

    def weight(self, category: Category) -> float:
        return self.category_weights[category]

    def sampling(self, attempt: int = 0) -> dict[str, Any]:
        """Decoding settings of one attempt: a retry samples with the next seed."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed + attempt,
        }

    def hashed_settings(self) -> dict[str, Any]:
        """What determines a draft: the generator hash covers exactly this."""
        return {
            "backend": self.backend,
            "model": self.model,
            "template_sha256": self.prompt_template().sha256,
            "sampling": self.sampling(),
            "min_criteria": self.min_criteria,
            "max_criteria": self.max_criteria,
            "category_weights": {c.value: w for c, w in sorted(self.category_weights.items())},
            "themes": list(self.themes),
            "structured_output": self.structured_output,
            # Operational options left out; device and dtype as they resolve here.
            "backend_options": hashed_backend_options(self.backend, self.backend_options),
            # Only for a local model folder: a hub id or the embedded model keeps its hash.
            **({"model_sha256": self._model_sha256} if self._model_sha256 else {}),
        }

    def config_hash(self) -> str:
        return content_hash(self.hashed_settings())

    def json_schema(
        self, min_items: int | None = None, max_items: int | None = None, evidence: int = 0
    ) -> dict[str, Any]:
        """The JSON schema of a draft, for backends that decode to a schema; with ``evidence``
        documents, each criterion names the one it came from (0: none)."""
        properties: dict[str, Any] = {
            "text": {"type": "string"},
            "category": {"type": "string", "enum": [c.value for c in Category]},
            "theme": {"type": "string", "enum": list(self.themes)},
        }
        required = ["text", "category", "theme"]
        if evidence:
            # Numbers as strings: an enum every backend's schema decoding supports.
            properties["evidence"] = {
                "type": "string",
                "enum": [str(n) for n in range(evidence + 1)],
            }
            required.append("evidence")
        criterion = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        return {
            "type": "object",
            "properties": {
                "criteria": {
                    "type": "array",
                    "items": criterion,
                    "minItems": self.min_criteria if min_items is None else min_items,
                    "maxItems": self.max_criteria if max_items is None else max_items,
                }
            },
            "required": ["criteria"],
            "additionalProperties": False,
        }


def load_generator_file(path: Path) -> GeneratorSpec:
    """A generator configuration from a YAML or JSON file (one mapping)."""
    records = read_records(path)
    location, data = records[0]
    if len(records) != 1 or not isinstance(data, dict):
        raise ValidationFailed(f"{location}: expected one generator configuration (a mapping)")
    try:
        return GeneratorSpec.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None


def with_overrides(spec: GeneratorSpec, **overrides: Any) -> GeneratorSpec:
    """``spec`` with the given settings replaced (``None`` leaves a setting as it is), validated."""
    data = spec.model_dump()
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return GeneratorSpec.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(f"generator: {describe_validation_error(err)}") from None
