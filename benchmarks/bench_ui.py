"""B7: the review pages at scale: the queue and a version's analytics, small and large database.

Run: ``python -m benchmarks.bench_ui [--repeats 20] [--runs 3] [--warm-up 3] [--database URL]``.

The review queue pages its versions and counts them in the database, and a version's
analytics expand and aggregate that version's own ``scores`` rows in the database; neither
should cost more as the database grows. This benchmark checks that: the same pages are
rendered on two fresh PostgreSQL databases, migrated with Alembic, in one run:

- small: 10 rubric versions, 1,000 judgments;
- large: 1,000 rubric versions, 100,000 judgments.

Every version has the same shape in both (one rubric with its own prompt, one version of 10
criteria, 10 completions of the prompt scored by one criterion-prob judge: 100 judgments and
10 scores per version; 80% drafts, 20% approved; 70% drafted by an LLM, 20% imported, 10%
written by a person), and the version whose analytics are read is seeded identically in
both. The rows go in as a user loading data would: SQLAlchemy Core inserts of many rows at
once through the real schema, with score details shaped exactly as the scorer
writes them (``criteria`` entries with judgment ids, failed ones with their failure class);
then ``VACUUM ANALYZE``, as autovacuum would leave a loaded database.

Pages, each rendered in-process through the whole app (FastAPI's TestClient with a signed-in
session cookie: middleware, session check, SQL, templates; no network): the queue's first
page, a later page (page 20 where it exists, else the last), the queue filtered by
origin=llm, and one version's analytics page. After the same warm-up requests for both sizes,
each run requests every page N times per size, small and large alternated, and gives each
page a ratio of medians large / small. The figure compared is the largest of a run's ratios,
with a target of at most 2x (the large database holds 100 times the rows): the median of the
runs, with the smallest and largest. Also recorded: the SQL statements per request and their
time, and, on the large database, EXPLAIN ANALYZE of every statement of one request of each
page (the indexes and sequential scans their plans use).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, text
from sqlalchemy.engine import make_url

from benchmarks.databases import create_database, drop_databases
from benchmarks.results import headline, save, spread
from rubricsvc.api import create_app
from rubricsvc.apikeys import create_key
from rubricsvc.config import ApiSettings, BrokerSettings, DatabaseSettings, Settings
from rubricsvc.db import make_engine, session_scope
from rubricsvc.hashing import content_hash
from rubricsvc.judging.aggregation import Outcome, aggregate
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import FailureClass, worst_value
from rubricsvc.models import Base
from rubricsvc.rubrics.queue import PAGE_SIZE
from rubricsvc.scoring.judge_configs import ensure_judge_config

POSTGRES = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
CRITERIA = 10  # per version
COMPLETIONS = 10  # per version's prompt, each judged on every criterion
AGGREGATION = "rar"  # what criterion-prob scores are stored under (the default aggregation)
TARGET_RATIO = 2.0
LATER_PAGE = 20
ANALYTICS_INDEX = 2  # the measured version: the third seeded, an LLM draft in both sizes
BATCH_VERSIONS = 100  # versions seeded per round of inserts
FAILURE_RATE = 0.03  # judgments that failed, by class below
FAILURE_CLASSES = [
    (FailureClass.INFRASTRUCTURE.value, 0.5, "HTTP 503 from the backend after 3 attempts"),
    (FailureClass.JUDGE.value, 0.35, "no verdict token among the top log-probabilities"),
    (FailureClass.RESPONSE.value, 0.15, "prompt of 8412 tokens exceeds the context of 8192"),
]
GENERATORS = ["Qwen/Qwen2.5-7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"]
TOPICS = ["health", "coding", "writing", "finance", "science"]
THEMES = ["accuracy", "completeness", "clarity", "safety"]
WEIGHTS = [5.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0, -2.0, -4.0]
JUDGE = JudgeSpec(
    name="bench-ui-judge",
    backend="openai",
    model="Qwen/Qwen2.5-7B-Instruct",
    mode="criterion-prob",
    backend_options={"base_url": "http://127.0.0.1:8000/v1"},
)
TABLES = {
    name: Base.metadata.tables[name]
    for name in (
        "prompts",
        "rubrics",
        "rubric_versions",
        "criteria",
        "completions",
        "judgments",
        "scores",
    )
}


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# --- databases -----------------------------------------------------------------------------


# --- seeding -------------------------------------------------------------------------------


@dataclass
class Seeded:
    versions: int
    secret: str  # a read key's secret, to sign in
    analytics_version_id: int
    seconds: float
    rows: dict[str, int] = field(default_factory=dict)


def _insert(conn: Connection, table: str, rows: list[dict[str, Any]]) -> list[int]:
    """Insert ``rows`` in one statement per page of rows; their ids, in order."""
    target = TABLES[table]
    statement = insert(target).returning(target.c.id, sort_by_parameter_order=True)
    return list(conn.scalars(statement, rows))


def _version_rows(i: int, versions: int, now: datetime) -> dict[str, Any]:
    """What the ``i``-th version is: its origin, status and age (oldest first, over 90 days)."""
    created = now - timedelta(days=90) + timedelta(days=90) * i / versions
    origin, detail = "human", dict[str, Any]({"author": "ana"})
    if i % 10 < 7:
        origin = "llm"
        detail = {
            "generator_model": GENERATORS[i % 2],
            "template": "draft_rubric.txt",
            "template_hash": sha("draft_rubric.txt v3"),
            "sampling": {"temperature": 0.7, "max_tokens": 1024, "seed": i},
        }
    elif i % 10 < 9:
        origin, detail = "imported", {"source": "healthbench", "path": f"healthbench/{i}.jsonl"}
    approved = i % 5 == 4
    return {
        "number": 1,
        "title": f"Rubric for question {i}",
        "origin": origin,
        "origin_detail": detail,
        "note": None,
        "status": "approved" if approved else "draft",
        "reviewed_by": "ana" if approved else None,
        "reviewed_at": created + timedelta(hours=6) if approved else None,
        "review_note": "Checked against the guideline." if approved else None,
        "created_at": created,
    }


def _criterion(i: int, c: int) -> dict[str, Any]:
    weight = WEIGHTS[c]
    category = (
        "pitfall"
        if weight < 0
        else "essential"
        if weight >= 4
        else "important"
        if weight >= 2
        else "optional"
    )
    body = (
        f"Criterion {c + 1} of question {i}: the answer "
        + ("claims something the sources contradict" if weight < 0 else "states and justifies")
        + f" point {c + 1} ({THEMES[c % len(THEMES)]})"
    )
    view = {"text": body, "explanation": None, "scale": {"type": "binary"}, "check": None}
    return {
        "position": c,
        "text": body,
        "explanation": f"Look for point {c + 1} in the answer's own words.",
        "weight": weight,
        "category": category,
        "theme": THEMES[c % len(THEMES)],
        "kind": "judge",
        "scale": {"type": "binary"},
        "check": None,
        "required": False,
        "tags": [],
        "content_hash": content_hash(view),
    }


def _judgment(
    rng: random.Random, quality: float, weight: float
) -> tuple[dict[str, Any], str | None, str | None]:
    """A criterion-prob judgment's columns; its failure class and error when it failed."""
    if rng.random() < FAILURE_RATE:
        draw, cls, error = rng.random(), FAILURE_CLASSES[-1][0], FAILURE_CLASSES[-1][2]
        for name, share, message in FAILURE_CLASSES:
            if draw < share:
                cls, error = name, message
                break
            draw -= share
        columns: dict[str, Any] = {
            "status": "failed",
            "value": None,
            "verdict": None,
            "error": error,
            "failure": cls,
            "detail": None,
            "attempts": 3 if cls != "response" else 1,
        }
        return columns, cls, error
    likely = (1.0 - quality) if weight < 0 else quality
    p_yes = min(0.999, max(0.001, rng.gauss(likely, 0.2)))
    p_no = max(0.0, 0.98 - p_yes) + 0.001
    mass = p_yes + p_no
    value = p_yes / mass
    columns = {
        "status": "ok",
        "value": value,
        "verdict": "yes" if value >= 0.5 else "no",
        "error": None,
        "failure": None,
        "detail": {"p_yes": p_yes, "p_no": p_no, "mass": mass},
        "attempts": 1,
    }
    return columns, None, None


def _seed_batch(
    conn: Connection, indices: range, versions: int, judge_id: int, judge_hash: str
) -> dict[int, int]:
    """Seed the versions ``indices``; their ids by index."""
    now = datetime.now(UTC)
    prompts = []
    for i in indices:
        messages = [
            {
                "role": "user",
                "content": f"Question {i} ({TOPICS[i % 5]}): explain, "
                "with sources, what a careful answer should cover and why.",
            }
        ]
        prompts.append(
            {
                "content_hash": content_hash(messages),
                "external_id": f"bench-ui-q{i}",
                "messages": messages,
                "reference_answer": None,
                "tags": {"topic": TOPICS[i % 5], "lang": "en"},
            }
        )
    prompt_ids = _insert(conn, "prompts", prompts)
    rubric_ids = _insert(
        conn,
        "rubrics",
        [
            {"name": f"bench/{TOPICS[i % 5]}/{i:05d}", "prompt_id": p, "description": None}
            for i, p in zip(indices, prompt_ids, strict=True)
        ],
    )
    criteria_of = {i: [_criterion(i, c) for c in range(CRITERIA)] for i in indices}
    version_ids = _insert(
        conn,
        "rubric_versions",
        [
            {
                **_version_rows(i, versions, now),
                "rubric_id": r,
                "parent_id": None,
                "dimension_weights": None,
                "content_hash": content_hash(
                    [{k: v for k, v in c.items() if k != "content_hash"} for c in criteria_of[i]]
                ),
            }
            for i, r in zip(indices, rubric_ids, strict=True)
        ],
    )
    criterion_ids = _insert(
        conn,
        "criteria",
        [
            {**c, "version_id": v}
            for i, v in zip(indices, version_ids, strict=True)
            for c in criteria_of[i]
        ],
    )
    completions = []
    for i, p in zip(indices, prompt_ids, strict=True):
        for j in range(COMPLETIONS):
            answer = (
                f"Answer {j} to question {i}. " + "A careful answer names its sources, "
                "weighs the evidence and says what remains uncertain. " * (2 + j % 4)
            )
            completions.append(
                {
                    "prompt_id": p,
                    "external_id": f"bench-ui-q{i}-a{j}",
                    "text": answer,
                    "messages": None,
                    "content_hash": content_hash(answer),
                    "source": "bench-ui",
                    "metadata": {"policy": "grpo", "step": 100 * j, "run": "bench"},
                }
            )
    completion_ids = _insert(conn, "completions", completions)

    judgments: list[dict[str, Any]] = []
    planned: list[tuple[int, int, int, str | None, str | None, float | None, str | None]] = []
    for n, i in enumerate(indices):
        rng = random.Random(i)  # the same version gets the same verdicts in either size
        for j in range(COMPLETIONS):
            completion_row = completions[n * COMPLETIONS + j]
            completion_id = completion_ids[n * COMPLETIONS + j]
            quality = rng.random()
            for c in range(CRITERIA):
                criterion = criteria_of[i][c]
                columns, cls, error = _judgment(rng, quality, criterion["weight"])
                judgments.append(
                    {
                        **columns,
                        "cache_key": sha(
                            f"{judge_hash}:{criterion['content_hash']}:"
                            f"{prompts[n]['content_hash']}:{completion_row['content_hash']}"
                        ),
                        "judge_config_id": judge_id,
                        "completion_id": completion_id,
                        "criterion_id": criterion_ids[n * CRITERIA + c],
                        "other_completion_id": None,
                        "reasoning": None,
                        "raw_output": None,
                        "prompt_tokens": 380 + 40 * (j % 4) + 3 * c,
                        "completion_tokens": 0,
                        "latency_ms": round(rng.uniform(20, 90), 1),
                    }
                )
                planned.append((n, j, c, cls, error, columns["value"], columns["verdict"]))
    judgment_ids = _insert(conn, "judgments", judgments)

    scores: list[dict[str, Any]] = []
    for start in range(0, len(planned), CRITERIA):
        n, j = planned[start][0], planned[start][1]
        i = indices[n]
        entries: list[dict[str, Any]] = []
        outcomes: list[Outcome] = []
        failures = {cls.value: 0 for cls in FailureClass}
        for k in range(start, start + CRITERIA):
            _, _, c, cls, error, value, verdict = planned[k]
            criterion = criteria_of[i][c]
            criterion_id = criterion_ids[n * CRITERIA + c]
            weight, theme = criterion["weight"], criterion["theme"]
            # As rubricsvc.judging.modes.assess._criterion_outcome writes an entry.
            entry: dict[str, Any] = {
                "criterion_id": criterion_id,
                "position": c,
                "text": criterion["text"],
                "weight": weight,
                "theme": theme,
            }
            if cls is None:
                entry.update(status="ok", value=value, verdict=verdict, judgment_id=judgment_ids[k])
            else:
                entry.update(
                    status="failed",
                    value=None,
                    error=error,
                    failure=cls,
                    judgment_id=judgment_ids[k],
                )
                failures[cls] += 1
                if cls == FailureClass.RESPONSE.value:  # the response pays: its worst value
                    value = worst_value(weight)
                    entry.update(status="unjudgeable", value=value, verdict="worst")
            entries.append(entry)
            outcomes.append(Outcome(criterion_id, weight, value, theme, False))
        result = aggregate(AGGREGATION, outcomes)
        reasons = list(result.reasons)
        worst = sum(1 for e in entries if e["status"] == "unjudgeable")
        if worst:
            reasons.insert(
                0,
                f"{worst} criteria scored at their worst value: the response "
                "could not be judged (it does not fit the judge's context)",
            )
        scores.append(
            {
                "completion_id": completion_ids[n * COMPLETIONS + j],
                "rubric_version_id": version_ids[n],
                "judge_config_id": judge_id,
                "aggregation": AGGREGATION,
                "value": result.value,
                "coverage": result.coverage,
                "status": result.status.value,
                "details": {"criteria": entries, "reasons": reasons, "failures": failures},
            }
        )
    conn.execute(insert(TABLES["scores"]), scores)
    return dict(zip(indices, version_ids, strict=True))


def seed(url: str, versions: int) -> Seeded:
    engine = make_engine(url)
    started = time.perf_counter()
    with session_scope(engine) as session:
        judge = ensure_judge_config(session, JUDGE)
        judge_id, judge_hash = judge.id, judge.config_hash
        secret = create_key(session, "bench-reviewer", ["read"]).secret
    ids: dict[int, int] = {}
    with engine.begin() as conn:
        for start in range(0, versions, BATCH_VERSIONS):
            indices = range(start, min(versions, start + BATCH_VERSIONS))
            ids.update(_seed_batch(conn, indices, versions, judge_id, judge_hash))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
        rows = {
            name: int(conn.scalar(select(func.count()).select_from(table)) or 0)
            for name, table in TABLES.items()
        }
        rows["drafts"] = int(
            conn.scalar(text("SELECT count(*) FROM rubric_versions WHERE status = 'draft'")) or 0
        )
    seconds = time.perf_counter() - started
    engine.dispose()
    return Seeded(versions, secret, ids[ANALYTICS_INDEX], seconds, rows)


# --- measuring -----------------------------------------------------------------------------


class Recorder:
    """The SQL statements an engine runs while recording: text, parameters and seconds."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[tuple[str, Any, float]] = []
        self.recording = False
        self._started = 0.0
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, _conn: Any, _cursor: Any, _statement: str, *_: Any) -> None:
        self._started = time.perf_counter()

    def _after(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if self.recording:
            self.statements.append((statement, parameters, time.perf_counter() - self._started))

    @contextmanager
    def record(self) -> Iterator[list[tuple[str, Any, float]]]:
        self.statements = []
        self.recording = True
        try:
            yield self.statements
        finally:
            self.recording = False


@dataclass
class Site:
    """One size's app: its client (signed in), engine, recorder and page paths."""

    name: str
    seeded: Seeded
    engine: Engine
    recorder: Recorder
    client: TestClient
    paths: dict[str, str]
    samples: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # page, run
    statements: dict[str, list[int]] = field(default_factory=dict)
    sql_seconds: dict[str, list[float]] = field(default_factory=dict)
    last: dict[str, list[tuple[str, Any, float]]] = field(default_factory=dict)

    def get(self, label: str, run: int | None = None) -> None:
        """Request the page; timed as run ``run``, or a warm-up if None."""
        path = self.paths[label]
        with self.recorder.record() as statements:
            started = time.perf_counter()
            response = self.client.get(path)
            seconds = time.perf_counter() - started
        if response.status_code != 200 or PAGE_MARKS[label] not in response.text:
            raise SystemExit(f"{self.name} {path}: {response.status_code} {response.text[:300]}")
        if run is not None:
            self.samples.setdefault((label, run), []).append(seconds)
            self.statements.setdefault(label, []).append(len(statements))
            self.sql_seconds.setdefault(label, []).append(sum(s for *_, s in statements))
            self.last[label] = list(statements)


PAGES = ["queue, first page", "queue, a later page", "queue, origin=llm", "analytics of a version"]
PAGE_MARKS = {
    "queue, first page": 'id="queue"',
    "queue, a later page": 'id="queue"',
    "queue, origin=llm": 'id="queue"',
    "analytics of a version": 'id="criterion-analytics"',
}


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    if not found:
        raise SystemExit("the sign-in page has no CSRF token")
    return found.group(1)


def open_site(name: str, url: str, seeded: Seeded, stack: list[Any]) -> Site:
    engine = make_engine(url)
    settings = Settings(
        db=DatabaseSettings(url=url),
        broker=BrokerSettings(url=None),
        api=ApiSettings(session_secret=SecretStr(uuid.uuid4().hex)),
    )
    client = TestClient(
        create_app(settings, engine), base_url="http://testserver", follow_redirects=False
    )
    client.__enter__()
    stack.append(client)
    login = client.get("/ui/login")
    answer = client.post(
        "/ui/login",
        data={"api_key": seeded.secret, "csrf_token": csrf_of(login.text), "next": "/ui/queue"},
    )
    if answer.status_code != 303 or "rubricsvc_session" not in client.cookies:
        raise SystemExit(f"{name}: sign-in failed: {answer.status_code} {answer.text[:300]}")
    pages = max(1, -(-seeded.rows["drafts"] // PAGE_SIZE))
    paths = {
        "queue, first page": "/ui/queue",
        "queue, a later page": f"/ui/queue?page={min(LATER_PAGE, pages)}",
        "queue, origin=llm": "/ui/queue?origin=llm",
        "analytics of a version": f"/ui/versions/{seeded.analytics_version_id}/analytics",
    }
    return Site(name, seeded, engine, Recorder(engine), client, paths)


def measure(sites: Sequence[Site], warm_up: int, repeats: int, runs: int) -> None:
    """The same warm-up for every size and page; then ``runs`` runs, each requesting every
    page ``repeats`` times per size, sizes alternated."""
    for label in PAGES:
        for site in sites:
            for _ in range(warm_up):
                site.get(label)
    for run in range(runs):
        for label in PAGES:
            for r in range(repeats):
                for site in sites if r % 2 == 0 else reversed(sites):
                    site.get(label, run)


# --- plans ---------------------------------------------------------------------------------

INDEX_USE = re.compile(r"(?:Index(?: Only)? Scan(?: Backward)? using|Bitmap Index Scan on) (\w+)")
SEQ_SCAN = re.compile(r"Seq Scan on (\w+)")


def explain(engine: Engine, statements: Sequence[tuple[str, Any, float]]) -> list[dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) of each SELECT of one request: its key lines and indexes."""
    plans = []
    with engine.connect() as conn:
        for statement, parameters, seconds in statements:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            lines = [
                row[0]
                for row in conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters or {}
                )
            ]
            plan = "\n".join(lines)
            key = [
                line.rstrip()
                for n, line in enumerate(lines)
                if n == 0
                or "->" in line
                or "Execution Time" in line
                or "Index Cond" in line
                or "Filter:" in line
                or "Rows Removed" in line
            ]
            time_ms = re.search(r"Execution Time: ([\d.]+) ms", plan)
            plans.append(
                {
                    "sql": " ".join(statement.split())[:400],
                    "seconds_in_request": round(seconds, 5),
                    "execution_ms": float(time_ms.group(1)) if time_ms else None,
                    "indexes": sorted(set(INDEX_USE.findall(plan))),
                    "seq_scans": sorted(set(SEQ_SCAN.findall(plan))),
                    "plan": key[:40],
                }
            )
            conn.rollback()
    return plans


# --- the run -------------------------------------------------------------------------------


def median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=20, help="timed requests per page and size, each run"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs, each giving every ratio")
    parser.add_argument("--warm-up", type=int, default=3, help="untimed requests first, each")
    parser.add_argument("--database", default=POSTGRES, help="a PostgreSQL server's admin URL")
    parser.add_argument("--small", type=int, default=10, help="versions in the small database")
    parser.add_argument("--large", type=int, default=1000, help="versions in the large database")
    args = parser.parse_args()
    if make_url(args.database).get_backend_name() != "postgresql":
        raise SystemExit("--database: a PostgreSQL URL (the pages aggregate in PostgreSQL)")

    admin = create_engine(args.database, isolation_level="AUTOCOMMIT")
    created: list[str] = []
    clients: list[Any] = []
    sites: list[Site] = []
    try:
        for name, versions in (("small", args.small), ("large", args.large)):
            url = create_database(admin, prefix="rubricsvc_bench_ui")
            created.append(url)
            seeded = seed(url, versions)
            print(
                f"{name}: seeded {versions} versions, {seeded.rows['judgments']} judgments, "
                f"{seeded.rows['scores']} scores in {seeded.seconds:.1f} s",
                flush=True,
            )
            sites.append(open_site(name, url, seeded, clients))
        measure(sites, args.warm_up, args.repeats, args.runs)
        large = sites[-1]
        plans = {label: explain(large.engine, large.last[label]) for label in PAGES}
    finally:
        for client in clients:
            client.__exit__(None, None, None)
        for site in sites:
            site.engine.dispose()
        drop_databases(admin, created)
        admin.dispose()

    pages: dict[str, Any] = {}
    ratios: dict[str, list[float]] = {}  # large / small, per run
    for label in PAGES:
        # Per size, the median of each run's requests.
        medians = {
            site.name: [median_ms(site.samples[label, run]) for run in range(args.runs)]
            for site in sites
        }
        ratios[label] = [
            large / small for small, large in zip(medians["small"], medians["large"], strict=True)
        ]
        figures: dict[str, dict[str, Any]] = {
            site.name: {
                "path": site.paths[label],
                "median_ms": spread(medians[site.name], digits=2),
                "statements": max(site.statements[label]),
                "sql_median_ms": round(1000 * statistics.median(site.sql_seconds[label]), 2),
            }
            for site in sites
        }
        ratio = spread(ratios[label])
        pages[label] = {**figures, "ratio": ratio, "within_target": ratio["median"] <= TARGET_RATIO}
    largest = [max(run) for run in zip(*ratios.values(), strict=True)]
    result = {
        "database": "postgresql",
        "runs": args.runs,
        "repeats": args.repeats,
        "warm_up": args.warm_up,
        "target_ratio": TARGET_RATIO,
        "per_version": {
            "criteria": CRITERIA,
            "completions": COMPLETIONS,
            "judgments": CRITERIA * COMPLETIONS,
            "scores": COMPLETIONS,
        },
        "sizes": {
            site.name: {
                "versions": site.seeded.versions,
                **site.seeded.rows,
                "seed_seconds": round(site.seeded.seconds, 1),
            }
            for site in sites
        },
        "pages": pages,
        "headlines": {
            "largest_ratio": headline(
                largest,
                compares=f"median time of a review page on {args.large:,} versions / on "
                f"{args.small:,}, the largest of the {len(PAGES)} pages in each run",
                at_most=TARGET_RATIO,
            )
        },
        "explain_large": plans,
    }

    def text(figure: dict[str, Any], unit: str = "") -> str:
        return f"{figure['median']:.2f}{unit} [{figure['min']:.2f}-{figure['max']:.2f}]"

    print(
        f"\nover {args.runs} runs, median [min-max]:\n{'page':28} {'small ms':>22} "
        f"{'large ms':>22} {'ratio':>22}  statements  SQL ms (small/large)"
    )
    for label, page in pages.items():
        print(
            f"{label:28} {text(page['small']['median_ms']):>22} "
            f"{text(page['large']['median_ms']):>22} {text(page['ratio'], 'x'):>22}  "
            f"{page['small']['statements']:>4}/{page['large']['statements']:<5}  "
            f"{page['small']['sql_median_ms']:.1f}/{page['large']['sql_median_ms']:.1f}"
        )
    for label, statements in plans.items():
        used = sorted({i for s in statements for i in s["indexes"]})
        scans = sorted({t for s in statements for t in s["seq_scans"]})
        print(
            f"{label}: indexes {', '.join(used) or 'none'}; seq scans {', '.join(scans) or 'none'}"
        )
    save("ui", result)
    print(json.dumps(result["headlines"], indent=2))


if __name__ == "__main__":
    main()
