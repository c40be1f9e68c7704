"""The HTTP API under load, before and after: the same clients against today's server and
against the server as it was at ``BASELINE_COMMIT``, alternated; requests/s, errors, p50, p99.

Run: ``python -m benchmarks.bench_api_load [--clients 50] [--seconds 20] [--runs 3]
[--database URL] [--baseline COMMIT --before-workers N]``.

"Before" is the code of ``BASELINE_COMMIT`` (checked out with ``git worktree add`` into a
temporary folder and run with this environment's interpreter and packages, its checkout first
on the path) as it was served then: ``rubricsvc serve``, one process. "After" is this checkout's
``rubricsvc serve --workers N``, N the machine's cores, with its defaults (the API-key cache,
the score upsert compiled once). To measure a change against the commit it starts from,
``--baseline COMMIT`` runs that commit as "before" and ``--before-workers N`` serves it as
"after" is served (``--workers N``; 0, the default: one process without the option). Each
has a fresh database (PostgreSQL by default, as a deployed service would use; ``--database
sqlite`` for the embedded default) migrated and filled by its own code with the same data.
Each client loops over a mix of what trainers and dashboards send:

- ``rewards-cached``  POST /v1/rewards, 8 pairs of the example rubrics already judged by the
  bundled model (the RL-loop case of a repeated rollout: the judgment cache answers);
- ``rewards-checks``  POST /v1/rewards, 4 new completions each time against a rubric of check
  criteria (stores completions, computes checks, writes judgments and scores);
- ``rubrics``, ``completions``, ``job``  GET pages of rubrics and completions, a job's status.

Both servers stay up for the whole run; the load goes to one at a time, before and after in
turn, each run after the same warm-up of the same mix. Model time is not measured here (see
bench_judging): the load is on the service itself, its authentication, database, cache and
serialization. ``/healthz`` (no key, one database round trip) is measured once on each server:
the floor of a request. Rate limits are set far above the load on both, so no request is
refused for its rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from benchmarks.checkouts import checkout
from benchmarks.results import headline, save, spread

ROOT = Path(__file__).resolve().parents[1]
# The code before ``serve --workers``, the API-key cache and the score upsert compiled once.
BASELINE_COMMIT = "82900cda2ebab1652a49942fdee103135e274ff8"
DEFAULT_POSTGRES = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
CHECK_RUBRIC = {
    "name": "load/blue-sea",
    "prompt": {"external_id": "load-sea", "text": "Write one sentence about the sea."},
    "criteria": [
        {"text": "Uses the word blue", "weight": 3, "kind": "check",
         "check": {"type": "contains", "text": "blue"}},
        {"text": "Stays under 20 words", "weight": 1, "kind": "check",
         "check": {"type": "word_count", "max": 20}},
    ],
}  # fmt: skip
MIX = [("rewards-cached", 4), ("rewards-checks", 2), ("rubrics", 2), ("completions", 1), ("job", 1)]
# Far above what the load sends, on both servers: a 429 would measure the limit, not the server.
UNLIMITED_RATE = "100000000"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def make_database(kind: str, workdir: Path, label: str) -> tuple[str, Callable[[], None]]:
    """A fresh database URL and a function that drops it."""
    if kind == "sqlite":
        return f"sqlite:///{workdir / f'load-{label}.sqlite'}", lambda: None
    admin = create_engine(kind, isolation_level="AUTOCOMMIT")
    name = f"rubricsvc_load_{label}_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(kind).set(database=name).render_as_string(hide_password=False), drop


@dataclass
class Variant:
    """One server under test: its code (a checkout), its database and how it is served."""

    name: str
    code: Path  # the checkout whose ``rubricsvc`` runs (first on the path)
    database: str
    serve_args: list[str]
    port: int
    settings: dict[str, str] = field(default_factory=dict)  # more environment variables

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(self.code),
            "RUBRICSVC_DATABASE_URL": self.database,
            "RUBRICSVC_BROKER_URL": "",
            "RUBRICSVC_API_RATE_LIMIT_PER_MINUTE": UNLIMITED_RATE,
            **self.settings,
        }

    def cli(self, *args: str) -> str:
        # Run from the checkout: ``python -m`` puts the working folder first on the path.
        done = subprocess.run(
            [sys.executable, "-m", "rubricsvc", *args],
            env=self.env(), cwd=self.code, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: rubricsvc {' '.join(args)} failed: {done.stderr}")
        return done.stdout.strip()


def prepare(variant: Variant, workdir: Path) -> dict[str, Any]:
    """Migrate, load the examples and the check rubric, approve them, make a key."""
    variant.cli("db", "upgrade")
    variant.cli("rubrics", "add", str(ROOT / "examples" / "rubrics.yaml"))
    (workdir / "checks.yaml").write_text(yaml.safe_dump({"rubrics": [CHECK_RUBRIC]}))
    variant.cli("rubrics", "add", str(workdir / "checks.yaml"))
    variant.cli("completions", "add", str(ROOT / "examples" / "completions.jsonl"))
    variant.cli("rubrics", "approve", "demo/sleep-advice", "demo/explain-recursion",
                "demo/haiku-autumn", "load/blue-sea")  # fmt: skip
    key = variant.cli("keys", "create", "load", "--scope", "admin").splitlines()[-1]
    pairs = [
        {"prompt_id": record["prompt_external_id"], "completion": record["text"]}
        for record in map(json.loads, (ROOT / "examples" / "completions.jsonl").open())
    ][:8]
    return {"key": key, "pairs": pairs}


def start_server(variant: Variant) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "rubricsvc", "serve", "--port", str(variant.port),
         "--log-level", "warning", *variant.serve_args],
        env=variant.env(), cwd=variant.code, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{variant.port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop_server(server)
    raise SystemExit(f"{variant.name}: the server did not start within 60 s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop a server and its worker processes (its own process group) politely, then by
    force: its database is dropped next either way."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def warm_up(variant: Variant, setup: dict[str, Any]) -> None:
    """Judge the 8 example pairs once (the model's time, not measured) and submit a job."""
    base = f"http://127.0.0.1:{variant.port}"
    auth = {"Authorization": f"Bearer {setup['key']}"}
    httpx.post(
        f"{base}/v1/rewards", json={"items": setup["pairs"]}, headers=auth, timeout=600
    ).raise_for_status()
    job = httpx.post(
        f"{base}/v1/score-jobs", json={"prompt_ids": ["load-sea"]}, headers=auth, timeout=60
    )
    job.raise_for_status()
    setup["job"] = job.json()["id"]


async def client_loop(
    client: aiohttp.ClientSession, kind_of: Any, setup: dict[str, Any], until: float, out: Any
) -> None:
    auth = {"Authorization": f"Bearer {setup['key']}"}
    rng = random.Random()
    while time.monotonic() < until:
        kind = kind_of(rng)
        started = time.perf_counter()
        method, path, body = "GET", f"/v1/score-jobs/{setup['job']}", None
        if kind == "healthz":
            path = "/healthz"
        elif kind == "rewards-cached":
            method, path, body = "POST", "/v1/rewards", {"items": setup["pairs"]}
        elif kind == "rewards-checks":
            items = [
                {"prompt_id": "load-sea", "completion": f"The {rng.choice(['blue', 'grey'])} "
                 f"sea, wave {uuid.uuid4().hex[:8]}."}
                for _ in range(4)
            ]  # fmt: skip
            method, path, body = "POST", "/v1/rewards", {"items": items}
        elif kind == "rubrics":
            path = "/v1/rubrics"
        elif kind == "completions":
            path = "/v1/completions?limit=50"
        try:
            async with client.request(method, path, json=body, headers=auth) as response:
                text = await response.text()
            ok = response.status < 400
            if ok and kind.startswith("rewards"):
                ok = None not in json.loads(text)["rewards"]
            error = None if ok else f"{response.status} {text[:200]}"
        except (aiohttp.ClientError, TimeoutError) as err:
            error = f"{type(err).__name__}: {err}"
        out(kind, time.perf_counter() - started, error)


async def run_phase(
    port: int, clients: int, seconds: float, kind_of: Any, setup: dict[str, Any]
) -> dict[str, Any]:
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, list[str]] = defaultdict(list)

    def record(kind: str, seconds: float, error: str | None) -> None:
        latencies[kind].append(seconds)
        if error:
            errors[kind].append(error)

    # aiohttp, not httpx: 64 requests refused at once took 0.6-1.0 s through httpx's asyncio
    # client and 0.02-0.13 s through aiohttp; near 90 requests/s the httpx load generator most
    # likely measured itself (and saw server-closed connections, cause not established).
    async with aiohttp.ClientSession(
        f"http://127.0.0.1:{port}",
        connector=aiohttp.TCPConnector(limit=clients),
        timeout=aiohttp.ClientTimeout(total=120),
    ) as client:
        until = time.monotonic() + seconds
        await asyncio.gather(
            *(client_loop(client, kind_of, setup, until, record) for _ in range(clients))
        )
    every = [s for values in latencies.values() for s in values]
    return {
        "requests": len(every),
        "requests_per_second": len(every) / seconds,
        "errors": sum(len(e) for e in errors.values()),
        "error_samples": {k: v[:3] for k, v in errors.items()},
        "p50_ms": 1000 * percentile(every, 0.50),
        "p99_ms": 1000 * percentile(every, 0.99),
        "by_route": {
            kind: {
                "requests": len(values),
                "p50_ms": 1000 * percentile(values, 0.50),
                "p99_ms": 1000 * percentile(values, 0.99),
                "mean_ms": 1000 * statistics.fmean(values),
                "errors": len(errors[kind]),
            }
            for kind, values in sorted(latencies.items())
        },
    }


def mixed(rng: random.Random) -> str:
    return rng.choice([kind for kind, weight in MIX for _ in range(weight)])


def measure(
    variant: Variant, setup: dict[str, Any], clients: int, seconds: float, warm: float
) -> dict[str, Any]:
    """``warm`` seconds of the mix, not counted, then ``seconds`` measured."""
    if warm > 0:
        asyncio.run(run_phase(variant.port, clients, warm, mixed, setup))
    return asyncio.run(run_phase(variant.port, clients, seconds, mixed, setup))


def run_alternated(
    variants: list[Variant], setups: dict[str, dict[str, Any]], args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    """``args.runs`` measured runs of each variant, in turn: before, after, before, ..."""
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    for number in range(1, args.runs + 1):
        for variant in variants:
            result = measure(variant, setups[variant.name], args.clients, args.seconds, args.warm)
            runs[variant.name].append(result)
            print(f"run {number} {variant.name:6}: {result['requests_per_second']:6.1f} "
                  f"requests/s, p50 {result['p50_ms']:6.0f} ms, p99 {result['p99_ms']:6.0f} ms, "
                  f"{result['errors']} errors", flush=True)  # fmt: skip
    return runs


def summary(runs: list[dict[str, Any]], healthz: dict[str, Any]) -> dict[str, Any]:
    """A variant's runs as spreads: requests/s, p50, p99 (the mix's and each route's)."""
    kinds = sorted({kind for run in runs for kind in run["by_route"]})
    return {
        "requests_per_second": spread([r["requests_per_second"] for r in runs], 1),
        "p50_ms": spread([r["p50_ms"] for r in runs], 0),
        "p99_ms": spread([r["p99_ms"] for r in runs], 0),
        "errors": sum(r["errors"] for r in runs),
        "by_route": {
            kind: {
                "p50_ms": spread([r["by_route"][kind]["p50_ms"] for r in runs], 0),
                "p99_ms": spread([r["by_route"][kind]["p99_ms"] for r in runs], 0),
            }
            for kind in kinds
        },
        "healthz": healthz,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="each measured run")
    parser.add_argument("--warm", type=float, default=5.0, help="the mix before each run")
    parser.add_argument("--runs", type=int, default=3, help="measured runs of each server")
    parser.add_argument("--healthz-seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--database", default=DEFAULT_POSTGRES, help="a PostgreSQL URL, or sqlite")
    parser.add_argument("--port", type=int, default=8931, help="before's; after's is the next")
    parser.add_argument(
        "--baseline", default=BASELINE_COMMIT, help="the commit 'before' runs (a hash or name)"
    )
    parser.add_argument(
        "--before-workers",
        type=int,
        default=0,
        help="serve 'before' with --workers N (0: one process, as the baseline commit was)",
    )
    args = parser.parse_args()
    before_args = ["--workers", str(args.before_workers)] if args.before_workers else []
    before_served = (
        f"`serve --workers {args.before_workers}`" if args.before_workers else "the one process"
    )

    with tempfile.TemporaryDirectory() as tmp, checkout(args.baseline, Path(tmp)) as baseline:
        workdir = Path(tmp)
        drops: list[Callable[[], None]] = []
        servers: list[subprocess.Popen[bytes]] = []
        try:
            variants = []
            for name, code, serve_args, port in (
                ("before", baseline, before_args, args.port),
                ("after", ROOT, ["--workers", str(args.workers)], args.port + 1),
            ):
                url, drop = make_database(args.database, workdir, name)
                drops.append(drop)
                variants.append(Variant(name, code, url, serve_args, port))
            setups = {v.name: prepare(v, workdir) for v in variants}
            for variant in variants:
                servers.append(start_server(variant))
                print(f"{variant.name}: warming up (the bundled model judges 8 pairs once)",
                      flush=True)  # fmt: skip
                warm_up(variant, setups[variant.name])
            healthz = {
                v.name: asyncio.run(
                    run_phase(
                        v.port,
                        args.clients,
                        args.healthz_seconds,
                        lambda _rng: "healthz",
                        setups[v.name],
                    )
                )
                for v in variants
            }
            print(f"load: {args.clients} clients, {args.runs} x {args.seconds:g} s per server "
                  f"after {args.warm:g} s of warm-up, mix {MIX}", flush=True)  # fmt: skip
            runs = run_alternated(variants, setups, args)
        finally:
            for server in servers:
                stop_server(server)
            for drop in drops:
                drop()

    before, after = runs["before"], runs["after"]
    result = {
        "database": make_url(variants[0].database).get_backend_name(),
        "clients": args.clients,
        "seconds": args.seconds,
        "warm_seconds": args.warm,
        "runs": args.runs,
        "baseline_commit": args.baseline,
        "workers": args.workers,
        "before_workers": args.before_workers,
        "mix": MIX,
        "before": summary(before, healthz["before"]),
        "after": summary(after, healthz["after"]),
        "headlines": {
            "throughput": headline(
                [
                    a["requests_per_second"] / b["requests_per_second"]
                    for a, b in zip(after, before, strict=True)
                ],
                f"requests/s of the API's load mix, `serve --workers {args.workers}` over "
                f"{before_served} at the baseline commit",
                at_least=3,
            ),
            "p99": headline(
                [a["p99_ms"] / b["p99_ms"] for a, b in zip(after, before, strict=True)],
                "p99 latency of the same mix and clients, after over before",
                at_most=0.5,
            ),
        },
    }
    save("api_load", result)
    for name in ("before", "after"):
        figures = result[name]
        print(f"{name:6}: {figures['requests_per_second']['median']:.1f} requests/s, "
              f"p99 {figures['p99_ms']['median']:.0f} ms, {figures['errors']} errors; "
              f"/healthz p50 {figures['healthz']['p50_ms']:.0f} ms")  # fmt: skip
    for fig in result["headlines"].values():
        print(f"{fig['compares']}: {fig['median']:g}x [{fig['min']:g}-{fig['max']:g}]")
    failed = {
        name: result[name]["errors"] for name in ("before", "after") if result[name]["errors"]
    }
    if failed or any(h["errors"] for h in healthz.values()):
        samples = {v: [r["error_samples"] for r in runs[v]] for v in runs}
        raise SystemExit(f"errors under load: {failed}: {samples}")


if __name__ == "__main__":
    main()
