"""Where an in-process model runs and at what precision: the ``device`` and ``dtype`` options.

``device`` is ``auto`` (the first CUDA device when there is one, else the CPU), ``cpu``,
``cuda`` or ``cuda:N``; ``dtype`` is ``auto`` (bfloat16 on a GPU that supports it, float32
otherwise), ``float32``, ``bfloat16`` or ``float16``. Precision changes verdicts, and so does
the hardware's arithmetic, so a judge config's hash carries the resolved kind of device and
precision (``hashed``), never the word ``auto``: a CPU's and a GPU's verdicts are not mixed.
Float32 on the CPU, what every in-process judge ran at before these options existed, adds
nothing to the hash, so those judges keep the hashes (and cached verdicts) they had.

Resolving ``auto`` asks torch whether this machine has a CUDA device; a Linux machine with no
GPU driver is answered without importing torch.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricsvc.errors import ValidationFailed

DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
# Present on a Linux machine whose GPUs torch could use (NVIDIA, WSL's GPU bridge, ROCm).
_GPU_NODES = ("/proc/driver/nvidia", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


@dataclass(frozen=True)
class Placement:
    """A resolved device (``cpu``, ``cuda``, ``cuda:N``) and precision (``float32`` ...)."""

    device: str
    dtype: str

    @property
    def kind(self) -> str:
        """The device without its index: what the hash keeps (one GPU computes as another)."""
        return self.device.partition(":")[0]

    def hashed(self) -> dict[str, str]:
        """What a judge config's hash carries of this placement: nothing for float32 on the
        CPU (every judge hashed before placement was an option ran so), else both."""
        if (self.kind, self.dtype) == ("cpu", "float32"):
            return {}
        return {"device": self.kind, "dtype": self.dtype}


def check_options(device: Any = "auto", dtype: Any = "auto") -> tuple[str, str]:
    """``device`` and ``dtype`` as given, refused with the accepted values when malformed."""
    device = "auto" if device is None else str(device).strip().lower()
    dtype = "auto" if dtype is None else str(dtype).strip().lower()
    if not _DEVICE.match(device):
        raise ValidationFailed(
            f"device {device!r}: choose auto (the first CUDA device, else the CPU), cpu, cuda "
            "or cuda:N"
        )
    if dtype not in DTYPES:
        raise ValidationFailed(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return device, dtype


@functools.cache
def cuda_devices() -> int:
    """How many CUDA devices this process can use (0 without torch or a GPU)."""
    if sys.platform == "linux" and not any(Path(node).exists() for node in _GPU_NODES):
        return 0  # no GPU driver: no need to import torch to know
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


@functools.cache
def supports_bfloat16(index: int) -> bool:
    """Whether CUDA device ``index`` computes in bfloat16 natively (compute capability 8+).
    Asked for a device this machine does not have (the hash of a judge that runs on another
    machine's GPU), the answer is yes: every GPU of the last generations does."""
    if index >= cuda_devices():
        return True
    import torch

    return bool(torch.cuda.get_device_capability(index)[0] >= 8)


def resolve(device: Any = "auto", dtype: Any = "auto", *, here: bool = False) -> Placement:
    """The placement ``device`` and ``dtype`` name on this machine. With ``here`` (a model is
    about to be loaded), a CUDA device this machine lacks is refused with a clear error;
    without it (hashing a judge that may run elsewhere) an explicit device is taken as given."""
    device, dtype = check_options(device, dtype)
    if device == "auto":
        device = "cuda:0" if cuda_devices() else "cpu"
    if here and device.startswith("cuda"):
        _check_cuda(device)
    if dtype == "auto":
        index = int(device.partition(":")[2] or 0)
        gpu_bf16 = device.startswith("cuda") and supports_bfloat16(index)
        dtype = "bfloat16" if gpu_bf16 else "float32"
    return Placement(device, dtype)


def _check_cuda(device: str) -> None:
    count = cuda_devices()
    if not count:
        raise ValidationFailed(
            f"device {device!r} needs a CUDA GPU, and this machine has none that torch can use "
            "(set device: auto or cpu to judge on the CPU)"
        )
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        raise ValidationFailed(
            f"device {device!r}: this machine has {count} CUDA device(s), cuda:0 to "
            f"cuda:{count - 1}"
        )


def hashed_options(places_model: bool, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as hashed: for a backend that places its model, ``device`` and ``dtype``
    replaced by the resolved placement (absent for float32 on the CPU)."""
    if not places_model:
        return options
    kept = {k: v for k, v in options.items() if k not in ("device", "dtype")}
    placement = resolve(options.get("device", "auto"), options.get("dtype", "auto"))
    return dict(sorted({**kept, **placement.hashed()}.items()))


def loaded_options(places_model: bool, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as keyed for what is loaded: the resolved device (with its index) and
    precision, so ``auto`` and what it resolves to share one loaded model."""
    if not places_model:
        return options
    placement = resolve(options.get("device", "auto"), options.get("dtype", "auto"))
    return {**options, "device": placement.device, "dtype": placement.dtype}
