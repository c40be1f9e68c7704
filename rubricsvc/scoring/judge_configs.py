"""Judge configs in the database: one row per distinct configuration, found by name.

A name's settings never change, but what they make the judge see can, when rubricsvc changes
(a new neutralizing step, a mode's wording): the same settings then hash differently and are
stored as a new config of the same name, the newest answering to the name. The older rows
stay, with the verdicts they made, which are never replayed for the new config.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError, NotFoundError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_records
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec
from rubricsvc.models import JudgeConfig


def to_row(spec: JudgeSpec) -> JudgeConfig:
    settings = spec.hashed_settings()
    return JudgeConfig(
        name=spec.name,
        config_hash=spec.config_hash(),
        backend=spec.backend,
        model=spec.model or "(embedded)",
        revision=spec.revision,
        template_hash=settings["template_sha256"],
        verdict_mode=spec.mode,
        sampling=settings["sampling"],
        settings={"spec": spec.model_dump(mode="json"), "hashed": settings},
    )


def latest_judge_config(session: Session, name: str) -> JudgeConfig | None:
    """The newest stored config of ``name`` (the one that answers to it), if any."""
    query = select(JudgeConfig).where(JudgeConfig.name == name).order_by(JudgeConfig.id.desc())
    return session.scalars(query.limit(1)).first()


def current_judge_configs(session: Session) -> list[JudgeConfig]:
    """The newest stored config of every name, by name."""
    rows = session.scalars(select(JudgeConfig).order_by(JudgeConfig.name, JudgeConfig.id))
    return list({row.name: row for row in rows}.values())


def ensure_judge_config(session: Session, spec: JudgeSpec) -> JudgeConfig:
    """The stored row for ``spec``, created if new; a name reused for other settings is refused."""
    row = latest_judge_config(session, spec.name)
    if row is not None:
        if row.config_hash == spec.config_hash():
            return row
        if stored_spec(row).model_dump(mode="json") != spec.model_dump(mode="json"):
            raise ConflictError(
                f"judge {spec.name!r} is already stored with other settings (configs are never "
                "edited): give the changed judge a new name"
            )
        # The same settings, which this rubricsvc hashes anew: the name's next config.
    same = session.scalar(select(JudgeConfig).where(JudgeConfig.config_hash == spec.config_hash()))
    if same is not None and same.name == spec.name:
        return same  # an older config of the name that this rubricsvc hashes alike again
    if same is not None:
        raise ConflictError(
            f"judge {spec.name!r} has the same settings as the stored judge {same.name!r}"
        )
    row = to_row(spec)
    session.add(row)
    session.flush()
    return row


def stored_spec(row: JudgeConfig) -> JudgeSpec:
    return JudgeSpec.model_validate(row.settings["spec"])


def find_judge(session: Session, name: str, mode: str | None = None) -> JudgeSpec:
    """A judge by name (stored configs first, then the built-in ones), in ``mode`` if given."""
    spec = _named_judge(session, name)
    return spec if mode is None else spec.with_mode(mode)


def _named_judge(session: Session, name: str) -> JudgeSpec:
    row = latest_judge_config(session, name)
    if row is not None and "spec" in row.settings:
        return stored_spec(row)
    if name in BUILTIN_JUDGES:
        return BUILTIN_JUDGES[name]
    known = sorted(set(BUILTIN_JUDGES) | set(session.scalars(select(JudgeConfig.name))))
    raise NotFoundError(f"no judge named {name!r}; known judges: {', '.join(known)}")


def load_judge_file(path: Path) -> list[JudgeSpec]:
    specs = []
    for location, data in read_records(path):
        items = data.get("judges", data) if isinstance(data, dict) else data
        for item in items if isinstance(items, list) else [items]:
            try:
                specs.append(JudgeSpec.model_validate(item))
            except ValidationError as err:
                raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    return specs
