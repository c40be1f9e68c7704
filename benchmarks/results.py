"""Where benchmark results go: one JSON file per run, and the latest run of each benchmark.

``benchmarks/results/NAME-DATE.json`` keeps every run (not committed); ``NAME-latest.json``
is the run ``benchmarks.report`` writes into docs/benchmarks.md and the README's headlines, and
is committed, so every published figure can be read back from a file.

A headline figure is measured in several runs and published as its median with the smallest
and largest run (``spread``), under ``result["headlines"]`` (``headline``).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def machine() -> str:
    """The processor, cores, memory, OS and Python of this machine, in one line."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = f", {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB"
    return (
        f"{cpu}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux), or None."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return None
    # cpu user nice system idle iowait irq softirq steal ...: all but idle and iowait is busy.
    fields = [int(f) for f in stat.read_text().splitlines()[0].split()[1:9]]
    busy = sum(fields) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of the child processes it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# Taken when a benchmark starts (it imports this module first).
_STARTED = (time.monotonic(), busy_cpu_seconds(), own_cpu_seconds())


def other_work_cores() -> float | None:
    """Cores kept busy by other work on the machine while this run went on, on average:
    the machine's busy time less the benchmark's own, over the run's wall time. Its own
    includes the child processes it has waited for (and what they waited for); a process it
    did not wait for, such as a server's engine that its parent leaves to exit alone, counts
    as other work. Near 0 on an idle machine; other work only ever slows the figures down."""
    started, busy_before, own_before = _STARTED
    busy_now = busy_cpu_seconds()
    if busy_before is None or busy_now is None:
        return None
    wall = time.monotonic() - started
    other = (busy_now - busy_before) - (own_cpu_seconds() - own_before)
    return round(max(other, 0.0) / wall, 2) if wall > 0 else None


def spread(runs: list[float], digits: int = 3) -> dict[str, Any]:
    """The median of ``runs`` with the smallest and largest, and every run, rounded."""
    if not runs:
        raise ValueError("a spread needs at least one run")
    return {
        "median": round(statistics.median(runs), digits),
        "min": round(min(runs), digits),
        "max": round(max(runs), digits),
        "runs": [round(run, digits) for run in runs],
    }


def headline(
    runs: list[float],
    compares: str,
    unit: str = "x",
    at_least: float | None = None,
    at_most: float | None = None,
    digits: int = 3,
) -> dict[str, Any]:
    """A headline figure: what it compares in one clause (``compares``), its unit, its
    target if it has one, and the spread of its runs. ``docs/benchmarks.md`` and the README
    print it as ``median [min-max] over N runs``."""
    figure: dict[str, Any] = {"compares": compares, "unit": unit, **spread(runs, digits)}
    if at_least is not None:
        figure["at_least"] = at_least
        figure["met"] = figure["median"] >= at_least
    if at_most is not None:
        figure["at_most"] = at_most
        figure["met"] = figure["median"] <= at_most
    return figure


def save(
    name: str,
    result: dict[str, Any],
    directory: Path | None = None,
    argv: Sequence[str] | None = None,
) -> Path:
    """Write ``result`` (stamped with the date, the machine and the other work on it) to
    ``directory`` (``RESULTS``) and return its path; ``argv``: the command's arguments when
    its ``main`` was called with them, not from the command line."""
    directory = RESULTS if directory is None else directory
    args = sys.argv[1:] if argv is None else list(argv)
    result = {
        "benchmark": name,
        "date": now(),
        "machine": machine(),
        "other_work_cores": other_work_cores(),
        "command": " ".join(["python -m", f"benchmarks.{_module(name, argv)}", *args]),
        **result,
    }
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    path = directory / f"{name}-{result['date'].replace(':', '')}.json"
    path.write_text(text)
    (directory / f"{name}-latest.json").write_text(text)
    print(f"results: {path}", flush=True)
    return path


def _module(name: str, argv: Sequence[str] | None) -> str:
    """The benchmark's module: the script run, or (``main`` called in-process) ``name``."""
    return name if argv is not None else Path(sys.argv[0]).stem
