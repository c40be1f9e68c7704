"""Can long responses make the embedded judge's batch fail, and what does scoring make of it?

Run: ``python examples/attacks/long_batch.py [--memory-gb 7] [--tokens 2500] [--full-logits]``
(after ``make setup``; about 6-8 minutes on 2 cores).

Twelve short responses and four long ones (``--tokens`` tokens each) to one prompt, one
criterion, judged in criterion-prob mode by the transformers backend with the embedded model,
in one batch of 16, under an address-space limit of ``--memory-gb`` (standing in for a
device's fixed memory; the limit makes an allocation fail where the machine's OOM killer
would otherwise end the process). Prints each completion's score status and value.

``--full-logits`` computes the vocabulary projection at every position of the batch, as the
backend did before it kept only the positions a verdict reads: 16 x 2,500 x 49,152 floats
(7.9 GB) then fail to allocate under 7 GB, and the run shows what scoring makes of a batch the
backend raises on. Before the batch was halved on a crash, all 16 were masked (the 12 short
ones included); now the halves are judged.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from sqlalchemy.orm import Session

from rubricsvc.backends.transformers import TransformersBackend
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.db import make_engine, upgrade
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection

FILLER = "I will keep talking about sleep and schedules and coffee. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-gb", type=float, default=7.0)
    parser.add_argument("--tokens", type=int, default=2500)
    parser.add_argument("--full-logits", action="store_true")
    args = parser.parse_args()

    backend = TransformersBackend()  # loaded before the limit: weights are not the point
    if args.full_logits:
        backend._keeps_logits = False
    limit = int(args.memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    per_filler = len(backend.tokenizer(FILLER)["input_ids"])
    long_text = FILLER * (args.tokens // per_filler)
    responses = [f"Keep a regular schedule, tip {i}." for i in range(12)]
    responses += [f"{long_text} v{i}" for i in range(4)]

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'attack.sqlite'}"
        upgrade(url)
        engine = make_engine(url)
        with Session(engine, expire_on_commit=False) as session:
            spec = RubricSpec.model_validate(
                {
                    "name": "attack/long-batch",
                    "prompt": {"external_id": "p", "text": "How do I sleep better?"},
                    "criteria": [{"text": "Recommends a regular schedule", "weight": 1}],
                }
            )
            rubrics.approve(session, rubrics.save_rubric(session, spec).version, "attack")
            records = [
                ("attack", CompletionRecord(prompt_external_id="p", text=t, external_id=f"c{i}"))
                for i, t in enumerate(responses)
            ]
            add_completions(session, records)
            session.commit()
            judge = JudgeSpec(
                name="embedded-attack",
                backend="transformers",
                mode=VerdictMode.CRITERION_PROB,
                retries=0,
                retry_backoff=0,
            )
            started = time.perf_counter()
            report = score(session, judge, Selection(), ScoreOptions(), lambda: backend)
            session.commit()
        engine.dispose()
    print(
        f"memory limit {args.memory_gb:g} GB, {args.tokens} tokens per long response, "
        f"{'every position' if args.full_logits else 'read positions'} projected: "
        f"{time.perf_counter() - started:.0f} s, {report.backend_requests} backend requests, "
        f"failures {report.failures}"
    )
    for scored in sorted(report.scores, key=lambda s: s.completion_id):
        errors = [c["error"] for c in scored.criteria if c.get("error")]
        value = "-" if scored.value is None else f"{scored.value:.3f}"
        error = errors[0][:90] if errors else ""
        print(f"{scored.completion_external_id:>4} {scored.status:<8} {value:>6} {error}")


if __name__ == "__main__":
    main()
