"""Judge configurations: everything that determines a verdict, hashed and never edited."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from rubricsvc.hashing import content_hash
from rubricsvc.judging import neutral
from rubricsvc.judging.templates import PromptTemplate, load_template


class VerdictMode(enum.StrEnum):
    CRITERION_TEXT = "criterion-text"  # reason, then a strictly parsed verdict line
    CRITERION_PROB = "criterion-prob"  # probability of the verdict token, one forward pass
    MULTI_CRITERION = "multi-criterion"  # up to max_criteria criteria per call, JSON answer
    HOLISTIC = "holistic"  # the whole rubric, one Likert score
    REFERENCE_RELATIVE = "reference-relative"  # target vs reference report per dimension


DEFAULT_TEMPLATES = {
    VerdictMode.CRITERION_TEXT: "criterion_text",
    VerdictMode.CRITERION_PROB: "criterion_prob",
    VerdictMode.MULTI_CRITERION: "multi_criterion",
    VerdictMode.HOLISTIC: "holistic",
    VerdictMode.REFERENCE_RELATIVE: "reference_relative",
}

# Backend options that change speed or plumbing but never a verdict: not hashed.
OPERATIONAL_OPTIONS = frozenset(
    {
        "batch_size",
        "max_concurrency",
        "timeout",
        "threads",
        "api_key_env",
        "prefix_reuse",
        "kv_cache_memory_bytes",
        "enforce_eager",
        "enable_prefix_caching",
    }
)


class JudgeSpec(BaseModel):
    """A judge as configured by a user (YAML) or built in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=200)
    backend: str = "transformers"
    model: str | None = None  # None: the backend's default (the embedded model)
    revision: str | None = None
    mode: VerdictMode = VerdictMode.CRITERION_PROB
    template: str | None = None  # a bundled template name or a file path; None: the mode's
    max_tokens: int = Field(default=160, ge=1)  # for modes that decode
    temperature: float = Field(default=0.0, ge=0.0)
    seed: int | None = 0
    max_criteria: int = Field(default=8, ge=1)  # multi-criterion: criteria per call
    likert_max: int = Field(default=10, ge=2, le=10)  # holistic scale 1..likert_max
    backend_options: dict[str, Any] = Field(default_factory=dict)
    # Retries of transient backend errors and unparseable output (not part of the hash).
    retries: int = Field(default=2, ge=0)
    retry_backoff: float = Field(default=0.5, ge=0.0)
    _template: PromptTemplate = PrivateAttr()

    @model_validator(mode="after")
    def _template_exists(self) -> JudgeSpec:
        # Read once: the hash and every rendered prompt then come from the same text, and
        # hashing the config (per chunk, per lookup) reads no file.
        self._template = load_template(self.template or DEFAULT_TEMPLATES[self.mode])
        return self

    def prompt_template(self) -> PromptTemplate:
        """The template, read when the spec was validated (so a changed ``mode`` or ``template``
        needs ``model_validate``, as ``with_mode`` does, not ``model_copy``)."""
        return self._template

    def hashed_settings(self) -> dict[str, Any]:
        """What determines a verdict: the config hash covers exactly this."""
        return {
            "backend": self.backend,
            "model": self.model,
            "revision": self.revision,
            "mode": self.mode.value,
            "template_sha256": self.prompt_template().sha256,
            # How judged text is neutralized shapes what the judge reads, as the template does.
            "neutralizer": neutral.VERSION,
            "sampling": self.sampling(),
            "max_criteria": self.max_criteria if self.mode == VerdictMode.MULTI_CRITERION else None,
            "likert_max": self.likert_max if self.mode == VerdictMode.HOLISTIC else None,
            "backend_options": {
                k: v
                for k, v in sorted(self.backend_options.items())
                if k not in OPERATIONAL_OPTIONS
            },
        }

    def sampling(self) -> dict[str, Any]:
        if self.mode == VerdictMode.CRITERION_PROB:
            return {}  # one forward pass: no decoding settings apply
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}

    def config_hash(self) -> str:
        return content_hash(self.hashed_settings())

    def with_mode(self, mode: VerdictMode) -> JudgeSpec:
        """The same judge in another mode, named ``NAME:MODE``."""
        if mode == self.mode:
            return self
        # Validated anew (not model_copy): the other mode has another template to load.
        changed = {"mode": mode, "template": None, "name": f"{self.name}:{mode.value}"}
        return JudgeSpec.model_validate({**self.model_dump(), **changed})


BUILTIN_JUDGES: dict[str, JudgeSpec] = {
    spec.name: spec
    for spec in (
        JudgeSpec(name="embedded", backend="transformers", mode=VerdictMode.CRITERION_PROB),
        JudgeSpec(name="embedded-text", backend="transformers", mode=VerdictMode.CRITERION_TEXT),
    )
}
