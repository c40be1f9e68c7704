"""Where benchmark results go: one JSON file per run, and the latest run of each benchmark.

``benchmarks/results/NAME-DATE.json`` keeps every run; ``NAME-latest.json`` is the one
``benchmarks.report`` writes into docs/benchmarks.md. The directory is not committed.
"""

from __future__ import annotations

import json
import os
import platform
import sys
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


def load_average() -> str:
    """The 1-minute load average when the run ended (the benchmark's own work included)."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "unknown"


def save(name: str, result: dict[str, Any]) -> Path:
    """Write ``result`` (stamped with the date, machine and load) and return its path."""
    result = {
        "benchmark": name,
        "date": now(),
        "machine": machine(),
        "load_average_1m": load_average(),
        "command": " ".join(["python -m", f"benchmarks.{Path(sys.argv[0]).stem}", *sys.argv[1:]]),
        **result,
    }
    RESULTS.mkdir(exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    path = RESULTS / f"{name}-{result['date'].replace(':', '')}.json"
    path.write_text(text)
    (RESULTS / f"{name}-latest.json").write_text(text)
    print(f"results: {path}", flush=True)
    return path
