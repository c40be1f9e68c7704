"""Shared fixtures: real SQLite and PostgreSQL databases migrated with Alembic.

PostgreSQL tests use ``RUBRICSVC_TEST_POSTGRES_URL`` (default: the local server, database
``test``). Each test run creates its own throw-away databases there and drops them after.
With ``CI=true`` an unreachable server fails the run; elsewhere those tests skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from rubricsvc import db, heap
from rubricsvc.models import Base
from tests.model_loads import shared_pretrained_loads
from tests.requirements import (  # noqa: F401 - IN_CI is imported from here too
    COLLECTED,
    CURRENT_TEST,
    FIXTURE_MARKERS,
    IN_CI,
    unavailable,
    uses,
)

# Servers a test process shares between modules (the vLLM server, tests/shared_servers.py);
# pytester, for the tests of the suite's own fixtures.
pytest_plugins = ["tests.shared_servers", "pytester"]

# vLLM compiles two sampler helpers with torch.compile (the ranks of logprobs, sampling with a
# temperature): on CPU, gcc builds their kernels and a 150 MB precompiled header on a machine's
# first run, which every CI run is. Nothing here is about torch.compile, and they run alike
# eagerly: the backend contract tests with a fresh compile cache took 240 s and 230 CPU-s,
# 191 s and 185 CPU-s without it. Set before torch is imported; the servers inherit it.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Several test processes share the machine's cores: one torch thread each (set before
    # torch is imported; the commands and servers a test starts inherit it). On a busy
    # 2-core machine one thread is also faster than two that fight over a core.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

POSTGRES_URL = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _postgres_unavailable_reason() -> str | None:
    try:
        engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as err:
        return (
            f"PostgreSQL not reachable at {POSTGRES_URL} ({str(err).splitlines()[0]}); "
            "start it or set RUBRICSVC_TEST_POSTGRES_URL"
        )
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: COLLECTED holds every test
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures need (tests/requirements.py FIXTURE_MARKERS),
    then put the heaviest modules first."""
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for marker in FIXTURE_MARKERS.get(fixture, ()):
                if item.get_closest_marker(marker) is None:
                    item.add_marker(marker)
    COLLECTED[:] = items
    # pytest-xdist (`make test`) hands whole modules to its processes in this order: a heavy
    # module handed out last would keep one process busy while the others idle. Modules with
    # a test marked slow go first, the longest first (by the seconds their tests declare with
    # `slow(seconds=N)`, N a test's time alone on an idle 2-core machine: a module of one test
    # of minutes would otherwise wait its turn behind modules of many short ones), then those
    # with one marked model, then the rest. The sort is stable, so each module's tests stay
    # together and in their order.
    tier: dict[str, int] = {}
    declared: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        slow = item.get_closest_marker("slow")
        rank = 0 if slow else 1 if item.get_closest_marker("model") else 2
        tier[module] = min(tier.get(module, 2), rank)
        declared[module] = declared.get(module, 0.0) + float(
            slow.kwargs.get("seconds", 0) if slow else 0
        )

    def module_rank(item: pytest.Item) -> tuple[int, float]:
        module = item.nodeid.split("::", 1)[0]
        return tier[module], -declared[module]

    items.sort(key=module_rank)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    CURRENT_TEST.append(item)
    _settle_heap_between_modules(item)


_SETTLED_FOR: list[str] = []  # the module the heap was last settled before


def _settle_heap_between_modules(item: pytest.Item) -> None:
    """Before each module's first test, the process's heap settled as a server settles its
    own (``rubricsvc.heap``): what earlier modules left alive (imported libraries, a loaded
    model) frozen out of the cycle collector's sight, the young generation collected less
    often. A test process holds millions of such objects, and each full collection walked
    them all: a third of a second each, a quarter of the CPU time of ``make test-fast``."""
    module = item.nodeid.split("::", 1)[0]
    if _SETTLED_FOR[-1:] != [module]:
        _SETTLED_FOR[:] = [module]
        heap.settle()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    CURRENT_TEST.clear()


# A failed test's own logs (workers', servers', a data host's), tail first: a CI run keeps
# only its output, and a test that runs processes says little more than "timed out".
LOG_TAIL_FILES = 8
LOG_TAIL_LINES = 60


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when != "call" or not report.failed or not isinstance(tmp, Path):
        return report
    for log in sorted(tmp.rglob("*.log"))[:LOG_TAIL_FILES]:
        with contextlib.suppress(OSError):
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            tail = "\n".join(line[:300] for line in lines)
            report.sections.append((f"log {log.relative_to(tmp)} (last lines)", tail))
    return report


@pytest.fixture(scope="session", autouse=True)
def _model_loads_need_the_model_mark() -> Iterator[None]:
    """Loading a model in this process (a CLI command, the API, a trainer) is using it: the
    test must be marked ``model`` (``uses``). The backends import their libraries lazily, so
    this costs nothing where no model is loaded. A transformers backend's files are read once
    per process (tests/model_loads.py)."""
    from rubricsvc.backends.transformers import TransformersBackend
    from rubricsvc.backends.vllm import VLLMBackend

    originals = {cls: cls.__init__ for cls in (TransformersBackend, VLLMBackend)}

    def checked(original: Any, loads: Any) -> Any:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            uses("model")
            # An adapter is merged into the weights it loads: they must be its own, never the
            # cached base another backend serves.
            with contextlib.nullcontext() if kwargs.get("adapter") else loads():
                original(self, *args, **kwargs)

        return init

    # The in-process judge's files are read once per process (tests/model_loads.py).
    TransformersBackend.__init__ = checked(  # type: ignore[method-assign]
        originals[TransformersBackend], shared_pretrained_loads
    )
    VLLMBackend.__init__ = checked(originals[VLLMBackend], contextlib.nullcontext)  # type: ignore[method-assign]
    yield
    for cls, original in originals.items():
        cls.__init__ = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _fresh_canaries() -> None:
    """Forget canary outcomes between tests: scripted judges change their behaviour under one
    judge config, which a real judge does not."""
    from rubricsvc.scoring.attribution import CANARIES

    CANARIES.clear()


@pytest.fixture(autouse=True)
def _no_judge_providers_left_over(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close the in-process scorers' shared judge providers a test left open (a scorer it
    made and never closed): the next test in this process would otherwise share its loaded
    models, and a run's count of the models it loaded (``judge_loads``) would include them.
    Set RUBRICSVC_TEST_REPORT_LEAKS=1 to name the tests that leave one."""
    yield
    scorers = sys.modules.get("trainer.scorers")  # never imported here: trainer is optional
    if scorers is None:
        return
    left = scorers.close_shared_providers()
    if left and os.environ.get("RUBRICSVC_TEST_REPORT_LEAKS"):
        sys.stderr.write(f"\n{request.node.nodeid} left {left} judge provider(s) open\n")


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin URL of a reachable PostgreSQL server (skip, or fail in CI, if there is none).
    Its users are marked ``postgres`` at collection (FIXTURE_MARKERS)."""
    reason = _postgres_unavailable_reason()
    if reason is not None:
        unavailable(reason)
    return POSTGRES_URL


@pytest.fixture(scope="session")
def make_postgres_database(postgres_server: str) -> Iterator[object]:
    """A factory for fresh empty databases on the server, all dropped at the end of the run."""
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    created: list[str] = []

    def factory() -> str:
        name = f"rubricsvc_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        created.append(name)
        return make_url(postgres_server).set(database=name).render_as_string(hide_password=False)

    yield factory
    with admin.connect() as conn:
        for name in created:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.sqlite"
    db.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(migrated_sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite database of its own for one test."""
    path = tmp_path / "rubricsvc.sqlite"
    shutil.copy(migrated_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def postgres_migrated_url(make_postgres_database: object) -> str:
    url = make_postgres_database()  # type: ignore[operator]
    db.upgrade(url)
    return url


def _truncate_all(engine: Engine) -> None:
    # TRUNCATE fires no row-level DELETE triggers, so immutable rows can be cleared between tests.
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated, empty database: each test runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        yield request.getfixturevalue("sqlite_url")
        return
    url = request.getfixturevalue("postgres_migrated_url")
    engine = db.make_engine(url)
    _truncate_all(engine)
    yield url
    _truncate_all(engine)
    engine.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = db.make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session
        session.rollback()
