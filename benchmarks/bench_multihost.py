"""One score job over two worker hosts against the same job on one (network namespaces).

Run (as root, on Linux with iproute2): ``python -m benchmarks.bench_multihost [--rounds 3]
[--prompts 10] [--completions 25] [--criteria 8] [--latency 0.005] [--chunk 100]``.

The hosts are network namespaces on a bridge (``tests/netns.py``): a data host running a
PostgreSQL cluster and a Redis of the run's own on its address, and two worker hosts, each
running one ``rubricsvc worker --pool solo``. Host A serves every judge of the run, host B
the ``pair-N`` judges only. The judge is a scripted backend behind the fault injector with a
fixed latency per judgment, so the work to split is known. In round N the same work
(prompts x completions x criteria judgments, in chunks of ``--chunk``) is scored by judge
``solo-N`` (host A alone), then by judge ``pair-N`` (both hosts), each a separate judge so
neither run reads the other's judgments from the cache. A job's wall time is read from the
database: its creation to the end of its last chunk. Each round gives a ratio (two hosts /
one) and each host's share of the two-host job's judgments.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.results import headline, save, spread
from tests.multihost_harness import SplitBench, data_host
from tests.netns import Network, netns_unavailable
from tests.workers_harness import Cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--completions", type=int, default=25)
    parser.add_argument("--criteria", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.005, help="seconds per judgment")
    parser.add_argument("--chunk", type=int, default=100, help="judgments per chunk")
    args = parser.parse_args()
    reason = netns_unavailable()
    if reason is not None:
        raise SystemExit(reason)

    network = Network()
    logs = Path(tempfile.mkdtemp(prefix="rubricsvc-bench-multihost-"))
    rounds: list[dict[str, Any]] = []
    try:
        with data_host(network) as (_, postgres, redis):
            extra = {"RUBRICSVC_JOBS_CHUNK_JUDGMENTS": str(args.chunk)}
            cluster = Cluster(postgres.url, redis.url, logs, extra_env=extra)
            try:
                shape = (args.prompts, args.completions, args.criteria)
                bench = SplitBench(network, cluster, postgres.url, args.rounds, shape, args.latency)
                for n in range(args.rounds):
                    split = bench.round(n)
                    rounds.append(
                        {
                            "one_host_s": round(split.one_host.seconds, 3),
                            "two_hosts_s": round(split.two_hosts.seconds, 3),
                            "ratio": round(split.ratio, 3),
                            "shares": {h: round(s, 3) for h, s in sorted(split.shares.items())},
                        }
                    )
                    print(f"round {n}: {rounds[-1]}", flush=True)
                judgments = bench.judgments
            finally:
                cluster.stop()
    finally:
        network.close()

    smaller = [100 * min(r["shares"].values()) if len(r["shares"]) == 2 else 0.0 for r in rounds]
    result = {
        "judgments": judgments,
        "latency_per_judgment_s": args.latency,
        "chunk_judgments": args.chunk,
        "rounds": rounds,
        "seconds": {
            "one host": spread([r["one_host_s"] for r in rounds]),
            "two hosts": spread([r["two_hosts_s"] for r in rounds]),
        },
        "headlines": {
            "ratio": headline(
                [r["ratio"] for r in rounds],
                f"wall time of a score job of {judgments} fixed-latency judgments on two worker "
                "hosts / on one (network namespaces, same run)",
                at_most=0.6,
            ),
            "smaller_share": headline(
                smaller,
                "the smaller of the two hosts' shares of that job's judgments",
                unit="%",
                at_least=35,
            ),
        },
    }
    save("multihost", result)


if __name__ == "__main__":
    main()
