"""The demo set: three prompts with one rubric each, and a strong, a medium and a weak answer
to each. ``make demo`` scores it (``examples/`` links here) and ``judges audit`` attacks a
judge on it by default."""

from __future__ import annotations

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
RUBRICS = DEMO_DIR / "rubrics.yaml"
COMPLETIONS = DEMO_DIR / "completions.jsonl"
