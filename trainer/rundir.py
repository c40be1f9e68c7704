"""The run directory: what a run was told, what it measured, what it wrote, what alarmed.

config.yaml       the resolved config (every default filled in)
grpo_args.json    the full argument set handed to TRL's GRPOConfig
environment.json  the machine and software it ran on (trainer/environment.py)
metrics.jsonl     one line per logged step (TRL's metrics and the monitors')
samples.jsonl     prompts, completions and rewards, per step
gold.jsonl        gold-monitor evaluations
alarms.jsonl      monitor alarms (gold divergence, saturated criteria)
refreshes.jsonl   judge refreshes (trainer/refresh.py): labels, gate, swapped or not
refresh/step-N/   each refresh's distillation run (labels' student, its gate's report)
plots/*.png       reward, gold score, length, repetition, criteria
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from rubricsvc.fileformats import jsonl_lines

METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
GOLD = "gold.jsonl"
ALARMS = "alarms.jsonl"
REFRESHES = "refreshes.jsonl"
ENVIRONMENT = "environment.json"
# The evolution run's whole history (reward.evolution; trainer/evolution.py), at the end.
EVOLUTION_HISTORY = "evolution.json"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        (path / "plots").mkdir(exist_ok=True)

    def write_config(
        self,
        config: dict[str, Any],
        trainer_args: dict[str, Any],
        args_name: str = "grpo_args.json",
    ) -> None:
        """config.yaml, and the arguments handed to TRL's trainer config in ``args_name``."""
        text = yaml.safe_dump(_clean(config), sort_keys=False, allow_unicode=True)
        (self.path / "config.yaml").write_text(text, encoding="utf-8")
        args = json.dumps(_clean(trainer_args), indent=2, sort_keys=True, default=str)
        (self.path / args_name).write_text(args + "\n", encoding="utf-8")

    def write_environment(self, environment: dict[str, Any]) -> None:
        text = json.dumps(_clean(environment), indent=2, sort_keys=True, default=str)
        (self.path / ENVIRONMENT).write_text(text + "\n", encoding="utf-8")

    def append(self, name: str, record: dict[str, Any]) -> None:
        with (self.path / name).open("a", encoding="utf-8") as out:
            out.write(json.dumps(_clean(record), ensure_ascii=False, default=str) + "\n")

    def read(self, name: str) -> list[dict[str, Any]]:
        return read_log(self.path, name)


def read_log(run: Path, name: str) -> list[dict[str, Any]]:
    """The records of one of ``run``'s JSON-lines logs (none when it has no such log)."""
    path = run / name
    if not path.exists():
        return []
    lines = jsonl_lines(path.read_text(encoding="utf-8"))
    return [json.loads(line) for line in lines if line.strip()]
