"""The HTTP API under load: N concurrent clients for S seconds on loopback; errors, p50 and p99.

Run: ``python -m benchmarks.bench_api_load [--clients 50] [--seconds 60] [--database URL]``.

The server is the real one (``rubricsvc serve``: uvicorn, one process) on a fresh database
(PostgreSQL by default, as a deployed service would use; ``--database sqlite`` for the
embedded default). Each client loops over a mix of what trainers and dashboards send:

- ``rewards-cached``  POST /v1/rewards, 8 pairs of the example rubrics already judged by the
  bundled model (the RL-loop case of a repeated rollout: the judgment cache answers);
- ``rewards-checks``  POST /v1/rewards, 4 new completions each time against a rubric of check
  criteria (stores completions, computes checks, writes judgments and scores);
- ``rubrics``, ``completions``, ``job``  GET pages of rubrics and completions, a job's status.

Model time is not measured here (see bench_judging): the load is on the service itself,
its authentication, database, cache and serialization. The baseline, measured in the same
run with the same clients, is ``/healthz`` (no key, one database round trip): the ratios say
what each route costs beyond the server's floor.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from benchmarks.results import save

ROOT = Path(__file__).resolve().parents[1]
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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def make_database(kind: str, workdir: Path) -> tuple[str, Any]:
    """A fresh database URL and a function that drops it."""
    if kind == "sqlite":
        return f"sqlite:///{workdir / 'load.sqlite'}", lambda: None
    admin = create_engine(kind, isolation_level="AUTOCOMMIT")
    name = f"rubricsvc_load_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(kind).set(database=name).render_as_string(hide_password=False), drop


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rubricsvc", *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"rubricsvc {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def prepare(env: dict[str, str], workdir: Path) -> dict[str, Any]:
    """Migrate, load the examples and the check rubric, approve them, make a key."""
    cli(env, "db", "upgrade")
    cli(env, "rubrics", "add", str(ROOT / "examples" / "rubrics.yaml"))
    (workdir / "checks.yaml").write_text(yaml.safe_dump({"rubrics": [CHECK_RUBRIC]}))
    cli(env, "rubrics", "add", str(workdir / "checks.yaml"))
    cli(env, "completions", "add", str(ROOT / "examples" / "completions.jsonl"))
    cli(env, "rubrics", "approve", "demo/sleep-advice", "demo/explain-recursion",
        "demo/haiku-autumn", "load/blue-sea")  # fmt: skip
    key = cli(env, "keys", "create", "load", "--scope", "admin").splitlines()[-1]
    pairs = [
        {"prompt_id": record["prompt_external_id"], "completion": record["text"]}
        for record in map(json.loads, (ROOT / "examples" / "completions.jsonl").open())
    ][:8]
    return {"key": key, "pairs": pairs}


def start_server(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "rubricsvc", "serve", "--port", str(port), "--log-level",
         "warning"],
        env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    server.kill()
    raise SystemExit("the server did not start within 60 s")


async def client_loop(
    client: httpx.AsyncClient, kind_of: Any, setup: dict[str, Any], until: float, out: Any
) -> None:
    auth = {"Authorization": f"Bearer {setup['key']}"}
    rng = random.Random()
    while time.monotonic() < until:
        kind = kind_of(rng)
        started = time.perf_counter()
        try:
            if kind == "healthz":
                response = await client.get("/healthz")
            elif kind == "rewards-cached":
                body = {"items": setup["pairs"]}
                response = await client.post("/v1/rewards", json=body, headers=auth)
            elif kind == "rewards-checks":
                items = [
                    {"prompt_id": "load-sea", "completion": f"The {rng.choice(['blue', 'grey'])} "
                     f"sea, wave {uuid.uuid4().hex[:8]}."}
                    for _ in range(4)
                ]  # fmt: skip
                response = await client.post("/v1/rewards", json={"items": items}, headers=auth)
            elif kind == "rubrics":
                response = await client.get("/v1/rubrics", headers=auth)
            elif kind == "completions":
                response = await client.get("/v1/completions?limit=50", headers=auth)
            else:
                response = await client.get(f"/v1/score-jobs/{setup['job']}", headers=auth)
            ok = response.status_code < 400
            if ok and kind.startswith("rewards"):
                ok = None not in response.json()["rewards"]
            error = None if ok else f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as err:
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

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=120, limits=limits
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--baseline-seconds", type=float, default=15.0)
    parser.add_argument("--database", default=DEFAULT_POSTGRES, help="a PostgreSQL URL, or sqlite")
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        url, drop = make_database(args.database, workdir)
        env = {**os.environ, "RUBRICSVC_DATABASE_URL": url, "RUBRICSVC_BROKER_URL": ""}
        server = None
        try:
            setup = prepare(env, workdir)
            server = start_server(env, args.port)
            auth = {"Authorization": f"Bearer {setup['key']}"}
            print("warming up: the bundled model judges the 8 example pairs once ...", flush=True)
            warm = httpx.post(
                f"http://127.0.0.1:{args.port}/v1/rewards",
                json={"items": setup["pairs"]}, headers=auth, timeout=600,
            )  # fmt: skip
            warm.raise_for_status()
            job = httpx.post(
                f"http://127.0.0.1:{args.port}/v1/score-jobs",
                json={"prompt_ids": ["load-sea"]}, headers=auth, timeout=60,
            )  # fmt: skip
            job.raise_for_status()
            setup["job"] = job.json()["id"]

            print(
                f"baseline: /healthz, {args.clients} clients, {args.baseline_seconds:g} s",
                flush=True,
            )
            baseline = asyncio.run(
                run_phase(args.port, args.clients, args.baseline_seconds,
                          lambda _rng: "healthz", setup)
            )  # fmt: skip
            kinds = [kind for kind, weight in MIX for _ in range(weight)]
            print(f"load: {args.clients} clients, {args.seconds:g} s, mix {MIX}", flush=True)
            load = asyncio.run(
                run_phase(args.port, args.clients, args.seconds,
                          lambda rng: rng.choice(kinds), setup)
            )  # fmt: skip
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            drop()

    result = {
        "database": make_url(url).get_backend_name(),
        "clients": args.clients,
        "seconds": args.seconds,
        "baseline_healthz": baseline,
        "load": load,
        "p50_ratio_to_baseline": load["p50_ms"] / baseline["p50_ms"],
        "p99_ratio_to_baseline": load["p99_ms"] / baseline["p99_ms"],
    }
    save("api_load", result)
    print(f"baseline /healthz: {baseline['requests']} requests, p50 {baseline['p50_ms']:.1f} ms, "
          f"p99 {baseline['p99_ms']:.1f} ms, {baseline['errors']} errors")  # fmt: skip
    print(f"load: {load['requests']} requests ({load['requests_per_second']:.1f}/s), "
          f"{load['errors']} errors, p50 {load['p50_ms']:.1f} ms "
          f"({result['p50_ratio_to_baseline']:.1f}x baseline), p99 {load['p99_ms']:.1f} ms "
          f"({result['p99_ratio_to_baseline']:.1f}x baseline)")  # fmt: skip
    for kind, figures in load["by_route"].items():
        print(f"  {kind:15} {figures['requests']:6} requests  p50 {figures['p50_ms']:8.1f} ms  "
              f"p99 {figures['p99_ms']:8.1f} ms  errors {figures['errors']}")  # fmt: skip
    if load["errors"] or baseline["errors"]:
        raise SystemExit(f"errors under load: {load['error_samples']}")


if __name__ == "__main__":
    main()
