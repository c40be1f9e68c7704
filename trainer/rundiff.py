"""Whether a re-run reproduces a recorded run: every logged figure, step by step, to the digit.

``rubricsvc train diff RECORDED RERUN`` compares the run directories' logs record by record
(metrics.jsonl and gold.jsonl by step, samples.jsonl and alarms.jsonl in order), leaving out
only what measures time. Equal means equal: no tolerance, since a drift at the 7th digit in
step 1 grows into other samples by step 25. A figure only the re-run logs (one added to the
code since the record was made) is listed apart and does not count against it; one the record
has and the re-run lacks does. Where they differ, it names the first step, its
differing figures and what differs between the two runs' environments (environment.json:
processor, kernels, threads, library versions), which tells a machine's numerics from code
that depends on something it should not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.environment import numerics_differences
from trainer.rundir import ALARMS, ENVIRONMENT, GOLD, METRICS, SAMPLES, read_log

COMPARED = (METRICS, GOLD, SAMPLES, ALARMS)
# Figures that measure time, never equal between two runs.
TIMING_KEYS = frozenset({"step_time", "train_runtime", "total_flos"})
TIMING_SUFFIXES = ("_per_second", "_runtime", "_seconds")


@dataclass(frozen=True)
class Difference:
    log: str  # the file
    position: str  # "step 3" or "record 12"
    key: str  # the figure ("" for a record only one run has)
    recorded: Any
    rerun: Any

    def line(self) -> str:
        if not self.key:
            return f"{self.log} {self.position}: only in the {self.recorded}"
        return f"{self.log} {self.position} {self.key}: {self.recorded!r} -> {self.rerun!r}"


@dataclass
class RunDiff:
    counts: dict[str, int] = field(default_factory=dict)  # records compared per log
    differences: list[Difference] = field(default_factory=list)
    added: set[str] = field(default_factory=set)  # figures only the re-run logs
    environment: list[str] | None = None  # None: a run has no environment.json

    @property
    def identical(self) -> bool:
        return not self.differences

    def summary(self, shown: int = 12) -> list[str]:
        """What a person reads: equal, or where they part and what else differs."""
        compared = ", ".join(f"{n} records of {log}" for log, n in self.counts.items() if n)
        if self.identical:
            lines = [f"identical to the digit: {compared or 'no records'}"]
        else:
            first = self.differences[0]
            lines = [
                f"{len(self.differences)} figures differ ({compared}); first in "
                f"{first.log} at {first.position}:"
            ]
            lines += [f"  {d.line()}" for d in self.differences[:shown]]
            if len(self.differences) > shown:
                lines.append(f"  ... and {len(self.differences) - shown} more")
        if self.added:
            lines.append(
                f"figures only the re-run logs (not compared): {', '.join(sorted(self.added))}"
            )
        if self.environment is None:
            lines.append("environments: not recorded for both runs (no environment.json)")
        elif self.environment:
            lines.append("environments differ where numerics are set (a re-run is expected")
            lines.append("equal to the digit only on the same kernels and versions):")
            lines += [f"  {line}" for line in self.environment]
        else:
            lines.append("environments: the same processor, kernels, threads and versions")
        return lines


def diff_runs(recorded: Path, rerun: Path) -> RunDiff:
    """Every logged figure of ``rerun`` against ``recorded``'s (see the module docstring)."""
    for path in (recorded, rerun):
        if not (path / METRICS).exists():
            raise FileNotFoundError(f"{path} is not a run directory (no {METRICS})")
    result = RunDiff()
    for log in COMPARED:
        old, new = read_log(recorded, log), read_log(rerun, log)
        result.counts[log] = max(len(old), len(new))
        result.differences += _diff_log(log, old, new, result.added)
    result.environment = _environment_differences(recorded, rerun)
    return result


def _diff_log(
    log: str,
    recorded: Sequence[dict[str, Any]],
    rerun: Sequence[dict[str, Any]],
    added: set[str],
) -> list[Difference]:
    by_step = log in (METRICS, GOLD)
    differences = []
    for index in range(max(len(recorded), len(rerun))):
        old = recorded[index] if index < len(recorded) else None
        new = rerun[index] if index < len(rerun) else None
        where = _position(old or new or {}, index, by_step)
        if old is None or new is None:
            differences.append(
                Difference(log, where, "", "re-run" if old is None else "record", "")
            )
            continue
        for key in sorted(set(old) | set(new), key=lambda k: (k != "step", k)):
            if _timing(key) or old.get(key) == new.get(key):
                continue
            if key not in old:
                added.add(f"{log}:{key}")
                continue
            differences.append(Difference(log, where, key, old.get(key), new.get(key)))
    return differences


def _position(record: dict[str, Any], index: int, by_step: bool) -> str:
    if by_step and "step" in record:
        return f"step {record['step']}"
    return f"record {index + 1}"


def _timing(key: str) -> bool:
    return key in TIMING_KEYS or key.endswith(TIMING_SUFFIXES)


def _environment_differences(recorded: Path, rerun: Path) -> list[str] | None:
    paths = [recorded / ENVIRONMENT, rerun / ENVIRONMENT]
    if not all(path.exists() for path in paths):
        return None
    old, new = (json.loads(path.read_text(encoding="utf-8")) for path in paths)
    return numerics_differences(old, new)
