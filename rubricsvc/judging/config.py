"""Judge configurations: everything that determines a verdict, hashed and never edited."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from rubricsvc import neutral
from rubricsvc.backends import (
    check_adapter_backend,
    find_backend,
    hashed_backend_options,
    places_model,
)
from rubricsvc.backends.adapters import adapter_sha256
from rubricsvc.backends.placement import check_options
from rubricsvc.backends.weights_hash import local_model_sha256
from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging.calibration import CalibrationMap
from rubricsvc.judging.modes import check_mode_name, get_mode, mode_names, modes_that
from rubricsvc.judging.templates import PromptTemplate, load_template


class VerdictMode(enum.StrEnum):
    """The built-in modes' names; a plugin may register more (``judging.modes``)."""

    CRITERION_TEXT = "criterion-text"  # reason, then a strictly parsed verdict line
    CRITERION_PROB = "criterion-prob"  # probability of the verdict token, one forward pass
    MULTI_CRITERION = "multi-criterion"  # up to max_criteria criteria per call, JSON answer
    HOLISTIC = "holistic"  # the whole rubric, one Likert score
    REFERENCE_RELATIVE = "reference-relative"  # target vs reference report per dimension
    PAIRWISE = "pairwise"  # two completions of a prompt, both orders, P(first better)
    GROUP = "group"  # a prompt's group of completions scored together, shuffled repeats


def _registered(name: str) -> str:
    try:
        # A plain str, not the enum member: the hash and stored configs see the bare name.
        return str(check_mode_name(str(name)))
    except ValidationFailed as err:
        raise ValueError(str(err)) from None  # pydantic reports it as a validation error


# The name of a registered verdict mode, for settings and schemas.
ModeName = Annotated[str, AfterValidator(_registered)]


class JudgeSpec(BaseModel):
    """A judge as configured by a user (YAML) or built in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=200)
    backend: str = "transformers"
    model: str | None = None  # None: the backend's default (the embedded model)
    revision: str | None = None
    # A LoRA adapter's folder (peft's save_pretrained), merged into the model when it loads;
    # hashed by its files' contents (``adapter_sha256``), so it is part of the judge.
    adapter: str | None = None
    mode: ModeName = VerdictMode.CRITERION_PROB.value
    template: str | None = None  # a bundled template name or a file path; None: the mode's
    max_tokens: int = Field(default=160, ge=1)  # for modes that decode
    temperature: float = Field(default=0.0, ge=0.0)
    seed: int | None = 0
    max_criteria: int = Field(default=8, ge=1)  # multi-criterion: criteria per call
    likert_max: int = Field(default=10, ge=2, le=10)  # holistic scale 1..likert_max
    # Show the judge the prompt's reference answer (criterion-prob, criterion-text,
    # multi-criterion, holistic); a prompt without one is judged without it, and that is
    # recorded in each judgment's detail and the score's reasons. Hashed when set.
    reference: bool = False
    # Modes that compare completions of a prompt (pairwise, group): at most this many
    # completions judged together (a larger set is split into consecutive groups) ...
    group_size: int = Field(default=8, ge=2, le=32)
    group_repeats: int = Field(default=2, ge=1, le=16)  # ... and group: shuffled repeats
    backend_options: dict[str, Any] = Field(default_factory=dict)
    # The judged text one request may send, in characters (the conversation, the response or
    # responses, the criteria it asks about): a per-criterion mode sends the response whole
    # with every criterion. Past it the work is refused when planned, before any judge call
    # (``scoring.request_size``; 413 from the API). Not part of the hash. 262,144 characters
    # are about 64k tokens of English, past most judges' contexts.
    max_request_chars: int = Field(default=262_144, ge=1)
    # Retries of transient backend errors and unparseable output (not part of the hash).
    retries: int = Field(default=2, ge=0)
    retry_backoff: float = Field(default=0.5, ge=0.0)
    # A panel of judges (``JurySpec``): its members carry every judge setting; it has none.
    jury: JurySpec | None = None
    # A map from the judge's probabilities to calibrated ones (``rubricsvc judges calibrate``),
    # applied to every verdict; hashed when set, so an uncalibrated judge's hash is unchanged.
    calibration: CalibrationMap | None = None
    _template: PromptTemplate = PrivateAttr()
    _adapter_sha256: str | None = PrivateAttr(default=None)
    _model_sha256: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _jury_has_no_judge_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("jury") is None:
            return data
        data = dict(data)
        if data.setdefault("backend", JURY_BACKEND) != JURY_BACKEND:
            raise ValueError(f"a jury's backend is {JURY_BACKEND!r}: its members name theirs")
        given = [
            key
            for key, value in data.items()
            if key not in JURY_FIELDS and key in cls.model_fields and value != _default(key)
        ]
        if given:
            raise ValueError(
                f"a jury takes only name and jury (got {', '.join(given)}): its members carry "
                "the judge settings"
            )
        return data

    @model_validator(mode="after")
    def _placement_is_well_formed(self) -> JudgeSpec:
        if places_model(self.backend):
            options = self.backend_options
            try:
                check_options(options.get("device", "auto"), options.get("dtype", "auto"))
            except ValidationFailed as err:
                raise ValueError(str(err)) from None
        return self

    @model_validator(mode="after")
    def _adapter_is_readable(self) -> JudgeSpec:
        # Hashed once, like the template is read once: the hash then never reads a file.
        if self.adapter is None:
            return self
        try:
            if find_backend(self.backend) is not None:  # a plugin's not loaded here: when built
                check_adapter_backend(self.name, self.backend, self.adapter)
            self._adapter_sha256 = adapter_sha256(Path(self.adapter))
        except ValidationFailed as err:
            raise ValueError(str(err)) from None
        return self

    @model_validator(mode="after")
    def _model_folder_is_hashed(self) -> JudgeSpec:
        # A model given as a local folder is hashed by its files, as an adapter is: weights
        # retrained or replaced at the same path are another judge.
        try:
            self._model_sha256 = local_model_sha256(self.backend, self.model)
        except ValidationFailed as err:
            raise ValueError(str(err)) from None
        return self

    @model_validator(mode="after")
    def _calibrates_probabilities(self) -> JudgeSpec:
        if self.calibration is not None and not get_mode(self.mode).gives_probability:
            raise ValueError(
                f"a calibration maps probabilities, which mode {self.mode} does not give: only "
                f"{', '.join(modes_that(gives_probability=True))} judges can be calibrated"
            )
        return self

    @model_validator(mode="after")
    def _template_exists(self) -> JudgeSpec:
        # Read once: the hash and every rendered prompt then come from the same text, and
        # hashing the config (per chunk, per lookup) reads no file.
        self._template = load_template(self.template or get_mode(self.mode).template)
        if self.reference:
            if "reference" not in get_mode(self.mode).options:
                shows = sorted(n for n in mode_names() if "reference" in get_mode(n).options)
                raise ValueError(
                    f"reference: true shows the prompt's reference answer in modes "
                    f"{', '.join(shows)}; mode {self.mode} does not"
                )
            if "${reference}" not in self._template.source:
                raise ValueError(
                    f"reference: true needs a template with a ${{reference}} placeholder; "
                    f"template {self._template.name} has none"
                )
        return self

    def prompt_template(self) -> PromptTemplate:
        """The template, read when the spec was validated (so a changed ``mode`` or ``template``
        needs ``model_validate``, as ``with_mode`` does, not ``model_copy``)."""
        return self._template

    def adapter_sha256(self) -> str | None:
        """The sha256 of the adapter's files when the spec was validated (None: no adapter)."""
        return self._adapter_sha256

    def model_sha256(self) -> str | None:
        """The sha256 of the model folder's files when the spec was validated (None: the model
        is the embedded one, a hub id, or served by a backend that does not load it here)."""
        return self._model_sha256

    def hashed_settings(self) -> dict[str, Any]:
        """What determines a verdict: the config hash covers exactly this."""
        if self.jury is not None:
            return {"backend": JURY_BACKEND, "jury": self.jury.hashed_settings()}
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
            **{
                name: getattr(self, name)
                for name in ("group_size", "group_repeats")
                if name in options
            },
            # Without the options that change speed or plumbing but never a verdict, as the
            # backends declare; with the device and precision a model is placed at, resolved
            # here (never ``auto``; nothing for float32 on the CPU, so the hashes of judges
            # from before placement was an option stay as they were).
            "backend_options": hashed_backend_options(self.backend, self.backend_options),
            # Only when set: every config without one keeps the hash it always had.
            **({"calibration": self.calibration.model_dump()} if self.calibration else {}),
            **({"reference": True} if self.reference else {}),
            # The adapter's contents, not its path: what it makes the model say.
            **({"adapter_sha256": self.adapter_sha256()} if self.adapter else {}),
            # A local model folder's contents too (only then: a hub id or the embedded model
            # keeps the hash it always had).
            **({"model_sha256": self._model_sha256} if self._model_sha256 else {}),
        }

    def sampling(self) -> dict[str, Any]:
        if self.jury is not None or not get_mode(self.mode).decodes:
            return {}  # e.g. one forward pass: no decoding settings apply
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}

    def config_hash(self) -> str:
        return content_hash(self.hashed_settings())

    def with_mode(self, mode: str) -> JudgeSpec:
        """The same judge in another mode, named ``NAME:MODE``."""
        check_mode_name(mode)  # one line listing the modes, not a validation error
        if self.jury is not None:
            raise ValidationFailed(
                f"judge {self.name!r} is a jury: its members have their own modes (no --mode)"
            )
        if mode == self.mode:
            return self
        if self.calibration is not None:
            raise ValidationFailed(
                f"judge {self.name!r} is calibrated for {self.mode}: its map fits that mode's "
                f"probabilities only (use the uncalibrated judge with --mode {mode})"
            )
        # Validated anew (not model_copy): the other mode has another template to load.
        changed = {"mode": mode, "template": None, "name": f"{self.name}:{mode}"}
        return JudgeSpec.model_validate({**self.model_dump(), **changed})

    def jury_members(self) -> list[JudgeSpec]:
        """A jury's judges, each sample its own: named ``JURY/MEMBER`` (``JURY/MEMBER#K`` for
        sample K of several, with seed ``seed + K``); empty for a judge that is no jury."""
        if self.jury is None:
            return []
        return [
            member.model_copy(update={"name": f"{self.name}/{member.name}{suffix}"})
            for suffix, member in self.jury.expanded()
        ]


JURY_BACKEND = "jury"
# The fields a jury may set; every other one belongs to its members.
JURY_FIELDS = frozenset({"name", "jury", "backend"})
JuryCombine = Literal["mean", "median", "majority"]


def _default(field: str) -> Any:
    return JudgeSpec.model_fields[field].get_default(call_default_factory=True)


class JurySpec(BaseModel):
    """A panel: several judges, and/or ``samples`` samples of each, whose scores are combined
    (``combine``) into one; the spread (max - min) of their scores is the score's doubt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    members: list[JudgeSpec] = Field(min_length=1)
    samples: int = Field(default=1, ge=1)  # each member judged this often, seeds seed, seed+1, ...
    combine: JuryCombine = "mean"  # majority: the share of members scoring at least 0.5
    max_spread: float | None = Field(default=None, ge=0.0)  # above it: the score is masked

    @model_validator(mode="after")
    def _members_can_serve(self) -> JurySpec:
        names = [m.name for m in self.members]
        if len(set(names)) < len(names):
            raise ValueError(f"jury members need distinct names (got {', '.join(names)})")
        for member in self.members:
            if member.jury is not None:
                raise ValueError(f"jury member {member.name!r} is a jury itself: list its members")
            if self.samples == 1:
                continue
            if not get_mode(member.mode).decodes:
                raise ValueError(
                    f"samples: {self.samples} of member {member.name!r} would all be the same: "
                    f"its mode {member.mode} decodes nothing (use samples: 1)"
                )
            if member.temperature == 0:
                raise ValueError(
                    f"samples: {self.samples} of member {member.name!r} would all be the same: "
                    "it decodes at temperature 0 (set a temperature above 0, or samples: 1)"
                )
        return self

    def hashed_settings(self) -> dict[str, Any]:
        return {
            # Each sample is a judge config of its own (its seed): the jury is exactly them.
            "members": [m.config_hash() for _, m in self.expanded()],
            "samples": self.samples,
            "combine": self.combine,
            "max_spread": self.max_spread,
        }

    def expanded(self) -> list[tuple[str, JudgeSpec]]:
        """Each member, or each of its samples (suffix ``#K``, seed ``seed + K``), in order."""
        if self.samples == 1:
            return [("", member) for member in self.members]
        return [
            (f"#{k}", member.model_copy(update={"seed": (member.seed or 0) + k}))
            for member in self.members
            for k in range(self.samples)
        ]


JudgeSpec.model_rebuild()


BUILTIN_JUDGES: dict[str, JudgeSpec] = {
    spec.name: spec
    for spec in (
        JudgeSpec(name="embedded", backend="transformers", mode=VerdictMode.CRITERION_PROB),
        JudgeSpec(name="embedded-text", backend="transformers", mode=VerdictMode.CRITERION_TEXT),
    )
}
