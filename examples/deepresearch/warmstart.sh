#!/usr/bin/env bash
# The deep-research agent's warm start (examples/deepresearch/README.md, "Warm start"): the
# embedded policy (SmolLM2-135M-Instruct) fine-tuned on demonstrations.jsonl (sft.yaml), then
# the base and the fine-tuned policy evaluated side by side on the held-out questions, in the
# environment with train.yaml's settings (the RL stage's), greedy and 4 samples a question at
# temperature 0.7. Two torch threads, at low priority.
#
# Writes the policy to WORKDIR/runs/sft/policy (weights stay there), and the records (the SFT
# run's config, data record, metrics, plots and log; each evaluation's folder; the side-by-side
# reports; the stages' times) to RECORDS.
#
# Resumable: a finished stage is kept (the SFT run once its policy is saved, an evaluation once
# its evaluation.json is written); an interrupted evaluation resumes at its next rollout, an
# interrupted SFT run starts again.
#
# Usage: bash examples/deepresearch/warmstart.sh [WORKDIR]   (default: .warmstart-run)
#   RECORDS=docs/deepresearch/runs/warmstart   where the records go
#   SAMPLES=4 TEMPERATURE=0.7                  the sampled evaluation
#   THREADS=2                                  torch threads
#   ONLY=base    the base policy's evaluations alone: they need no SFT, so they can run
#                beside it (on another core); the full run then keeps them
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-.warmstart-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
cd "$repo"
records=${RECORDS:-docs/deepresearch/runs/warmstart}
samples=${SAMPLES:-4}
temperature=${TEMPERATURE:-0.7}
threads=${THREADS:-2}
mkdir -p "$records"
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"

timed() {  # timed STAGE COMMAND...: run it, and add its wall time to RECORDS/times.tsv
  local stage=$1 started=$SECONDS
  shift
  "$@"
  printf '%s\t%s\n' "$stage" "$((SECONDS - started))" >> "$records/times.tsv"
}

sampled=(--samples "$samples" --temperature "$temperature")
evaluate() {  # evaluate NAME [OPTIONS...]: no --policy is train.yaml's, the embedded model
  local name=$1
  shift
  if [ ! -f "$records/$name/evaluation.json" ]; then
    timed "$name" nice -n 10 rubricsvc train eval-agent \
      --config "$here/train.yaml" --split held-out --threads "$threads" \
      -o "$records/$name" "$@" 2>&1 | tee "$work/$name.log"
  fi
}
if [ "${ONLY:-}" = base ]; then
  evaluate base-greedy
  evaluate base-sampled "${sampled[@]}"
  exit 0
fi

# 1. SFT on the demonstrations. The run refuses a non-empty directory: an unfinished one (no
# policy saved) is removed and run again from the start.
sft="$work/runs/sft"
if [ ! -f "$sft/policy/config.json" ]; then
  rm -rf "$sft"
  timed sft nice -n 10 rubricsvc train sft "$here/sft.yaml" \
    --set "output_dir=$work/runs" --set "threads=$threads" 2>&1 | tee "$work/sft.log"
fi
mkdir -p "$records/sft"
cp "$sft"/{config.yaml,sft_args.json,data.json,environment.json,metrics.jsonl} "$records/sft/"
cp -r "$sft/plots" "$records/sft/"
[ -f "$work/sft.log" ] && cp "$work/sft.log" "$records/sft/train.log"

# 2. Each policy on the held-out questions: greedy, then sampled.
evaluate base-greedy
evaluate sft-greedy --policy "$sft"
evaluate base-sampled "${sampled[@]}"
evaluate sft-sampled --policy "$sft" "${sampled[@]}"

# 3. Side by side: the fine-tuned policy minus the base, paired over the questions.
rubricsvc train eval-agent-compare "$records/base-greedy" "$records/sft-greedy" \
  -o "$records/greedy.md" > /dev/null
rubricsvc train eval-agent-compare "$records/base-sampled" "$records/sft-sampled" \
  -o "$records/sampled.md" > /dev/null
cat "$records/greedy.md" "$records/sampled.md"
