"""The ``verifiers`` package's rubric judge on the benchmark workload.

Runs with the Python of the separate environment that holds ``verifiers`` (``make
bench-peers-env``), never with rubricsvc's: the two pin different versions of the same
libraries. It imports nothing from rubricsvc. Input (a JSON file): the server, the model and
the tasks (prompt, response, criteria). Output (one JSON object on stdout): seconds, calls,
valid verdicts, failed calls and the first few errors.

The judge is ``verifiers.v1.judges.RubricJudge`` driven through its public ``score``, with its
defaults (all of a task's criteria in one call, plain-text JSON verdicts, choices no/yes) or
with the options the input names: ``structured_output`` (the verdicts decoded to the judge's
JSON schema through the server's ``response_format``) and ``max_criteria`` (criteria per call).
As in verifiers, a call whose verdicts do not validate fails the task's whole score.
Its ``trace`` argument is a stand-in with the members the judge uses (the response, metrics,
the judge-call record): a full agent trace holds nothing the judge reads beyond these.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from verifiers.v1.judges import RubricJudge, RubricJudgeConfig
from verifiers.v1.task import TaskData
from verifiers.v1.types import SamplingConfig

API_KEY_VAR = "RUBRICSVC_BENCH_PEER_KEY"


class ResponseTrace:
    """The members of ``verifiers.v1.trace.Trace`` that ``RubricJudge.score`` touches."""

    def __init__(self, response: str) -> None:
        self.last_reply = response
        self.transcript = response
        self.metrics: dict[str, float] = {}
        self.prompt_tokens = self.reply_tokens = 0

    def record_metric(self, name: str, value: float) -> None:
        self.metrics[name] = float(value)

    def record_judge_call(self, *, response: Any, **_: Any) -> None:
        if response.usage is not None:  # the judge's own usage record; cached prompt included
            self.prompt_tokens += response.usage.prompt_tokens
            self.prompt_tokens += response.usage.cached_input_tokens or 0
            self.reply_tokens += response.usage.completion_tokens


async def score_tasks(spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    semaphore = asyncio.Semaphore(spec["concurrency"])
    errors: list[str] = []
    judges = []
    for index, task in enumerate(spec["tasks"]):
        rubric = workdir / f"rubric-{index}.json"
        criteria = [{"name": f"c{i}", "text": text} for i, text in enumerate(task["criteria"])]
        rubric.write_text(json.dumps({"criteria": criteria}))
        config = RubricJudgeConfig(
            path=rubric,
            base_url=spec["base_url"],
            api_key_var=API_KEY_VAR,
            model=spec["model"],
            view="last_reply",
            structured_output=spec.get("structured_output", False),
            max_criteria=spec.get("max_criteria"),
            sampling=SamplingConfig(
                temperature=0.0,
                max_tokens=spec["tokens_per_criterion"]
                * min(len(criteria), spec.get("max_criteria") or len(criteria)),
            ),
        )
        judges.append((RubricJudge(config), task))

    traces = [ResponseTrace(task["response"]) for _, task in judges]

    async def one(judge: RubricJudge, task: dict[str, Any], trace: ResponseTrace) -> int:
        async with semaphore:
            try:
                await judge.score(TaskData(prompt=task["prompt"]), trace)
            except Exception as err:  # a judge failure: no verdict for the call's criteria
                errors.append(f"{type(err).__name__}: {str(err)[:200]}")
                return 0
            return len(task["criteria"])

    started = time.perf_counter()
    valid = await asyncio.gather(
        *(one(judge, task, trace) for (judge, task), trace in zip(judges, traces, strict=True))
    )
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 3),
        "calls": len(judges),
        "judgments": sum(len(task["criteria"]) for task in spec["tasks"]),
        "valid_verdicts": sum(valid),
        "failed_calls": len(errors),
        "prompt_tokens": sum(t.prompt_tokens for t in traces),
        "reply_tokens": sum(t.reply_tokens for t in traces),
        "errors": errors[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path, help="the workload and server, as JSON")
    args = parser.parse_args()
    spec = json.loads(args.input.read_text())
    os.environ.setdefault(API_KEY_VAR, "EMPTY")
    with tempfile.TemporaryDirectory() as workdir:
        result = asyncio.run(score_tasks(spec, Path(workdir)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
