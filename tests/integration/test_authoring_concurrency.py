"""Two processes saving edits of one rubric at the same moment on PostgreSQL.

Both start together (a barrier); the first to lock the rubric holds its transaction open for
a while, so the second really waits on it. Each edit becomes its own version: N+1 and N+2,
the second a child of the first. No edit is lost, none is merged into another.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.models import Rubric, RubricVersion
from rubricsvc.rubrics import versions as rubric_versions
from rubricsvc.rubrics.repository import resolve_version
from tests.helpers import rubric_dict, rubric_spec

pytestmark = pytest.mark.postgres

HOLD_SECONDS = 1.5  # how long each writer keeps its transaction open after saving


def _edited(weight: float) -> dict[str, Any]:
    data = rubric_dict()
    data["criteria"][1]["weight"] = weight
    return data


def _save_edit(url: str, data: dict[str, Any], barrier: Any, results: Any) -> None:
    """One writer: wait for the other, save, keep the transaction open, commit, report."""
    engine = db.make_engine(url)
    spec = rubric_spec(**{k: v for k, v in data.items() if k != "name"})
    try:
        barrier.wait(timeout=60)
        started = time.time()
        with db.session_scope(engine) as session:
            result = rubric_versions.save_rubric(session, spec)
            saved = time.time()
            parent = result.version.parent.number if result.version.parent else None
            report = {
                "weight": data["criteria"][1]["weight"],
                "outcome": result.outcome,
                "number": result.version.number,
                "parent": parent,
                "started": started,
                "saved": saved,
            }
            time.sleep(HOLD_SECONDS)
            report["releasing"] = time.time()  # the commit, and so the lock's release, follows
        results.put(report)
    except Exception as err:  # reported to the test, which fails with it
        results.put({"error": f"{type(err).__name__}: {err}"})
    finally:
        engine.dispose()


def _run_writers(url: str, edits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(edits))
    results = context.Queue()
    processes = [
        context.Process(target=_save_edit, args=(url, data, barrier, results)) for data in edits
    ]
    for process in processes:
        process.start()
    reports = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    errors = [r["error"] for r in reports if "error" in r]
    assert not errors, errors
    return sorted(reports, key=lambda r: int(r["number"]))


@pytest.fixture
def postgres_url(make_postgres_database: Callable[[], str]) -> str:
    url = make_postgres_database()
    db.upgrade(url)
    return url


def _versions(url: str) -> list[tuple[int, int | None, list[float]]]:
    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            rows = session.scalars(select(RubricVersion).order_by(RubricVersion.number)).all()
            return [
                (v.number, v.parent.number if v.parent else None, [c.weight for c in v.criteria])
                for v in rows
            ]
    finally:
        engine.dispose()


def test_two_concurrent_edits_each_become_a_version(postgres_url: str) -> None:
    engine = db.make_engine(postgres_url)
    with db.session_scope(engine) as session:
        rubric_versions.save_rubric(session, rubric_spec())
    engine.dispose()

    first, second = _run_writers(postgres_url, [_edited(3), _edited(4)])

    assert (first["outcome"], second["outcome"]) == ("new version", "new version")
    assert (first["number"], first["parent"]) == (2, 1)
    assert (second["number"], second["parent"]) == (3, 2)
    # The second writer started while the first held the rubric, and could only save after
    # the first committed: it waited for the lock instead of racing for number 2.
    assert second["started"] < first["releasing"] < second["saved"]
    assert _versions(postgres_url) == [
        (1, None, [5, 2, -4]),
        (2, 1, [5, first["weight"], -4]),
        (3, 2, [5, second["weight"], -4]),
    ]
    assert {first["weight"], second["weight"]} == {3, 4}


def test_two_concurrent_creations_of_one_rubric(postgres_url: str) -> None:
    first, second = _run_writers(postgres_url, [_edited(3), _edited(4)])

    assert (first["outcome"], first["number"], first["parent"]) == ("created", 1, None)
    assert (second["outcome"], second["number"], second["parent"]) == ("new version", 2, 1)
    assert second["started"] < first["releasing"] < second["saved"]
    engine = db.make_engine(postgres_url)
    with Session(engine) as session:
        assert len(session.scalars(select(Rubric)).all()) == 1
        latest = resolve_version(session, "t/sleep")
        assert [c.weight for c in latest.criteria] == [5, second["weight"], -4]
    engine.dispose()
