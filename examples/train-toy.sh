#!/usr/bin/env bash
# The toy learning curve: GRPO on rubric rewards, then the same run on random rewards (the
# control), on a database of their own; prints the mean rubric reward of the first and last
# steps of both. Usage: bash examples/train-toy.sh [WORKDIR] (default: .toy-run)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-.toy-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
export RUBRICSVC_DATABASE_URL="sqlite:///$work/toy.sqlite"
rubricsvc db upgrade
rubricsvc rubrics add "$here/train-toy-rubrics.yaml"
rubricsvc rubrics approve toy/greet-friend toy/greet-neighbour toy/greet-colleague \
  toy/greet-student --reviewer toy
config="$work/train-toy.yaml"
sed "s#^output_dir: .*#output_dir: $work/runs#" "$here/train-toy.yaml" > "$config"
rubricsvc train "$config" --name rubric
rubricsvc train "$config" --name control --random-rewards
python - "$work/runs" <<'PY'
import json, sys
from pathlib import Path
for name in ("rubric", "control"):
    rows = [json.loads(l) for l in (Path(sys.argv[1]) / name / "metrics.jsonl").open()]
    values = [r["rubric/reward"] for r in rows if r.get("rubric/reward") is not None]
    k = max(len(values) // 4, 1)
    first, last = sum(values[:k]) / k, sum(values[-k:]) / k
    print(f"{name}: mean rubric reward, first {k} steps {first:.3f}, last {k} steps {last:.3f}")
PY
