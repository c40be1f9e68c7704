"""A seeded sample of RM-Bench's records, written in RM-Bench's own format.

Scoring every response of RM-Bench (798 records of chat, code and safety, six responses each)
with a judge on a 2-core CPU takes hours; a sample of N records from each domain file, drawn
with a fixed seed, keeps the benchmark's own metric (each record's 3x3 style matrix, the
domains averaged) and its prompt-resampled interval honest about the smaller sample. The
sample files are named as the originals, so `rubricsvc labels import rm-bench OUT` reads them
as it reads RM-Bench's `data/` folder.

    python examples/judge-benchmarks/sample_rmbench.py RM-Bench/data OUT [--per-domain 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DOMAIN_FILES = (
    "chat_filtered.json",
    "code_filtered.json",
    "math_filtered.json",
    "safety-refuse_filtered.json",
    "safety-response_filtered.json",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="RM-Bench's data/ folder")
    parser.add_argument("out", type=Path, help="where the sampled files go")
    parser.add_argument("--per-domain", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in DOMAIN_FILES:
        source = args.data / name
        if not source.is_file():
            print(f"{name}: not in {args.data}, left out")
            continue
        records = json.loads(source.read_text(encoding="utf-8"))
        # Sorted by id first, so the sample depends on the records, not on the file's order.
        records.sort(key=lambda record: str(record["id"]))
        sample = random.Random(args.seed).sample(records, min(args.per_domain, len(records)))
        (args.out / name).write_text(json.dumps(sample, ensure_ascii=False), encoding="utf-8")
        print(f"{name}: {len(sample)} of {len(records)} records")


if __name__ == "__main__":
    main()
