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
from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from rubricsvc.backends import backends_that
from rubricsvc.backends.weights_hash import is_local_folder
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
        model=_model_label(spec),
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


def _model_label(spec: JudgeSpec, model: str | None = None) -> str:
    """What ``judges list`` shows as the model (``model``: another name of the same folder): a
    jury's members, combination and samples; a judge's adapter, by its hash, so the weights
    a gate holds for (``_same_weights``) are the base's and the adapter's together."""
    if spec.jury is None:
        label = model or spec.model or "(embedded)"
        hashed = spec.adapter_sha256()
        if hashed is None:
            return label[:300]
        adapter = f" + adapter {hashed[:16]}"
        return label[: 300 - len(adapter)] + adapter
    jury = spec.jury
    samples = f" x {jury.samples} samples" if jury.samples > 1 else ""
    return f"{jury.combine} of {', '.join(m.name for m in jury.members)}{samples}"[:300]


def member_config(session: Session, spec: JudgeSpec) -> JudgeConfig:
    """The stored config of a jury member: the config of the same settings if one is stored,
    whatever its name (its verdicts are the member's: the cache keys are the same), else the
    member stored under the name of the built-in judge it equals (so that judge, used on its
    own later, finds its settings under its own name, not refused as another's), else under
    its own name (``JURY/MEMBER``)."""
    same = session.scalar(select(JudgeConfig).where(JudgeConfig.config_hash == spec.config_hash()))
    if same is not None:
        return same
    builtin = _builtin_alike(spec)
    return ensure_judge_config(session, builtin if builtin is not None else spec)


def _builtin_alike(spec: JudgeSpec) -> JudgeSpec | None:
    """The built-in judge (in ``spec``'s mode) with ``spec``'s settings, if there is one."""
    for builtin in BUILTIN_JUDGES.values():
        alike = builtin.with_mode(spec.mode)
        if alike.config_hash() == spec.config_hash():
            return alike
    return None


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
    promotion gate (a distilled one) is refused until the gate has approved it, in every mode
    and as a jury member (``check_reward_use``)."""
    spec = find_judge(session, name, mode)
    check_reward_use(session, spec)
    return spec


def _same_weights(spec: JudgeSpec) -> list[ColumnElement[bool]]:
    """Where a stored config serves the weights ``spec`` serves, whatever its mode, template
    or sampling: the same backend (those that load the model in process alike: the same model
    and revision are the same weights in each), model (with its adapter) and revision. A spec with no revision
    serves whatever the model is now, so a config of any revision of it counts."""
    in_process = backends_that(loads_model_in_process=True)
    loads_here = spec.backend in in_process
    backends = set(in_process) if loads_here else {spec.backend}
    models = {_model_label(spec)}
    if loads_here and spec.model and is_local_folder(spec.model):
        models.add(_model_label(spec, str(Path(spec.model).resolve())))  # a student's is resolved
    where: list[ColumnElement[bool]] = [
        JudgeConfig.backend.in_(sorted(backends)),
        JudgeConfig.model.in_(sorted(models)),
    ]
    if spec.revision is not None:
        where.append(JudgeConfig.revision == spec.revision)
    return where


def weights_gate(session: Session, spec: JudgeSpec) -> tuple[JudgeGate, str] | None:
    """The newest promotion decision on the weights ``spec`` serves (see ``_same_weights``),
    and the name of the config it was made on; None: they were never gated. For a jury: the
    first of its members' decisions that is not an approval, else the first approval."""
    found = [gate for m in spec.jury_members() or [spec] if (gate := _newest(session, m))]
    refused = [g for g in found if g[0].status != JudgeGateStatus.APPROVED]
    return next(iter(refused or found), None)


def _newest(session: Session, spec: JudgeSpec) -> tuple[JudgeGate, str] | None:
    # One statement: this runs on every reward request.
    newest = (
        select(JudgeGate, JudgeConfig.name)
        .join(JudgeConfig, JudgeConfig.id == JudgeGate.judge_config_id)
        .where(*_same_weights(spec))
        .order_by(JudgeGate.id.desc())
        .limit(1)
    )
    row = session.execute(newest).first()
    return (row[0], row[1]) if row is not None else None


def gate_status(session: Session, row: JudgeConfig) -> JudgeGate | None:
    """The promotion decision that holds for a stored config (``weights_gate``): None, it
    serves weights that were never gated."""
    if "spec" not in row.settings:  # a row from before specs were stored: its own gates only
        query = select(JudgeGate).where(JudgeGate.judge_config_id == row.id)
        return session.scalars(query.order_by(JudgeGate.id.desc()).limit(1)).first()
    found = weights_gate(session, stored_spec(row))
    return found[0] if found is not None else None


def check_reward_use(session: Session, spec: JudgeSpec) -> None:
    """Refuse a judge, or a jury with a member, whose weights' newest promotion decision is
    not an approval: a gate holds in every mode, template and sampling of the weights."""
    found = weights_gate(session, spec)
    if found is None or found[0].status == JudgeGateStatus.APPROVED:
        return
    gate, gated = found
    serves = "a member serves" if spec.jury is not None else "it serves"
    whose = "it" if gated == spec.name else f"{gated!r}, whose weights {serves},"
    raise ValidationFailed(
        f"judge {spec.name!r}: {whose} is a {gate.status.value} of its promotion gate, not "
        f"approved for scoring or rewards in any mode (see `rubricsvc judges show {gated}`); "
        "`rubricsvc judges evaluate` still measures it"
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
    naming needs ``session``. A relative ``adapter`` is a folder beside the file (stored
    resolved), so a file committed with its adapter registers it from any working folder."""
    specs: list[JudgeSpec] = []
    for location, data in read_records(path):
        items = data.get("judges", data) if isinstance(data, dict) else data
        for item in items if isinstance(items, list) else [items]:
            try:
                item = _members_by_name(session, item, {s.name: s for s in specs})
                specs.append(JudgeSpec.model_validate(_adapter_beside(item, path.parent)))
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


def _adapter_beside(item: Any, folder: Path) -> Any:
    """``item`` (and its jury's members) with a relative ``adapter`` path resolved against
    ``folder``, the file's."""
    if not isinstance(item, dict):
        return item
    jury = item.get("jury")
    if isinstance(jury, dict) and isinstance(jury.get("members"), list):
        members = [_adapter_beside(member, folder) for member in jury["members"]]
        item = {**item, "jury": {**jury, "members": members}}
    if isinstance(item.get("adapter"), str):
        item = {**item, "adapter": str((folder / item["adapter"]).resolve())}
    return item
