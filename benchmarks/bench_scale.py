"""B6, scale: what a judgment costs on the hot paths as the store grows to a million.

Run: ``python -m benchmarks.bench_scale [--sizes 10000 100000 1000000] [--runs 3]
[--repeats 5]``.

Two fresh PostgreSQL databases, migrated with Alembic, hold the same measured workload,
created through the product: 10 prompts, each with an approved rubric of 10 criteria and 10
completions, scored in-process by a fixed-latency scripted judge (1,000 judgments and 100
scores), and one score job over it run to its end. The reference store is then filled to the
smallest size (10^4 judgments) and stays there; the grown store is filled to each size in
turn (10^4, then 10^5, then 10^6), loading only what each step adds. Filling is a bulk load
(COPY through the real schema) of blocks shaped exactly like one of the workload's prompts: a
prompt, its approved rubric version and criteria, 10 completions, every judgment and score,
with ids, foreign keys, hashes and the judgment ids inside score details rewritten; half the
completions carry the reward route's source, as an RL loop's rollouts do. Then ``VACUUM
ANALYZE``, as autovacuum would leave a loaded database.

At each size, per judgment of the same workload, in both stores:

- (a) cache lookup: the judgment cache read of a re-scoring of the workload (every key a hit);
- (b) submission: planning and submitting a score job over the workload (no worker runs it;
  each submission is deleted afterwards, so every one creates a job);
- (c) report: the finished job's report (``jobs.job_report``: its progress and its scores);
- (d) rewards: ``POST /v1/rewards`` with the workload's 100 pairs, all judged before,
  in-process through FastAPI's TestClient with an API key;
- (e) bytes on disk: the judgments table with its indexes, and the whole database, over the
  number of judgments (grown store).

Each of (a)-(d) is a run's fastest of ``--repeats`` calls per store, the stores alternated
call by call, after the same warm-up at every size; ``--runs`` runs per size. The machine is
shared, so its load changes over minutes: alternating puts the same load on both stores, and
the figure compared is the grown store's cost over the reference store's, per run. At the
smallest size both stores are the same size, which shows what that ratio is worth. The
headlines are the ratios at 10^6, with a target of at most 1.5x. At the largest size the SQL
of one call of each is explained (EXPLAIN (ANALYZE, BUFFERS)), with the indexes and sequential
scans the plans use.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import JSON, Connection, Engine, create_engine, delete, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from benchmarks.bench_ui import Recorder, explain, sha
from benchmarks.databases import create_database
from benchmarks.results import headline, save, spread
from rubricsvc.api import create_app
from rubricsvc.apikeys import create_key
from rubricsvc.backends import backend_from_spec
from rubricsvc.config import ApiSettings, BrokerSettings, DatabaseSettings, JobSettings, Settings
from rubricsvc.db import make_engine, session_scope
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Base, Completion, ScoreChunk, ScoreJob
from rubricsvc.prompts import find_prompt, prompt_hash
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring import jobs, lifecycle
from rubricsvc.scoring.chunks import run_chunk
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.scorer import ScoreOptions, case_plan, score
from rubricsvc.scoring.selection import Selection, select_work
from rubricsvc.scoring.store import judgments_by_key

POSTGRES = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SIZES = (10_000, 100_000, 1_000_000)
TARGET_RATIO = 1.5
PROMPTS = 10  # in the measured workload
COMPLETIONS = 10  # per prompt
CRITERIA = 10  # per rubric: every completion is judged on each
SOURCE = "bench-scale"  # the measured completions' source; the bulk-loaded ones have others
CHUNK_JUDGMENTS = 256
LATENCY = 0.002  # seconds per judge request
BLOCKS_PER_ROUND = 1_000  # bulk-loaded prompts per transaction (100,000 judgments)
PLAN_LINE = 300  # characters kept of each line of a recorded plan
JUDGE = JudgeSpec(
    name="bench-scale-fixed-latency",
    backend="faulty",
    backend_options={"inner": "scripted", "failure_rate": 0.0, "latency": LATENCY},
    retry_backoff=0,
)
# A submission over the workload under another aggregation than the finished job's: a new
# job every time (the same work under the same options would find that job instead).
SUBMIT_OPTIONS = ScoreOptions(aggregation="healthbench")
# Parents before children, as their foreign keys need them.
TABLES = ["prompts", "rubrics", "rubric_versions", "criteria", "completions", "judgments", "scores"]
OPERATIONS = {
    "cache_lookup": "(a) re-scoring: judgment cache lookup, all hits",
    "submit": "(b) planning and submitting a score job",
    "report": "(c) a finished job's report",
    "rewards": "(d) POST /v1/rewards, a cached batch",
}


# --- the database --------------------------------------------------------------------------


def drop_database(admin: Engine, url: str) -> None:
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))


def vacuum_analyze(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


def count_judgments(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(text("SELECT count(*) FROM judgments")) or 0)


def bytes_per_judgment(engine: Engine) -> dict[str, float]:
    """The judgments table with its indexes (and TOAST), and the whole database, per judgment."""
    with engine.connect() as conn:
        table, database, judgments = conn.execute(
            text(
                "SELECT pg_total_relation_size('judgments'), "
                "pg_database_size(current_database()), (SELECT count(*) FROM judgments)"
            )
        ).one()
    return {
        "judgments_table": round(table / judgments, 1),
        "database": round(database / judgments, 1),
    }


# --- the measured workload, through the product --------------------------------------------


@dataclass
class Workload:
    """What every size measures: the same selection, keys, job and reward batch."""

    judge_id: int
    selection: Selection
    keys: list[str]
    job_id: int
    reward_items: list[dict[str, str]]
    api_key: str
    first_prompt_id: int  # the block the bulk load copies

    @property
    def judgments(self) -> int:
        return len(self.keys)


class KeptOutbox:
    """A dispatcher that only keeps the chunk ids it is sent: no worker runs them."""

    keeps_messages = True

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send(self, judge: str, chunk_ids: Sequence[int]) -> None:
        self.sent.extend(chunk_ids)


def add_workload(engine: Engine) -> Workload:
    """Rubrics, completions and their scores, stored as a user would; then a finished job."""
    with session_scope(engine) as session:
        judge_id = ensure_judge_config(session, JUDGE).id
        for p in range(PROMPTS):
            add_prompt_block(session, p)
        api_key = create_key(session, "bench-scale", ["score"]).secret
    selection = Selection(sources=(SOURCE,))
    with session_scope(engine) as session:
        report = score(session, JUDGE, selection, ScoreOptions(), lambda: backend_from_spec(JUDGE))
        assert report.failed == 0 and report.computed == PROMPTS * COMPLETIONS * CRITERIA
    with session_scope(engine) as session:
        keys, reward_items, first_prompt_id = planned_keys(session, selection)
    return Workload(
        judge_id,
        selection,
        keys,
        finished_job(engine, selection),
        reward_items,
        api_key,
        first_prompt_id,
    )


def add_prompt_block(session: Session, p: int) -> None:
    rubric = RubricSpec.model_validate(
        {
            "name": f"bench-scale/{p}",
            "prompt": {
                "text": f"Question {p}: explain, with sources, what a careful answer covers.",
                "external_id": f"bench-scale-q{p}",
            },
            "criteria": [
                {
                    "text": f"Criterion {c} of question {p}: the answer states point {c}.",
                    "weight": CRITERIA - c if c < CRITERIA - 2 else -2,
                }
                for c in range(CRITERIA)
            ],
        }
    )
    approve(session, save_rubric(session, rubric).version, reviewer="bench")
    prompt = find_prompt(session, external_id=f"bench-scale-q{p}")
    for i in range(COMPLETIONS):
        answer = f"Answer {i} to question {p}. " + "It names its sources and weighs them. " * 4
        session.add(
            Completion(
                prompt_id=prompt.id,
                text=answer,
                content_hash=content_hash(answer),
                source=SOURCE,
                meta={"policy": "grpo", "step": 100 * i},
            )
        )


def planned_keys(
    session: Session, selection: Selection
) -> tuple[list[str], list[dict[str, str]], int]:
    """The cache keys re-scoring ``selection`` reads, its reward items, and its first prompt."""
    judge_hash = JUDGE.config_hash()
    work, _ = select_work(session, selection)
    keys = [item.key for c, v in work for item in case_plan(JUDGE, judge_hash, c, v).items]
    items = [{"prompt_id": str(c.prompt.external_id), "completion": c.text} for c, _ in work]
    return keys, items, min(c.prompt_id for c, _ in work)


def finished_job(engine: Engine, selection: Selection) -> int:
    """A score job over ``selection``, its chunks run here to the end (every judgment cached)."""
    outbox = KeptOutbox()
    with session_scope(engine) as session:
        submission = lifecycle.submit(
            session, outbox, JUDGE, selection, ScoreOptions(), CHUNK_JUDGMENTS
        )
        job_id = submission.job.id
    for chunk_id in outbox.sent:
        run = run_chunk(engine, chunk_id, backend_from_spec, JobSettings())
        assert run.outcome == "done", run
    with session_scope(engine) as session:
        assert jobs.progress(session, job_id).status == "done"
    return job_id


# --- growing the store: bulk loads shaped like one measured prompt -------------------------


@dataclass
class Template:
    """One measured prompt's rows in every table, as the product stored them."""

    rows: dict[str, list[dict[str, Any]]]

    @classmethod
    def read(cls, conn: Connection, prompt_id: int) -> Template:
        def rows(table: str, where: str, order: str = "id") -> list[dict[str, Any]]:
            query = text(f"SELECT * FROM {table} WHERE {where} ORDER BY {order}")
            found = conn.execute(query, {"p": prompt_id}).mappings().all()
            # created_at is left to the column's default: the time of the load.
            return [{k: v for k, v in row.items() if k != "created_at"} for row in found]

        rubrics = "SELECT id FROM rubrics WHERE prompt_id = :p"
        versions = f"SELECT id FROM rubric_versions WHERE rubric_id IN ({rubrics})"
        completions = "SELECT id FROM completions WHERE prompt_id = :p"
        return cls(
            {
                "prompts": rows("prompts", "id = :p"),
                "rubrics": rows("rubrics", "prompt_id = :p"),
                "rubric_versions": rows("rubric_versions", f"rubric_id IN ({rubrics})"),
                "criteria": rows("criteria", f"version_id IN ({versions})", "position"),
                "completions": rows("completions", "prompt_id = :p"),
                "judgments": rows("judgments", f"completion_id IN ({completions})"),
                "scores": rows("scores", f"completion_id IN ({completions})"),
            }
        )

    @property
    def judgments(self) -> int:
        return len(self.rows["judgments"])


class IdBlock:
    """Ids for the rows of one table, handed out after the table's current largest."""

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self) -> int:
        self.next += 1
        return self.next


# The tables of a prompt's rows, in the order they are cloned (each after the tables its rows
# point at), with the foreign keys a clone is given anew: column -> the table it points at.
FOREIGN_KEYS: dict[str, dict[str, str]] = {
    "prompts": {},
    "rubrics": {"prompt_id": "prompts"},
    "rubric_versions": {"rubric_id": "rubrics"},
    "criteria": {"version_id": "rubric_versions"},
    "completions": {"prompt_id": "prompts"},
    "judgments": {"completion_id": "completions", "criterion_id": "criteria"},
    "scores": {"completion_id": "completions", "rubric_version_id": "rubric_versions"},
}


def block_rows(
    template: Template, block: int, ids: dict[str, IdBlock]
) -> dict[str, list[dict[str, Any]]]:
    """The template's rows as prompt ``block`` of the bulk load: new ids and foreign keys, new
    hashes and names where they must be unique, and the same content otherwise."""
    new_id: dict[tuple[str, int], int] = {}

    def ref(table: str, old: int | None) -> int | None:
        return None if old is None else new_id[(table, old)]

    messages = [
        {
            "role": "user",
            "content": f"Question {block} of the bulk load: explain, "
            "with sources, what a careful answer covers.",
        }
    ]
    # What must differ in each table's clones, from the template row and its place (n).
    unique: dict[str, Callable[[int, dict[str, Any]], dict[str, Any]]] = {
        "prompts": lambda n, row: {
            "messages": messages,
            "content_hash": prompt_hash(messages),
            "external_id": f"bulk-q{block}",
        },
        "rubrics": lambda n, row: {"name": f"bulk/{block:07d}"},
        "rubric_versions": lambda n, row: {"content_hash": sha(f"bulk version {block}")},
        "criteria": lambda n, row: {
            "content_hash": sha(f"bulk criterion {block}:{row['position']}")
        },
        # Half from RL loops through the reward route, half from offline runs; none is the
        # measured source.
        "completions": lambda n, row: {
            "content_hash": sha(f"bulk completion {block}:{n}"),
            "source": "rewards" if block % 2 else f"run-{block % 50}",
        },
        "judgments": lambda n, row: {"cache_key": sha(f"bulk judgment {block}:{n}")},
        "scores": lambda n, row: {"details": score_details(row["details"], ref)},
    }
    out: dict[str, list[dict[str, Any]]] = {}
    for table, keys in FOREIGN_KEYS.items():
        out[table] = []
        for n, row in enumerate(template.rows[table]):
            new_id[(table, row["id"])] = ids[table].take()
            pointers = {column: ref(target, row[column]) for column, target in keys.items()}
            changes = unique[table](n, row)
            out[table].append({**row, "id": new_id[(table, row["id"])], **pointers, **changes})
    return out


def score_details(details: dict[str, Any], ref: Callable[[str, int], int | None]) -> dict[str, Any]:
    """A score's details with the criterion and judgment ids of its entries rewritten."""
    entries = [
        {
            **entry,
            "criterion_id": ref("criteria", entry["criterion_id"]),
            **(
                {"judgment_id": ref("judgments", entry["judgment_id"])}
                if entry.get("judgment_id") is not None
                else {}
            ),
        }
        for entry in details.get("criteria", [])
    ]
    return {**details, "criteria": entries}


def copy_rows(conn: Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """COPY ``rows`` into ``table`` (JSON columns as JSON text)."""
    if not rows:
        return
    columns = list(rows[0])
    json_columns = {c.name for c in Base.metadata.tables[table].columns if isinstance(c.type, JSON)}
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    names = ", ".join(f'"{c}"' for c in columns)
    with cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(
                [
                    json.dumps(row[c]) if c in json_columns and row[c] is not None else row[c]
                    for c in columns
                ]
            )


def next_ids(conn: Connection) -> dict[str, IdBlock]:
    return {
        table: IdBlock(int(conn.scalar(text(f"SELECT coalesce(max(id), 0) FROM {table}")) or 0))
        for table in TABLES
    }


def advance_sequences(conn: Connection, ids: dict[str, IdBlock]) -> None:
    """Move each table's id sequence past the ids the load gave, as the product's inserts
    take theirs from it."""
    for table, block in ids.items():
        conn.execute(
            text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), :last)"),
            {"last": block.next},
        )


def grow(engine: Engine, template: Template, target: int) -> float:
    """Bulk-load prompt blocks until ``target`` judgments are stored; the seconds it took."""
    started = time.perf_counter()
    missing = target - count_judgments(engine)
    blocks = max(0, -(-missing // template.judgments))
    loaded = 0
    first_block = count_judgments(engine) // template.judgments
    while loaded < blocks:
        batch = range(first_block + loaded, first_block + min(blocks, loaded + BLOCKS_PER_ROUND))
        with engine.begin() as conn:
            ids = next_ids(conn)
            rows: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
            for block in batch:
                for table, new in block_rows(template, block, ids).items():
                    rows[table].extend(new)
            for table in TABLES:
                copy_rows(conn, table, rows[table])
            advance_sequences(conn, ids)
        loaded += len(batch)
        print(
            f"  loaded {loaded * template.judgments:,} of {blocks * template.judgments:,} "
            f"judgments ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    vacuum_analyze(engine)
    return time.perf_counter() - started


# --- measuring -----------------------------------------------------------------------------


CleanUp = Callable[[], None]


class Operations:
    """The four measured calls on one workload. Each checks its outcome, and returns what must
    be undone (untimed) before the next call can do the same work, if anything."""

    def __init__(self, engine: Engine, workload: Workload, client: TestClient) -> None:
        self.engine = engine
        self.workload = workload
        self.client = client

    def cache_lookup(self) -> CleanUp | None:
        with Session(self.engine) as session:
            found = judgments_by_key(session, self.workload.keys)
        assert len(found) == self.workload.judgments
        return None

    def submit(self) -> CleanUp | None:
        outbox = KeptOutbox()
        with session_scope(self.engine) as session:
            submission = lifecycle.submit(
                session, outbox, JUDGE, self.workload.selection, SUBMIT_OPTIONS, CHUNK_JUDGMENTS
            )
            job_id, total = submission.job.id, submission.job.total
        assert submission.created and total == self.workload.judgments and outbox.sent

        def forget() -> None:  # so that the next submission creates a job again
            with session_scope(self.engine) as session:
                session.execute(delete(ScoreChunk).where(ScoreChunk.job_id == job_id))
                session.execute(delete(ScoreJob).where(ScoreJob.id == job_id))

        return forget

    def report(self) -> CleanUp | None:
        with session_scope(self.engine) as session:
            report = jobs.job_report(session, self.workload.job_id)
        assert len(report.scores) == PROMPTS * COMPLETIONS
        assert report.judgments == self.workload.judgments
        return None

    def rewards(self) -> CleanUp | None:
        # The route's default source, which every rollout an RL loop sends shares.
        body = {"items": self.workload.reward_items, "judge": JUDGE.name}
        headers = {"Authorization": f"Bearer {self.workload.api_key}"}
        answer = self.client.post("/v1/rewards", json=body, headers=headers)
        assert answer.status_code == 200, answer.text[:300]
        assert answer.json()["cached"] == self.workload.judgments, answer.json()["cached"]
        return None

    def timed(self, name: str) -> float:
        """Seconds of one call of operation ``name``, its clean-up not counted."""
        started = time.perf_counter()
        clean_up = getattr(self, name)()
        seconds = time.perf_counter() - started
        if clean_up is not None:
            clean_up()
        return seconds


@dataclass
class Store:
    """One database holding the workload, with its app and the operations on it."""

    url: str
    engine: Engine
    template: Template
    ops: Operations


@contextmanager
def open_store(admin: Engine, label: str) -> Iterator[Store]:
    """A new database with the workload stored and scored; dropped on the way out."""
    started = time.perf_counter()
    url = create_database(admin, prefix="bench_scale")
    engine = make_engine(url)
    try:
        workload = add_workload(engine)
        with engine.connect() as conn:
            template = Template.read(conn, workload.first_prompt_id)
        settings = Settings(
            db=DatabaseSettings(url=url),
            broker=BrokerSettings(url=None),
            api=ApiSettings(session_secret=SecretStr(uuid.uuid4().hex)),
        )
        with TestClient(create_app(settings, engine), base_url="http://testserver") as client:
            print(
                f"{label}: workload of {workload.judgments} judgments stored and scored, job "
                f"{workload.job_id} done ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
            yield Store(url, engine, template, Operations(engine, workload, client))
    finally:
        engine.dispose()
        drop_database(admin, url)


@dataclass
class SizeFigures:
    """One size of the grown store, and its figures beside the reference store's."""

    judgments: int
    load_seconds: float
    bytes_per_judgment: dict[str, float]
    # Per operation and store ("grown", "reference"): each run's fastest per judgment (ms).
    runs: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def ratios(self, name: str) -> list[float]:
        """Per run: the grown store's cost over the reference store's, measured alternately."""
        runs = self.runs[name]
        return [g / r for g, r in zip(runs["grown"], runs["reference"], strict=True)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "judgments": self.judgments,
            "load_seconds": round(self.load_seconds, 1),
            "bytes_per_judgment": self.bytes_per_judgment,
            "per_judgment_ms": {
                name: {store: spread(runs, 5) for store, runs in by_store.items()}
                for name, by_store in self.runs.items()
            },
            "ratio_to_reference": {name: spread(self.ratios(name)) for name in self.runs},
        }


def measure(
    stores: dict[str, Operations], figures: SizeFigures, runs: int, repeats: int, warm_up: int
) -> None:
    """The same warm-up on both stores, then ``runs`` runs in which every call on one store is
    followed by the same call on the other (so a busy spell of the machine hits both)."""
    for name in OPERATIONS:
        for _ in range(warm_up):
            for ops in stores.values():
                ops.timed(name)
    for run in range(runs):
        for name in OPERATIONS:
            samples: dict[str, list[float]] = {store: [] for store in stores}
            for _ in range(repeats):
                for store, ops in stores.items():
                    samples[store].append(ops.timed(name) * 1000 / ops.workload.judgments)
            for store, values in samples.items():
                runs_of = figures.runs.setdefault(name, {}).setdefault(store, [])
                # The fastest call: other work on the machine only ever adds time.
                runs_of.append(min(values))
        cells = ", ".join(
            f"{name} {figures.runs[name]['grown'][-1]:.4f} ({figures.ratios(name)[-1]:.2f}x)"
            for name in OPERATIONS
        )
        print(f"  run {run + 1}: ms per judgment (x the reference): {cells}", flush=True)


def plans(ops: Operations) -> dict[str, list[dict[str, Any]]]:
    """EXPLAIN (ANALYZE, BUFFERS) of every SELECT of one call of each operation; plan lines
    cut short (an IN list of 500 cache keys is 33,000 characters)."""
    recorder = Recorder(ops.engine)
    explained: dict[str, list[dict[str, Any]]] = {}
    for name in OPERATIONS:
        with recorder.record() as statements:
            ops.timed(name)
        explained[name] = [
            {**s, "plan": [line[:PLAN_LINE] for line in s["plan"]]}
            for s in explain(ops.engine, statements)
        ]
    return explained


def used(statements: Iterable[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The indexes and the tables scanned sequentially in these plans."""
    statements = list(statements)
    return (
        sorted({name for s in statements for name in s["indexes"]}),
        sorted({name for s in statements for name in s["seq_scans"]}),
    )


# --- the run -------------------------------------------------------------------------------


def ratio_headlines(largest: SizeFigures, reference: int) -> dict[str, Any]:
    """Per operation: the largest store's cost over the reference store's, per run."""
    return {
        f"{name} ratio": headline(
            largest.ratios(name),
            compares=f"{label.split(') ', 1)[1]} per judgment, {largest.judgments:,} / "
            f"{reference:,} stored judgments",
            at_most=TARGET_RATIO,
        )
        for name, label in OPERATIONS.items()
    }


def run(args: argparse.Namespace, admin: Engine) -> dict[str, Any]:
    sizes = sorted(args.sizes)
    figures: list[SizeFigures] = []
    with open_store(admin, "reference") as reference, open_store(admin, "grown") as grown:
        print(f"reference: growing to {sizes[0]:,} judgments", flush=True)
        grow(reference.engine, reference.template, sizes[0])
        stores = {"grown": grown.ops, "reference": reference.ops}
        for size in sizes:
            print(f"grown: growing to {size:,} judgments", flush=True)
            load_seconds = grow(grown.engine, grown.template, size)
            size_figures = SizeFigures(
                count_judgments(grown.engine), load_seconds, bytes_per_judgment(grown.engine)
            )
            print(
                f"{size_figures.judgments:,} judgments: loaded in {load_seconds:.0f} s; bytes "
                f"per judgment {size_figures.bytes_per_judgment}",
                flush=True,
            )
            measure(stores, size_figures, args.runs, args.repeats, args.warm_up)
            figures.append(size_figures)
        explained = plans(grown.ops)
        reference_judgments = count_judgments(reference.engine)
        workload = grown.ops.workload.judgments
    for name, statements in explained.items():
        indexes, scans = used(statements)
        print(
            f"{name} at {figures[-1].judgments:,}: indexes {', '.join(indexes) or 'none'}; "
            f"seq scans {', '.join(scans) or 'none'}"
        )
    return {
        "database": "postgresql",
        "workload": {
            "prompts": PROMPTS,
            "completions_per_prompt": COMPLETIONS,
            "criteria": CRITERIA,
            "judgments": workload,
            "judge_latency_s": LATENCY,
            "chunk_judgments": CHUNK_JUDGMENTS,
        },
        "operations": OPERATIONS,
        "reference_judgments": reference_judgments,
        "runs": args.runs,
        "repeats": args.repeats,
        "warm_up": args.warm_up,
        "target_ratio": TARGET_RATIO,
        "sizes": [f.as_dict() for f in figures],
        "explain_largest": explained,
        "headlines": ratio_headlines(figures[-1], reference_judgments),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--runs", type=int, default=3, help="runs per size")
    parser.add_argument("--repeats", type=int, default=5, help="calls per run; the fastest counts")
    parser.add_argument("--warm-up", type=int, default=2, help="untimed calls of each, per size")
    parser.add_argument("--database", default=POSTGRES, help="a PostgreSQL server's admin URL")
    args = parser.parse_args()
    if make_url(args.database).get_backend_name() != "postgresql":
        raise SystemExit("--database: a PostgreSQL URL")

    started = time.perf_counter()
    admin = create_engine(args.database, isolation_level="AUTOCOMMIT")
    try:
        result = run(args, admin)
    finally:
        admin.dispose()
    result["seconds"] = round(time.perf_counter() - started, 1)
    for fig in result["headlines"].values():
        print(f"{fig['compares']}: {fig['median']:g}x [{fig['min']:g}x-{fig['max']:g}x]")
    print(f"{result['seconds']:.0f} s in all")
    save("scale", result)


if __name__ == "__main__":
    main()
