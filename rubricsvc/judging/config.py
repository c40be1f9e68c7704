"""Judge configurations: everything that determines a verdict, hashed and never edited."""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging import neutral
from rubricsvc.judging.modes import check_mode_name, get_mode
from rubricsvc.judging.templates import PromptTemplate, load_template


class VerdictMode(enum.StrEnum):
    """The built-in modes' names; a plugin may register more (``judging.modes``)."""

    CRITERION_TEXT = "criterion-text"  # reason, then a strictly parsed verdict line
    CRITERION_PROB = "criterion-prob"  # probability of the verdict token, one forward pass
    MULTI_CRITERION = "multi-criterion"  # up to max_criteria criteria per call, JSON answer
    HOLISTIC = "holistic"  # the whole rubric, one Likert score
    REFERENCE_RELATIVE = "reference-relative"  # target vs reference report per dimension


def _registered(name: str) -> str:
    try:
        # A plain str, not the enum member: the hash and stored configs see the bare name.
        return str(check_mode_name(str(name)))
    except ValidationFailed as err:
        raise ValueError(str(err)) from None  # pydantic reports it as a validation error


# The name of a registered verdict mode, for settings and schemas.
ModeName = Annotated[str, AfterValidator(_registered)]

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
    mode: ModeName = VerdictMode.CRITERION_PROB.value
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
        self._template = load_template(self.template or get_mode(self.mode).template)
        return self

    def prompt_template(self) -> PromptTemplate:
        """The template, read when the spec was validated (so a changed ``mode`` or ``template``
        needs ``model_validate``, as ``with_mode`` does, not ``model_copy``)."""
        return self._template

    def hashed_settings(self) -> dict[str, Any]:
        """What determines a verdict: the config hash covers exactly this."""
        options = get_mode(self.mode).options
        return {
            "backend": self.backend,
            "model": self.model,
            "revision": self.revision,
            "mode": self.mode,
            "mode_wording": get_mode(self.mode).wording,
            "template_sha256": self.prompt_template().sha256,
            # How judged text is neutralized shapes what the judge reads, as the template does.
            "neutralizer": neutral.VERSION,
            "sampling": self.sampling(),
            "max_criteria": self.max_criteria if "max_criteria" in options else None,
            "likert_max": self.likert_max if "likert_max" in options else None,
            "backend_options": {
                k: v
                for k, v in sorted(self.backend_options.items())
                if k not in OPERATIONAL_OPTIONS
            },
        }

    def sampling(self) -> dict[str, Any]:
        if not get_mode(self.mode).decodes:
            return {}  # e.g. one forward pass: no decoding settings apply
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}

    def config_hash(self) -> str:
        return content_hash(self.hashed_settings())

    def with_mode(self, mode: str) -> JudgeSpec:
        """The same judge in another mode, named ``NAME:MODE``."""
        check_mode_name(mode)  # one line listing the modes, not a validation error
        if mode == self.mode:
            return self
        # Validated anew (not model_copy): the other mode has another template to load.
        changed = {"mode": mode, "template": None, "name": f"{self.name}:{mode}"}
        return JudgeSpec.model_validate({**self.model_dump(), **changed})


BUILTIN_JUDGES: dict[str, JudgeSpec] = {
    spec.name: spec
    for spec in (
        JudgeSpec(name="embedded", backend="transformers", mode=VerdictMode.CRITERION_PROB),
        JudgeSpec(name="embedded-text", backend="transformers", mode=VerdictMode.CRITERION_TEXT),
    )
}
