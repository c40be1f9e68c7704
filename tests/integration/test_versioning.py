"""Saved rubric versions cannot change by any path; edits become new versions with a parent."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError, ImmutableError, NotFoundError
from rubricsvc.models import Criterion, RubricVersion, VersionStatus
from rubricsvc.rubrics import versions as rubric_versions
from rubricsvc.rubrics.diff import diff_versions
from rubricsvc.rubrics.repository import list_versions, resolve_version
from tests.helpers import rubric_dict, rubric_spec


def _save(session: Session, **overrides: object) -> RubricVersion:
    version = rubric_versions.save_rubric(session, rubric_spec(**overrides)).version  # type: ignore[arg-type]
    session.commit()
    return version


def test_same_content_is_not_a_new_version(session: Session) -> None:
    first = rubric_versions.save_rubric(session, rubric_spec())
    second = rubric_versions.save_rubric(session, rubric_spec())
    assert (first.outcome, second.outcome) == ("created", "unchanged")
    assert second.version.id == first.version.id
    assert session.scalar(select(func.count()).select_from(RubricVersion)) == 1


def test_edit_makes_a_new_version_with_its_parent(session: Session) -> None:
    v1 = _save(session)
    edited = rubric_dict()
    edited["criteria"][1]["weight"] = 3
    result = rubric_versions.save_rubric(session, rubric_spec(criteria=edited["criteria"]))
    session.commit()
    v2 = result.version
    assert result.outcome == "new version"
    assert (v2.number, v2.parent_id) == (2, v1.id)
    session.expire_all()
    old = resolve_version(session, "t/sleep@1")
    assert [c.weight for c in old.criteria] == [5, 2, -4]  # the saved version is untouched
    assert [c.weight for c in resolve_version(session, "t/sleep").criteria] == [5, 3, -4]
    changes = diff_versions(old, resolve_version(session, "t/sleep@2")).changed
    assert [(c.text, c.changes) for c in changes] == [("Mentions caffeine", {"weight": (2, 3)})]


def test_orm_edit_of_a_saved_criterion_is_refused(session: Session) -> None:
    version = _save(session)
    version.criteria[0].weight = 100
    with pytest.raises(ImmutableError, match="immutable"):
        session.flush()
    session.rollback()
    assert session.scalar(select(Criterion.weight).where(Criterion.position == 0)) == 5


def test_orm_edit_of_version_content_is_refused(session: Session) -> None:
    version = _save(session)
    version.content_hash = "0" * 64
    with pytest.raises(ImmutableError, match="content_hash"):
        session.flush()


def test_orm_delete_of_a_version_is_refused(session: Session) -> None:
    version = _save(session)
    session.delete(version.criteria[0])
    with pytest.raises(ImmutableError, match="cannot be deleted"):
        session.flush()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE criteria SET weight = 100",
        "UPDATE criteria SET text = 'rewritten'",
        "DELETE FROM criteria",
        "UPDATE rubric_versions SET content_hash = 'x'",
        "UPDATE rubric_versions SET title = 'renamed'",
        "UPDATE rubric_versions SET parent_id = NULL",
        "DELETE FROM rubric_versions",
    ],
)
def test_raw_sql_cannot_change_saved_content(
    engine: Engine, session: Session, statement: str
) -> None:
    version = _save(session)
    before = [(c.text, c.weight) for c in version.criteria]
    with pytest.raises(DBAPIError, match="immutable"), engine.begin() as conn:
        conn.execute(text(statement))
    session.expire_all()
    reloaded = session.get(RubricVersion, version.id)
    assert reloaded is not None
    assert [(c.text, c.weight) for c in reloaded.criteria] == before


def test_lifecycle_columns_may_change(engine: Engine, session: Session) -> None:
    version = _save(session)
    with engine.begin() as conn:
        conn.execute(text("UPDATE rubric_versions SET status = 'approved', reviewed_by = 'ann'"))
    session.expire_all()
    assert resolve_version(session, str(version.id)).status == VersionStatus.APPROVED


def test_review_transitions(session: Session) -> None:
    version = _save(session)
    rubric_versions.approve(session, version, "ann")
    assert (version.status, version.reviewed_by) == (VersionStatus.APPROVED, "ann")
    with pytest.raises(ConflictError, match="already approved"):
        rubric_versions.approve(session, version)
    rubric_versions.retire(session, version, "bob")
    with pytest.raises(ConflictError, match="retired"):
        rubric_versions.approve(session, version)
    session.commit()
    assert list_versions(session, status=VersionStatus.RETIRED)[0].id == version.id


def test_references(session: Session) -> None:
    v1 = _save(session)
    v2 = _save(session, title="second")
    assert resolve_version(session, "t/sleep").id == v2.id
    assert resolve_version(session, "t/sleep@1").id == v1.id
    assert resolve_version(session, str(v2.id)).id == v2.id
    for ref, message in [
        ("nope", "no rubric named 'nope'"),
        ("t/sleep@9", "has no version 9"),
        ("9999", "no rubric version with id 9999"),
        ("t/sleep@x", "bad reference"),
    ]:
        with pytest.raises(NotFoundError, match=message):
            resolve_version(session, ref)


def test_export_round_trips(session: Session) -> None:
    version = _save(session)
    exported = rubric_versions.spec_of(version)
    assert exported.content_hash() == version.content_hash
    assert rubric_versions.save_rubric(session, exported).outcome == "unchanged"


def test_rubric_cannot_move_to_another_prompt(session: Session) -> None:
    _save(session)
    moved = rubric_dict()
    moved["prompt"] = {"text": "A different prompt"}
    with pytest.raises(ConflictError, match="belongs to prompt"):
        rubric_versions.save_rubric(session, rubric_spec(prompt=moved["prompt"]))
