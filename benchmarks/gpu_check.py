"""GPU check: criterion-prob judging on a GPU at the shapes of real judge models, no download.

Run: ``python -m benchmarks.gpu_check [--device auto] [--dtype auto] [--shapes ...]
[--judgments N] [--repeats 3] [--report-tokens 1000] [--output PATH]``.

Each shape (``benchmarks/gpu_shapes/NAME.json``: the layer sizes of SmolLM2-135M, SmolLM2-1.7B
and Llama-3.1-8B) is built with random weights in the resolved dtype on the resolved device,
saved with the bundled tokenizer (whose vocabulary its ids must fit: the 8B's vocabulary is the
bundled 49,152, not Llama's 128,256) to a temporary folder, and loaded from there by the
transformers backend exactly as a judge is (``device``, ``dtype``). Random weights judge
nothing, but every figure measured here is one of arithmetic, which real weights of the same
shape share. Per shape, ``--repeats`` times each, alternated after one warm-up of each:

- criterion-prob judgments/s through the judging path (``bench_judging``: the builtin
  embedded judge's calls for one DeepResearch Bench report and its first ``--judgments``
  criteria), with the backend's prefix reuse and without it, and their ratio within each
  repeat;
- ``score()`` on a fresh SQLite database holding that report and those criteria, against the
  same backend requests sent straight to the backend (``bench_overhead``'s floor): the ratio.

On a CPU it runs the 135M shape alone with 8 judgments by default; on CUDA all three with 64.
A colocated GRPO step's split (generation, reward, update) is not measured by this version.
The record goes to ``benchmarks/results/gpu_check-latest.json`` (or ``--output``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.bench_judging import calls_for, run_calls
from benchmarks.bench_overhead import Recorder, floor_seconds, score_once, store_workload
from benchmarks.results import save, spread
from benchmarks.workload import Task, load_tasks
from rubricsvc.judging.config import BUILTIN_JUDGES

SHAPES_DIR = Path(__file__).resolve().parent / "gpu_shapes"
SHAPES = ("smollm2-135m", "smollm2-1.7b", "llama-8b")
# How far a choice token's output row reaches along its axis (other rows: about 0.02 each way).
CHOICE_SCALE = 1000.0
GRPO_SPLIT = "not measured by this version"


def shape_fields(name: str) -> dict[str, Any]:
    """The shape's config fields (its ``_`` notes left out)."""
    fields = json.loads((SHAPES_DIR / f"{name}.json").read_text())
    return {key: value for key, value in fields.items() if not key.startswith("_")}


def build_model(
    name: str, tokenizer: Any, choices: Sequence[int], device: str, dtype: str, folder: Path
) -> int:
    """A model of shape ``name`` with random weights (seeded), built in ``dtype`` on ``device``
    and saved with ``tokenizer`` to ``folder``; its parameter count.

    Random weights put next to nothing on the verdict's choice tokens, and a judge that does
    so fails every judgment (and ``score()`` then sends a canary request for each): the output
    rows of the ``choices`` (two: "Yes", "No") are set to plus and minus a large multiple of
    one axis, so the model answers one or the other, as a judge must. Only values change: every
    figure is of the same arithmetic."""
    import torch
    import transformers

    fields = shape_fields(name)
    if fields["vocab_size"] != len(tokenizer):
        raise SystemExit(
            f"shape {name}: vocab_size {fields['vocab_size']} is not the bundled tokenizer's "
            f"{len(tokenizer)}"
        )
    config = transformers.AutoConfig.for_model(
        **fields,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    with torch.no_grad():
        rows = model.get_output_embeddings().weight
        rows[list(choices)] = 0
        rows[choices[0], 0] = CHOICE_SCALE
        rows[choices[1], 0] = -CHOICE_SCALE
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return int(parameters)


def choices_of(tokenizer: Any) -> list[int]:
    """The token ids of the embedded judge's verdict choices ("Yes", "No")."""
    from rubricsvc.backends.tokens import ChoiceTokens

    prob = BUILTIN_JUDGES["embedded"]
    (task,) = load_tasks(1, 16, tokenizer)
    (call, *_) = calls_for(prob, [replace(task, criteria=task.criteria[:1])])
    tokens = ChoiceTokens(tokenizer, prob.model or "embedded")
    return [tokens.id_of(choice) for choice in call.request.choices]  # type: ignore[union-attr]


def judging_rates(backend: Any, task: Task, repeats: int) -> dict[str, Any]:
    """Criterion-prob judgments/s with prefix reuse and without, alternated after a warm-up
    of each, and the ratio within each repeat."""
    calls = calls_for(BUILTIN_JUDGES["embedded"], [task])
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for reuse in (True, False):  # warm-up: the first passes over new shapes pay once
        backend.prefix_reuse = reuse
        run_calls(backend, calls)
    for _ in range(repeats):
        for reuse in (True, False):
            backend.prefix_reuse = reuse
            runs[reuse].append(run_calls(backend, calls))
    backend.prefix_reuse = True
    rates = {reuse: [r["judgments"] / r["seconds"] for r in rs] for reuse, rs in runs.items()}
    failures = sum(r["parse_failures"] + r["backend_errors"] for rs in runs.values() for r in rs)
    return {
        "judgments": runs[True][0]["judgments"],
        "prompt_tokens": runs[True][0]["prompt_tokens"],
        "judgments_per_s_prefix_reuse": spread(rates[True]),
        "judgments_per_s_no_prefix_reuse": spread(rates[False]),
        "prefix_reuse_ratio": spread(
            [a / b for a, b in zip(rates[True], rates[False], strict=True)], digits=2
        ),
        "parse_failures_and_errors": failures,
    }


def score_against_floor(backend: Any, task: Task, repeats: int, tmp: Path) -> dict[str, Any]:
    """``score()`` on a fresh database per repeat against the same requests sent straight to
    the backend, in an order swapped every other repeat, after one warm-up ``score()``."""
    template = tmp / "template.sqlite"
    judgments = store_workload(f"sqlite:///{template}", [task])
    recorder = Recorder(backend)
    copies = []
    for index in range(repeats + 1):
        shutil.copy(template, tmp / f"copy-{index}.sqlite")
        copies.append(f"sqlite:///{tmp / f'copy-{index}.sqlite'}")
    score_once(copies[0], recorder)
    requests = list(recorder.choice_requests)
    scored: list[float] = []
    floor: list[float] = []
    for index, url in enumerate(copies[1:]):
        if index % 2:
            floor.append(floor_seconds(backend, requests))
        seconds, report = score_once(url, recorder)
        assert report.judgments == judgments and report.failed == 0, report
        scored.append(seconds)
        if not index % 2:
            floor.append(floor_seconds(backend, requests))
    return {
        "judgments": judgments,
        "score_seconds": spread(scored),
        "floor_seconds": spread(floor),
        "score_over_floor": spread([s / f for s, f in zip(scored, floor, strict=True)], digits=2),
    }


def check_shape(
    name: str, tokenizer: Any, task: Task, placement: Any, repeats: int
) -> dict[str, Any]:
    from rubricsvc.backends.transformers import TransformersBackend

    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{name}-") as folder:
        tmp = Path(folder)
        started = time.perf_counter()
        parameters = build_model(
            name, tokenizer, choices_of(tokenizer), placement.device, placement.dtype, tmp / "model"
        )
        built = time.perf_counter() - started
        started = time.perf_counter()
        backend = TransformersBackend(
            tmp / "model", device=placement.device, dtype=placement.dtype, batch_size=16
        )
        loaded = time.perf_counter() - started
        try:
            figures = {
                "parameters": parameters,
                "build_and_save_seconds": round(built, 2),
                "load_seconds": round(loaded, 2),
                "judging": judging_rates(backend, task, repeats),
                "score_vs_floor": score_against_floor(backend, task, repeats, tmp),
            }
        finally:
            backend.close()
            del backend
    print(f"{name}: {json.dumps(figures)}", flush=True)
    return figures


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(torch.device(device)))
    from benchmarks.results import machine

    return f"CPU: {machine().split(',')[0]}"


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    parser.add_argument(
        "--shapes", nargs="+", choices=SHAPES, help="default: all on CUDA, the 135M on a CPU"
    )
    parser.add_argument(
        "--judgments", type=int, help="criteria judged per run (default: 64 on CUDA, 8 on a CPU)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement")
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--output", type=Path, help="default: benchmarks/results/")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoTokenizer

    from rubricsvc.backends.embedded import prepare_embedded_model
    from rubricsvc.backends.placement import resolve
    from rubricsvc.config import get_settings

    placement = resolve(args.device, args.dtype, here=True)
    on_gpu = placement.kind == "cuda"
    shapes = args.shapes or (list(SHAPES) if on_gpu else [SHAPES[0]])
    judgments = args.judgments or (64 if on_gpu else 8)
    tokenizer = AutoTokenizer.from_pretrained(
        prepare_embedded_model(get_settings().judge.model_dir)
    )
    (task,) = load_tasks(1, args.report_tokens, tokenizer)
    task = replace(task, criteria=task.criteria[:judgments])
    print(f"{placement.device} ({device_name(placement.device)}), {placement.dtype}: "
          f"{', '.join(shapes)}; {len(task.criteria)} judgments x {args.repeats} repeats",
          flush=True)  # fmt: skip
    result: dict[str, Any] = {
        "device": placement.device,
        "device_name": device_name(placement.device),
        "dtype": placement.dtype,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "weights": "random (seeded), built from benchmarks/gpu_shapes/NAME.json; saved with "
        "the bundled SmolLM2 tokenizer, so every shape's vocab_size is 49,152 (the 8B's "
        "included, whose real vocabulary is 128,256)",
        "workload": {
            "task": task.id,
            "report_tokens": args.report_tokens,
            "judgments": len(task.criteria),
            "repeats": args.repeats,
        },
        "shapes": {
            name: check_shape(name, tokenizer, task, placement, args.repeats) for name in shapes
        },
        "grpo_step_split": GRPO_SPLIT,
    }
    argv = list(argv) if argv is not None else None
    return save("gpu_check", result, directory=args.output, argv=argv)


if __name__ == "__main__":
    main()
