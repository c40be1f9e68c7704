"""Past one machine: hosts in network namespaces, partitions, judges placed on some hosts.

Each test builds its hosts (``tests/netns.py``): a data host running a PostgreSQL cluster of
the test's own (``initdb``/``pg_ctl``) and a ``redis-server``, each bound to the host's
address; worker hosts running ``rubricsvc worker`` with ``ip netns exec``; API hosts running
``rubricsvc serve``. The test process itself talks to them over the bridge. A host is cut
off by taking its link down: its processes keep running and its packets are dropped.

Distribution and recovery are what these tests are about, so the judge is the scripted
backend behind the fault injector with a fixed latency per judgment.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, text

from rubricsvc import db
from rubricsvc.apikeys import create_key
from rubricsvc.models import ChunkStatus, Judgment, ScoreChunk
from tests.multihost_harness import SplitBench, data_host, job_id_of, pid_of
from tests.netns import Host, Network, wait_listening
from tests.requirements import require_module
from tests.workers_harness import (
    FAST_RECOVERY,
    Cluster,
    Worker,
    fast_judge,
    finish,
    seed,
    tally,
    wait_for,
)

pytestmark = [pytest.mark.netns, pytest.mark.postgres, pytest.mark.broker, pytest.mark.slow]

require_module("celery", "workers")

HEARTBEAT_TIMEOUT = float(FAST_RECOVERY["RUBRICSVC_JOBS_HEARTBEAT_TIMEOUT"])
REAP_INTERVAL = float(FAST_RECOVERY["RUBRICSVC_JOBS_REAP_INTERVAL"])


def chunk_rows(url: str) -> list[tuple[int, int, ChunkStatus, str | None, int, int]]:
    """(id, job, status, claim token, attempts, judgments) of every chunk."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(
                    ScoreChunk.id,
                    ScoreChunk.job_id,
                    ScoreChunk.status,
                    ScoreChunk.worker,
                    ScoreChunk.attempts,
                    ScoreChunk.judgments,
                ).order_by(ScoreChunk.id)
            ).all()
        return [tuple(row) for row in rows]  # type: ignore[misc]
    finally:
        engine.dispose()


def judgment_rows_by_key(url: str) -> tuple[int, int]:
    """Judgment rows, and cache keys held by more than one row."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.scalar(select(func.count()).select_from(Judgment)) or 0
            doubled = conn.execute(
                select(Judgment.cache_key).group_by(Judgment.cache_key).having(func.count() > 1)
            ).all()
        return rows, len(doubled)
    finally:
        engine.dispose()


def held_by(url: str, worker: Worker, job_id: int | None = None) -> int | None:
    """A chunk ``worker`` holds now (running under its claim), if any."""
    for chunk_id, job, status, token, _, _ in chunk_rows(url):
        if job_id not in (None, job) or status != ChunkStatus.RUNNING:
            continue
        if pid_of(token) == worker.pid:
            return chunk_id
    return None


# --- 1. a worker host drops off the network while it holds a chunk -------------------------


def chunks_of_40(url: str, broker_url: str, tmp_path: Path) -> Cluster:
    """Workers and commands on ``url`` and ``broker_url`` that cut jobs into 40 judgments."""
    return Cluster(url, broker_url, tmp_path, extra_env={"RUBRICSVC_JOBS_CHUNK_JUDGMENTS": "40"})


def worker_hosts(
    network: Network, cluster: Cluster, judge_a: str, judge_b: str
) -> tuple[tuple[Host, Worker], tuple[Host, Worker]]:
    """Hosts ``wa`` and ``wb``, each with a worker of its judge, both ready."""
    wa, wb = network.add_host("wa"), network.add_host("wb")
    a, b = cluster.start_worker(judge_a, wa), cluster.start_worker(judge_b, wb)
    a.wait_ready()
    b.wait_ready()
    return (wa, a), (wb, b)


def test_a_worker_host_cut_off_mid_chunk_loses_it_to_the_other_host(
    network: Network, tmp_path: Path
) -> None:
    with data_host(network) as (_, postgres, redis):
        url = postgres.url
        # 8 prompts x 10 completions x 4 criteria: 320 judgments in 8 chunks of 40, each
        # chunk 2 s of judging (50 ms per judgment).
        total = seed(url, 8, 10, 4, [fast_judge(latency=0.05)])
        chunk_seconds = 40 * 0.05
        cluster = chunks_of_40(url, redis.url, tmp_path)
        try:
            (wa, a), (_, b) = worker_hosts(network, cluster, "fast", "fast")
            follower = cluster.start_follower(
                "score", "--judge", "fast", "--via", "celery", "--json"
            )

            def a_holds_one_near_the_end() -> int | None:
                rows = chunk_rows(url)
                pending = sum(1 for r in rows if r[2] == ChunkStatus.PENDING)
                held = held_by(url, a)
                return held if rows and held is not None and pending <= 1 else None

            lost = wait_for(a_holds_one_near_the_end, 60, "worker host A holding a chunk", 0.1)
            wa.cut()
            cut_at = time.monotonic()

            def finished_by_b() -> bool:
                row = next(r for r in chunk_rows(url) if r[0] == lost)
                return row[2] == ChunkStatus.DONE and pid_of(row[3]) == b.pid

            bound = HEARTBEAT_TIMEOUT + REAP_INTERVAL + 3 * chunk_seconds + 4
            wait_for(finished_by_b, bound, f"chunk {lost} to be finished on host B", 0.1)
            recovered = time.monotonic() - cut_at
            print(f"\nchunk {lost}: cut off on host A, done on host B {recovered:.1f} s later")

            # Host A comes back and finishes what it held. Either its late writes are refused
            # (it logs the chunk stopped), or the data host had already ended its session for
            # silence (the dead-client settings): then its write fails as transient, the task
            # is retried, and whichever worker takes the retry finds the chunk done and skips it.
            wa.restore()
            restored_at = time.monotonic()
            result = finish(follower, timeout=60)
            assert result.code == 0, result.stderr
            job_id = job_id_of(result)

            def a_gave_it_up() -> str | None:
                log_a = a.log()
                if f"chunk {lost} stopped" in log_a:
                    return "its late writes refused"
                retried = re.search(rf"chunk {lost}: .*; retrying", log_a)
                if retried and f"chunk {lost} skipped" in log_a + b.log():
                    return "its session gone, the retry skipped"
                return None

            try:
                how = wait_for(a_gave_it_up, 90, "host A to give its chunk up", 0.5)
            except AssertionError as err:
                raise AssertionError(f"{err}; host A's log ends:\n{a.log()[-4000:]}") from None
            print(
                f"host A gave chunk {lost} up {time.monotonic() - restored_at:.1f} s after: {how}"
            )
            counted = tally(url, job_id)
            assert counted.judgments == total
            assert (counted.duplicated_pairs, counted.missing_pairs) == (0, 0)
            assert counted.job_status == "done" and counted.chunks["done"] == 8
            assert judgment_rows_by_key(url) == (total, 0)
            row = next(r for r in chunk_rows(url) if r[0] == lost)
            assert (row[2], pid_of(row[3]), row[4]) == (ChunkStatus.DONE, b.pid, 2)
        finally:
            cluster.stop()


# --- 2. the data host unreachable from one worker host for 30 s ----------------------------


def test_the_data_host_unreachable_from_one_worker_host_for_30_s(
    network: Network, tmp_path: Path
) -> None:
    """Judge ``fast`` lives on host A only, judge ``other`` on host B only. A loses the data
    host for 30 s while it holds a chunk: B's job goes on, A's job says it waits for a worker
    of its judge, and once A is back its chunk is retried and the job ends done."""
    with data_host(network) as (_, postgres, redis):
        url = postgres.url
        judges = [fast_judge("fast", latency=0.025), fast_judge("other", latency=0.1)]
        # 320 judgments per judge in 8 chunks each: 1 s a chunk for fast, 4 s for other.
        total = seed(url, 8, 10, 4, judges)
        cluster = chunks_of_40(url, redis.url, tmp_path)
        try:
            (wa, a), (_, b) = worker_hosts(network, cluster, "fast", "other")
            on_a = cluster.start_follower("score", "--judge", "fast", "--via", "celery", "--json")
            on_b = cluster.start_follower("score", "--judge", "other", "--via", "celery", "--json")

            held = wait_for(lambda: held_by(url, a), 60, "host A holding a chunk", 0.1)
            wa.cut()
            cut_at = time.monotonic()
            rows = chunk_rows(url)
            job_a = next(r[1] for r in rows if r[0] == held)

            def done_of(job: int) -> int:
                return sum(1 for r in chunk_rows(url) if r[1] == job and r[2] == ChunkStatus.DONE)

            job_b = wait_for(
                lambda: next((r[1] for r in chunk_rows(url) if r[1] != job_a), None),
                30,
                "the job of judge other",
            )
            b_before = done_of(job_b)
            waiting = wait_for(
                lambda: cluster.cli("jobs", "status", str(job_a), "--json").json()["waiting"],
                HEARTBEAT_TIMEOUT + 20,
                "the job of judge fast to say it waits",
            )
            assert "no worker serves judge fast" in waiting
            time.sleep(max(0.0, cut_at + 30 - time.monotonic()))
            assert done_of(job_b) >= b_before + 3  # host B still reaches the data host
            wa.restore()
            restored_at = time.monotonic()

            result = finish(on_a, timeout=120)
            assert result.code == 0, result.stderr
            print(f"\njob of judge fast done {time.monotonic() - restored_at:.1f} s after restore")
            assert finish(on_b, timeout=120).code == 0
            for job, worker in ((job_a, a), (job_b, b)):
                counted = tally(url, job)
                assert counted.judgments == total
                assert (counted.duplicated_pairs, counted.missing_pairs) == (0, 0)
                assert counted.job_status == "done" and counted.chunks["done"] == 8
                # Each judge's chunks went to the one host that serves it.
                assert {pid_of(r[3]) for r in chunk_rows(url) if r[1] == job} == {worker.pid}
            assert judgment_rows_by_key(url) == (2 * total, 0)
            row = next(r for r in chunk_rows(url) if r[0] == held)
            assert row[2] == ChunkStatus.DONE and row[4] >= 2  # retried after the outage
            assert cluster.cli("jobs", "status", str(job_a), "--json").json()["waiting"] is None
        finally:
            cluster.stop()


# --- 3. two API processes on two hosts --------------------------------------------------------


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def test_two_api_hosts_share_rate_limits_sessions_and_revocations(
    network: Network, tmp_path: Path
) -> None:
    """``rubricsvc serve`` on two hosts, one database and one Redis on a third: a key's rate
    limit is one budget across both, a review session signed in on one is valid on the
    other (the shared secret), and a key revoked on one host is refused by the other's server
    within its key cache's time-to-live."""
    per_minute, ttl = 30, 8.0
    with data_host(network) as (_, postgres, redis):
        engine = db.make_engine(postgres.url)
        with db.session_scope(engine) as session:
            read = create_key(session, "reader", ["read"]).secret
            reviewer = create_key(session, "reviewer", ["read", "author", "review"]).secret
            doomed = create_key(session, "doomed", ["read"]).secret
        engine.dispose()
        env = {
            **{
                k: v
                for k, v in Cluster(postgres.url, redis.url, tmp_path).env().items()
                if not k.startswith("RUBRICSVC_BROKER")
            },
            "RUBRICSVC_API_RATE_LIMIT_PER_MINUTE": str(per_minute),
            "RUBRICSVC_API_RATE_LIMIT_URL": redis.url,
            "RUBRICSVC_API_SESSION_SECRET": "a secret every API host is given alike",
            "RUBRICSVC_API_KEY_CACHE_SECONDS": str(ttl),
        }
        hosts = [network.add_host("api1"), network.add_host("api2")]
        for host in hosts:
            command = [sys.executable, "-m", "rubricsvc", "serve", "--host", host.address]
            host.start([*command, "--port", "8000"], tmp_path / f"serve-{host.name}.log", env)
        for host in hosts:
            wait_listening(host.address, 8000, 60, f"rubricsvc serve on {host.name}")
        one, two = (
            httpx.Client(base_url=f"http://{h.address}:8000", trust_env=False, timeout=10)
            for h in hosts
        )
        with one, two:
            # One budget for a key across both hosts.
            bearer = {"Authorization": f"Bearer {read}"}
            clients = [one, two] * (per_minute // 2)
            codes = [client.get("/v1/prompts", headers=bearer).status_code for client in clients]
            assert codes == [200] * per_minute
            for client in (one, two):
                refused = client.get("/v1/prompts", headers=bearer)
                assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1

            # A review session signed in on host 1 is valid on host 2.
            login = one.get("/ui/login")
            signed = one.post(
                "/ui/login",
                data={"api_key": reviewer, "csrf_token": csrf_of(login.text), "next": "/ui/queue"},
            )
            assert signed.status_code == 303, signed.text
            cookie = one.cookies["rubricsvc_session"]
            two.cookies.set("rubricsvc_session", cookie, domain=hosts[1].address, path="/ui")
            assert two.get("/ui/queue").status_code == 200
            two.cookies.set(
                "rubricsvc_session", cookie[:-2] + "xx", domain=hosts[1].address, path="/ui"
            )
            assert two.get("/ui/queue").status_code == 303  # a forged one is not

            # A key revoked on host 1 is refused by host 2's server within the cache's TTL.
            doomed_bearer = {"Authorization": f"Bearer {doomed}"}
            assert two.get("/v1/prompts", headers=doomed_bearer).status_code == 200
            kept_at = time.monotonic()  # host 2 keeps the live key from here on
            revoke = [sys.executable, "-m", "rubricsvc", "keys", "revoke", "doomed"]
            revoked = hosts[0].run(revoke, env)
            assert revoked.returncode == 0, revoked.stderr
            revoked_at = time.monotonic()
            assert one.get("/v1/prompts", headers=doomed_bearer).status_code == 401
            answers: list[tuple[float, int]] = []  # (sent at, status) of each request

            def refused() -> bool:
                sent = time.monotonic()
                answers.append((sent, two.get("/v1/prompts", headers=doomed_bearer).status_code))
                return answers[-1][1] == 401

            # Host 2 cached the key before ``kept_at``, so its entry ran out before
            # ``kept_at + ttl``: any request sent after that must be refused, however long the
            # requests take on a busy machine (the wait only bounds the test).
            wait_for(refused, ttl + 60, "host 2 to refuse the revoked key", 0.25)
            refused_at = time.monotonic()
            admitted = [sent for sent, status in answers if status == 200]
            assert [status for _, status in answers[len(admitted) :]] == [401]  # no error
            assert all(sent - kept_at <= ttl for sent in admitted), (kept_at, answers)
            print(
                f"\nrevoked key: the CLI on host 1 took {revoked_at - kept_at:.1f} s, host 2 "
                f"admitted it {len(answers) - 1} more time(s) and refused it "
                f"{refused_at - revoked_at:.1f} s after ({refused_at - kept_at:.1f} s after "
                f"it kept the key; TTL {ttl:.0f} s)"
            )


# --- 4. one job over two worker hosts -------------------------------------------------------


def test_a_job_split_over_two_worker_hosts_takes_half_the_time(
    network: Network, tmp_path: Path
) -> None:
    """2,000 judgments of 8 ms each (16 s of judging) in 20 chunks: each of two worker hosts
    does 35-65% of them, and the job takes at most 0.6x the time host A alone takes for the
    same work in the same run. The workers' own time per judgment does not halve on a busy
    2-core machine, so the judging is long enough to dominate it
    (``benchmarks/bench_multihost.py`` repeats the measurement at 5 ms)."""
    with data_host(network) as (_, postgres, redis):
        extra = {"RUBRICSVC_JOBS_CHUNK_JUDGMENTS": "100"}
        cluster = Cluster(postgres.url, redis.url, tmp_path, extra_env=extra)
        try:
            bench = SplitBench(network, cluster, postgres.url, 1, latency=0.008)
            split = bench.round(0)
            print(
                f"\n{split.two_hosts.judgments} judgments: one host {split.one_host.seconds:.2f} s, "
                f"two hosts {split.two_hosts.seconds:.2f} s ({split.ratio:.3f}x); shares "
                + ", ".join(f"{host} {share:.0%}" for host, share in sorted(split.shares.items()))
            )
            assert split.two_hosts.judgments >= 2000
            assert set(split.shares) == {"wa", "wb"}
            assert all(0.35 <= share <= 0.65 for share in split.shares.values()), split.shares
            assert split.ratio <= 0.6
        finally:
            cluster.stop()


# A worker's transaction on a worker host: the row locked, then the host cut off before the
# commit (as a chunk's checkpoint holds its chunk's row).
HOLD_A_ROW_LOCK = """
import sys, time
from sqlalchemy import text
from rubricsvc import db
connection = db.make_engine(sys.argv[1]).connect()
connection.execute(text("SELECT id FROM lock_probe WHERE id = 1 FOR UPDATE"))
print("locked", flush=True)
time.sleep(600)
"""


def test_a_transaction_cut_off_with_its_host_releases_its_row_locks(
    network: Network, tmp_path: Path
) -> None:
    """PostgreSQL ends the session of a client that stopped answering (``db.make_engine``'s
    keepalive settings: about 10 s), so the row lock it held is released and a reclaim that
    waited on it goes on. Without them, the lock stays until the kernel gives up on the
    connection, hours later: here the waiting update fails at its 60 s lock timeout."""
    with data_host(network) as (_, postgres, _redis):
        engine = db.make_engine(postgres.url)
        try:
            with engine.begin() as conn:
                conn.execute(text("CREATE TABLE lock_probe (id integer PRIMARY KEY)"))
                conn.execute(text("INSERT INTO lock_probe VALUES (1)"))
            host = network.add_host("wa")
            log = tmp_path / "holder.log"
            holder = host.start([sys.executable, "-c", HOLD_A_ROW_LOCK, postgres.url], log)

            def locked() -> bool:
                if holder.poll() is not None:  # say why, not 60 s later
                    raise AssertionError(f"the lock holder exited:\n{log.read_text()[-2000:]}")
                return "locked" in log.read_text()

            wait_for(locked, 60, "the row locked on host A", 0.1)
            host.cut()
            cut_at = time.monotonic()
            with engine.connect() as conn:
                conn.execute(text("SET lock_timeout = '60s'"))
                conn.execute(text("UPDATE lock_probe SET id = 1 WHERE id = 1"))
                conn.commit()
            waited = time.monotonic() - cut_at
            # Probes after 4 s of silence, the session ended at the 10 s user timeout (10.2-10.3 s
            # measured); room for a busy machine.
            assert waited < 20, f"the lock was released {waited:.1f} s after the cut"
        finally:
            engine.dispose()
