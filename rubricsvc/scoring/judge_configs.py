"""Judge configs in the database: one row per distinct configuration, found by name.

A name's settings never change, but what they make the judge see can, when rubricsvc changes
(a new neutralizing step, a mode's wording): the same settings then hash differently and are
stored as a new config of the same name, the newest answering to the name. The older rows
stay, with the verdicts they made, which are never replayed for the new config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError, NotFoundError, RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_records
from rubricsvc.judging.config import BUILTIN_JUDGES, JURY_BACKEND, JudgeSpec
from rubricsvc.models import JudgeConfig, JudgeGate, JudgeGateStatus


def to_row(spec: JudgeSpec, origin: dict[str, Any] | None = None) -> JudgeConfig:
    """The row of ``spec``; ``origin`` (how the config was made, e.g. a calibration's figures)
    is kept beside the spec, outside the hash."""
    settings = spec.hashed_settings()
    return JudgeConfig(
        name=spec.name,
        config_hash=spec.config_hash(),
        backend=spec.backend,
        model=_model_label(spec)[:300],
        revision=spec.revision,
        template_hash=settings.get("template_sha256"),
        verdict_mode=JURY_BACKEND if spec.jury is not None else spec.mode,
        sampling=settings.get("sampling", {}),
        settings={
            "spec": spec.model_dump(mode="json"),
            "hashed": settings,
            **({"origin": origin} if origin is not None else {}),
        },
    )


def _model_label(spec: JudgeSpec) -> str:
    """What ``judges list`` shows as the model: a jury's members, combination and samples."""
    if spec.jury is None:
        return spec.model or "(embedded)"
    jury = spec.jury
    samples = f" x {jury.samples} samples" if jury.samples > 1 else ""
    return f"{jury.combine} of {', '.join(m.name for m in jury.members)}{samples}"


def member_config(session: Session, spec: JudgeSpec) -> JudgeConfig:
    """The stored config of a jury member: the config of the same settings if one is stored,
    whatever its name (its verdicts are the member's: the cache keys are the same), else the
    member stored under its own name (``JURY/MEMBER``)."""
    same = session.scalar(select(JudgeConfig).where(JudgeConfig.config_hash == spec.config_hash()))
    return same if same is not None else ensure_judge_config(session, spec)


def latest_judge_config(session: Session, name: str) -> JudgeConfig | None:
    """The newest stored config of ``name`` (the one that answers to it), if any."""
    query = select(JudgeConfig).where(JudgeConfig.name == name).order_by(JudgeConfig.id.desc())
    return session.scalars(query.limit(1)).first()


def current_judge_configs(session: Session) -> list[JudgeConfig]:
    """The newest stored config of every name, by name."""
    rows = session.scalars(select(JudgeConfig).order_by(JudgeConfig.name, JudgeConfig.id))
    return list({row.name: row for row in rows}.values())


def ensure_judge_config(
    session: Session, spec: JudgeSpec, origin: dict[str, Any] | None = None
) -> JudgeConfig:
    """The stored row for ``spec``, created if new (with ``origin``, see ``to_row``); a name
    reused for other settings is refused."""
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
    row = to_row(spec, origin)
    session.add(row)
    session.flush()
    return row


def stored_spec(row: JudgeConfig) -> JudgeSpec:
    return JudgeSpec.model_validate(row.settings["spec"])


def find_judge(session: Session, name: str, mode: str | None = None) -> JudgeSpec:
    """A judge by name (stored configs first, then the built-in ones), in ``mode`` if given."""
    spec = _named_judge(session, name)
    return spec if mode is None else spec.with_mode(mode)


def find_reward_judge(session: Session, name: str, mode: str | None = None) -> JudgeSpec:
    """``find_judge`` for a run whose scores are rewards or results: a judge that must pass a
    promotion gate (a distilled one) is refused until the gate has approved it."""
    spec = find_judge(session, name, mode)
    for judge in spec.jury_members() or [spec]:
        check_reward_use(session, judge)
    return spec


def gate_status(session: Session, config_id: int) -> JudgeGate | None:
    """The newest promotion decision on a judge config (None: it was never gated)."""
    query = select(JudgeGate).where(JudgeGate.judge_config_id == config_id)
    return session.scalars(query.order_by(JudgeGate.id.desc()).limit(1)).first()


def check_reward_use(session: Session, spec: JudgeSpec) -> None:
    """Refuse a gated judge whose newest decision is not an approval."""
    # One statement: this runs on every reward request.
    newest = (
        select(JudgeGate.status)
        .join(JudgeConfig, JudgeConfig.id == JudgeGate.judge_config_id)
        .where(JudgeConfig.config_hash == spec.config_hash())
        .order_by(JudgeGate.id.desc())
        .limit(1)
    )
    status = session.scalar(newest)
    if status is None or status == JudgeGateStatus.APPROVED:
        return
    raise ValidationFailed(
        f"judge {spec.name!r} is a {status.value} of its promotion gate, not approved for "
        "scoring or rewards (see `rubricsvc judges show "
        f"{spec.name}`); `rubricsvc judges evaluate` still measures it"
    )


def _named_judge(session: Session, name: str) -> JudgeSpec:
    row = latest_judge_config(session, name)
    if row is not None and "spec" in row.settings:
        return stored_spec(row)
    if name in BUILTIN_JUDGES:
        return BUILTIN_JUDGES[name]
    known = sorted(set(BUILTIN_JUDGES) | set(session.scalars(select(JudgeConfig.name))))
    raise NotFoundError(f"no judge named {name!r}; known judges: {', '.join(known)}")


def load_judge_file(path: Path, session: Session | None = None) -> list[JudgeSpec]:
    """The judges of a YAML or JSON file. A jury may name its members (``members: [embedded,
    other]``): each name is the judge it names when the file is read (stored, built in, or
    earlier in the file), given as its settings, so the stored jury holds its members whole;
    naming needs ``session``."""
    specs: list[JudgeSpec] = []
    for location, data in read_records(path):
        items = data.get("judges", data) if isinstance(data, dict) else data
        for item in items if isinstance(items, list) else [items]:
            try:
                item = _members_by_name(session, item, {s.name: s for s in specs})
                specs.append(JudgeSpec.model_validate(item))
            except ValidationError as err:
                raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
            except RubricsvcError as err:
                raise ValidationFailed(f"{location}: {err}") from None
    return specs


def _members_by_name(session: Session | None, item: Any, earlier: dict[str, JudgeSpec]) -> Any:
    """``item`` with its jury's members given by name replaced by those judges' settings."""
    if not isinstance(item, dict) or not isinstance(item.get("jury"), dict):
        return item
    members = item["jury"].get("members")
    if not isinstance(members, list) or not any(isinstance(m, str) for m in members):
        return item
    resolved = []
    for member in members:
        if not isinstance(member, str):
            resolved.append(member)
            continue
        if member in earlier:
            spec = earlier[member]
        elif session is None:
            raise ValidationFailed(f"jury member {member!r} is named: naming needs the database")
        else:
            spec = find_judge(session, member)
        resolved.append(spec.model_dump(mode="json"))
    return {**item, "jury": {**item["jury"], "members": resolved}}
