#!/usr/bin/env bash
# A small recorded GRPO run of the embedded policy (SmolLM2-135M-Instruct) in the deep-research
# environment on examples/deepresearch's training questions (docs/trainer.md, "A recorded
# run"): the embedded judge's proxy and citations rubrics as the reward, one torch thread, at
# low priority. Writes WORKDIR/runs/small-s0 (metrics, samples, report, plots) and
# WORKDIR/summary.md (what the policy did with its tools).
#
# Usage: bash examples/deepresearch/run.sh [WORKDIR]   (default: .deepresearch-run)
#   STEPS=8    GRPO steps (default 8), each of 4 rollouts of one training question
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-.deepresearch-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
steps=${STEPS:-8}
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"
export RUBRICSVC_DATABASE_URL="sqlite:///$work/deepresearch.sqlite"
cd "$repo"
rubricsvc db upgrade
rubricsvc rubrics add examples/deepresearch/rubrics.yaml > /dev/null
sed -e "s#^output_dir: .*#output_dir: $work/runs#" \
    -e "s#corpus: corpus.jsonl.*#corpus: $here/corpus.jsonl#" \
    "$here/train.yaml" > "$work/train.yaml"
nice -n 10 rubricsvc train "$work/train.yaml" --name small-s0 \
  --set "grpo.max_steps=$steps" \
  --set grpo.per_device_train_batch_size=4 \
  --set grpo.max_completion_length=128 \
  --set agent.options.result_chars=400 \
  --set agent.options.snippet_chars=80 \
  > "$work/small-s0.log" 2>&1
python examples/deepresearch/summarize.py "$work/runs/small-s0" > "$work/summary.md"
cat "$work/summary.md"
