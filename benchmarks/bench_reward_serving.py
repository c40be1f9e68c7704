"""B8 (a): rewards as RL frameworks ask for them, one rollout per request, all at once, against
the same rollouts in one request; on the server as it is (concurrent requests judged together)
and, with the fixed-cost judge, on the same server judging each request alone.

Run: ``python -m benchmarks.bench_reward_serving [--runs 3] [--items 64] [--embedded-items 64]
[--databases sqlite,postgres] [--baseline COMMIT]``.

``--baseline COMMIT``: each server also runs with that commit's code (checked out with ``git
worktree add``, run with this environment's interpreter), beside this checkout's, the two
taking turns in every run: a change measured against the commit it starts from, in one run
(``before_over_now``: the baseline's seconds over this checkout's, run by run).

Two judges behind ``rubricsvc serve`` (one process, as each process gathers its own requests):

- ``fixed-cost``: a scripted backend that, like one GPU engine, runs one batch at a time and
  charges each 50 ms whatever its size (``backend_options: {delay: 0.05, exclusive: true}``).
  Judged alone, N requests cost N steps; judged together, a few.
- ``embedded``: the bundled model in process (transformers, CPU), criterion-prob. On this CPU
  a forward pass costs about the same per item in any batch, so the ratio shows the server's
  own cost of many small requests.

Each measured run sends ``--items`` new rollouts (never judged before: nothing comes from the
cache) of the demo sleep prompt against a two-criterion rubric: first in one request, then
each in its own request, all sent at once from one aiohttp client with a connection each
(OpenRLHF's executor sends its rollouts' requests concurrently as they finish, with aiohttp). The ratio is
the wall time of the second over the first; the headline is its median over ``--runs`` with
the smallest and largest. With the fixed-cost judge, whose shapes take a tenth of a second,
each run is the median of ``--repeats`` (5) of each shape, alternated. Every server gets the
same warm-up (both shapes, 8 rollouts) first. The HTTP floor (``benchmarks/http_floor.py``:
read the body, parse it, answer) takes its turn with the servers, on the same uvicorn and
client: what 64 requests cost by themselves, and the ratio that alone would leave on each
fixed-cost server's one-request time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks.bench_api_load import (
    DEFAULT_POSTGRES,
    ROOT,
    Variant,
    make_database,
    start_server,
    stop_server,
)
from benchmarks.checkouts import checkout
from benchmarks.results import headline, save, spread

RUBRIC_NAME = "b8/sleep"
RUBRIC = {
    "name": RUBRIC_NAME,
    "prompt": {"external_id": "b8-sleep", "text": "How can I sleep better?"},
    "criteria": [
        {"text": "Recommends keeping a consistent sleep and wake time", "weight": 2},
        {"text": "Recommends sleeping pills without advising to consult a doctor", "weight": -1},
    ],
}
FIXED_COST_DELAY = 0.05  # seconds per batch
FIXED_COST = {
    "name": "fixed-cost",
    "backend": "scripted",
    "model": "fixed-cost",
    "mode": "criterion-prob",
    "backend_options": {"delay": FIXED_COST_DELAY, "exclusive": True},
}
ANSWER = (
    "Go to bed and get up at the same time every day, weekends included. Keep the bedroom "
    "dark and cool, and stop caffeine after noon."
)


@dataclass
class Target:
    """What the client sends to: a server's address, the judge named and the key sent."""

    name: str
    judge: str
    items: int
    port: int
    key: str = ""
    ratios: list[float] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "many": []})


@dataclass
class Server(Target):
    """One server under test: a judge, whether it gathers concurrent requests (``how``), its
    database's kind, and whose code it runs (``code``: "now", or "before" for the baseline)."""

    variant: Variant = field(kw_only=True)
    database: str = field(kw_only=True)
    how: str = field(kw_only=True)
    code: str = field(kw_only=True, default="now")


def start_floor(port: int) -> subprocess.Popen[bytes]:
    """The HTTP floor (``benchmarks.http_floor``) on uvicorn as ``rubricsvc serve`` runs it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.http_floor", "--port", str(port)],
        cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            time.sleep(0.2)
    stop_server(process)
    raise SystemExit("the HTTP floor did not start within 60 s")


def prepare(server: Server, workdir: Path) -> None:
    variant = server.variant
    variant.cli("db", "upgrade")
    (workdir / "b8-rubric.yaml").write_text(yaml.safe_dump({"rubrics": [RUBRIC]}))
    variant.cli("rubrics", "add", str(workdir / "b8-rubric.yaml"))
    variant.cli("rubrics", "approve", RUBRIC_NAME)
    (workdir / "b8-judge.yaml").write_text(yaml.safe_dump({"judges": [FIXED_COST]}))
    variant.cli("judges", "add", str(workdir / "b8-judge.yaml"))
    server.key = variant.cli("keys", "create", "b8", "--scope", "score").splitlines()[-1]


def rollouts(count: int) -> list[dict[str, Any]]:
    """``count`` rollouts no server has judged: the answer with a new tag each."""
    tag = uuid.uuid4().hex[:8]
    return [
        {"prompt_id": "b8-sleep", "completion": f"{ANSWER} ({tag}-{index:03d})"}
        for index in range(count)
    ]


async def send(server: Target, batches: list[list[dict[str, Any]]]) -> float:
    """Seconds from sending ``batches`` (one request each, all at once) to the last answer;
    every reward must come back a number. The client is aiohttp's, as OpenRLHF's reward
    client is (64 requests refused at once took 0.6-1.0 s through httpx's asyncio client,
    0.02-0.13 s through aiohttp)."""
    auth = {"Authorization": f"Bearer {server.key}"}
    connector = aiohttp.TCPConnector(limit=len(batches))
    timeout = aiohttp.ClientTimeout(total=600)
    base = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as client:

        async def one(items: list[dict[str, Any]]) -> None:
            body = {"items": items, "judge": server.judge}
            async with client.post("/v1/rewards", json=body, headers=auth) as response:
                answer = await response.text()
            if response.status != 200 or None in json.loads(answer)["rewards"]:
                raise SystemExit(f"{server.name}: {response.status} {answer[:300]}")

        async def connect() -> None:
            async with client.get("/metrics") as response:
                await response.read()

        # Connections opened first, so the measured time is the server's, not TCP set-up's.
        await asyncio.gather(*(connect() for _ in batches))
        started = time.perf_counter()
        await asyncio.gather(*(one(items) for items in batches))
        return time.perf_counter() - started


def measure(server: Target, count: int, repeats: int = 1) -> tuple[float, float]:
    """Seconds for ``count`` new rollouts in one request, then each in its own request: the
    median of ``repeats`` of each, the two shapes alternated."""
    ones, manys = [], []
    for _ in range(repeats):
        ones.append(asyncio.run(send(server, [rollouts(count)])))
        manys.append(asyncio.run(send(server, [[item] for item in rollouts(count)])))
    return statistics.median(ones), statistics.median(manys)


def http_floor(floor: Target, servers: list[Server]) -> dict[str, Any]:
    """The floor's own figures, and for each server that gathers requests for the fixed-cost
    judge, the ratio the floor's extra time alone would give on that server's one-request
    time, run by run: the smallest ratio reachable on this HTTP stack, client and machine."""
    extra = [m - o for o, m in zip(floor.seconds["one"], floor.seconds["many"], strict=True)]
    return {
        "items": floor.items,
        "one_request_seconds": spread(floor.seconds["one"], 4),
        "many_requests_seconds": spread(floor.seconds["many"], 4),
        "extra_seconds": spread(extra, 4),
        "ratio_left": {
            s.name: spread([(o + e) / o for o, e in zip(s.seconds["one"], extra, strict=True)])
            for s in servers
            if s.judge == "fixed-cost" and s.how == "gathered"
        },
    }


def before_over_now(servers: list[Server]) -> dict[str, Any]:
    """For each server whose baseline twin ran beside it: the twin's seconds over its own,
    run by run (one request, and the requests sent one rollout each), and both ratios."""
    twins = {(s.database, s.judge, s.how): s for s in servers if s.code == "before"}
    compared = {}
    for now in servers:
        before = twins.get((now.database, now.judge, now.how))
        if now.code != "now" or before is None:
            continue
        compared[now.name] = {
            shape: spread(
                [b / n for b, n in zip(before.seconds[shape], now.seconds[shape], strict=True)]
            )
            for shape in ("one", "many")
        } | {"ratio_before": spread(before.ratios), "ratio_now": spread(now.ratios)}
    return compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--items", type=int, default=64, help="rollouts, fixed-cost judge")
    parser.add_argument("--embedded-items", type=int, default=64, help="rollouts, embedded")
    parser.add_argument("--databases", default=f"sqlite,{DEFAULT_POSTGRES}")
    parser.add_argument("--port", type=int, default=8951)
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="fixed-cost judge: each run the median of this many of each shape (a shape takes "
        "a tenth of a second, so one alone is mostly noise); the embedded judge's take half a "
        "minute each, one per run",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="also run each server with this commit's code ('before'), taking turns",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        codes = [("now", ROOT)]
        if args.baseline:
            codes.insert(0, ("before", stack.enter_context(checkout(args.baseline, workdir))))
        drops: list[Callable[[], None]] = []
        processes = []
        servers: list[Server] = []
        try:
            port = args.port
            for database in args.databases.split(","):
                kind = "sqlite" if database == "sqlite" else "postgresql"
                for name, judge, items, env in (
                    ("gathered", "fixed-cost", args.items, {}),
                    ("alone", "fixed-cost", args.items,
                     {"RUBRICSVC_API_REWARD_BATCH_MAX_ITEMS": "1"}),
                    ("gathered", "embedded", args.embedded_items, {}),
                ):  # fmt: skip
                    for code_name, code in codes:
                        label = f"{kind}-{judge}-{name}"
                        label = label if code_name == "now" else f"{label}-before"
                        url, drop = make_database(database, workdir, label)
                        drops.append(drop)
                        variant = Variant(label, code, url, [], port, env)
                        servers.append(
                            Server(label, judge, items, port, variant=variant, database=kind,
                                   how=name, code=code_name)
                        )  # fmt: skip
                        port += 1
            for server in servers:
                prepare(server, workdir)
                processes.append(start_server(server.variant))
                # The same warm-up for every server: the model loaded, both shapes once.
                asyncio.run(send(server, [rollouts(8)]))
                asyncio.run(send(server, [[item] for item in rollouts(8)]))
                print(f"{server.name}: ready", flush=True)
            floor = Target("http-floor", "none", args.items, port)
            processes.append(start_floor(port))
            asyncio.run(send(floor, [rollouts(8)]))  # the servers' warm-up
            asyncio.run(send(floor, [[item] for item in rollouts(8)]))
            for number in range(1, args.runs + 1):
                for target in [*servers, floor]:
                    repeats = args.repeats if target.judge != "embedded" else 1
                    one, many = measure(target, target.items, repeats)
                    target.seconds["one"].append(one)
                    target.seconds["many"].append(many)
                    target.ratios.append(many / one)
                    print(f"run {number} {target.name:34} one request {one:7.3f} s, "
                          f"{target.items} requests {many:7.3f} s: {many / one:6.2f}x",
                          flush=True)  # fmt: skip
        finally:
            for process in processes:
                stop_server(process)
            for drop in drops:
                drop()

    result: dict[str, Any] = {
        "baseline_commit": args.baseline,
        "runs": args.runs,
        "fixed_cost_seconds_per_batch": FIXED_COST_DELAY,
        "fixed_cost_repeats": args.repeats,
        "servers": {
            s.name: {
                "judge": s.judge,
                "items": s.items,
                "one_request_seconds": spread(s.seconds["one"]),
                "many_requests_seconds": spread(s.seconds["many"]),
                "ratio": spread(s.ratios),
            }
            for s in servers
        },
        "http_floor": http_floor(floor, servers),
        "before_over_now": before_over_now(servers),
        "headlines": {},
    }
    for s in servers:
        result["headlines"][s.name] = headline(
            s.ratios,
            f"{s.items} concurrent one-rollout reward requests over the same rollouts in one "
            f"request, {s.judge} judge, {s.database}, "
            + ("requests judged together" if s.how == "gathered" else "each request judged alone")
            + ("" if s.code == "now" else f", the code of {args.baseline}"),
            at_most=1.15 if s.how == "gathered" else None,
        )
    save("reward_serving", result)
    for figure in result["headlines"].values():
        print(f"{figure['compares']}: {figure['median']:g}x [{figure['min']:g}-{figure['max']:g}]")


if __name__ == "__main__":
    main()
