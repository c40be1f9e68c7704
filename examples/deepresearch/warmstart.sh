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
#   SFT=sft-lora the warm start of sft-lora.yaml (a LoRA adapter, kept in RECORDS/sft-lora/
#                adapter) instead of sft.yaml's; its stages and records are named after it
#                (sft-lora, sft-lora-greedy, ..., greedy-sft-lora.md), the base's are shared
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
stage=${SFT:-sft}  # the warm start's config (HERE/STAGE.yaml), run and records
[ -f "$here/$stage.yaml" ] || { echo "no $here/$stage.yaml (SFT=sft or sft-lora)" >&2; exit 1; }
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
sft="$work/runs/$stage"
if [ ! -f "$sft/policy/config.json" ]; then
  rm -rf "$sft"
  timed "$stage" nice -n 10 rubricsvc train sft "$here/$stage.yaml" \
    --set "output_dir=$work/runs" --set "threads=$threads" 2>&1 | tee "$work/$stage.log"
fi
mkdir -p "$records/$stage"
cp "$sft"/{config.yaml,sft_args.json,data.json,environment.json,metrics.jsonl} "$records/$stage/"
cp -r "$sft/plots" "$records/$stage/"
# A LoRA warm start's adapter is kept: rl.sh makes the policy from it (train merge-adapter).
[ -d "$sft/adapter" ] && rm -rf "$records/$stage/adapter" && cp -r "$sft/adapter" "$records/$stage/"
[ -f "$work/$stage.log" ] && cp "$work/$stage.log" "$records/$stage/train.log"

# 2. Each policy on the held-out questions: greedy, then sampled.
evaluate base-greedy
evaluate "$stage-greedy" --policy "$sft"
evaluate base-sampled "${sampled[@]}"
evaluate "$stage-sampled" --policy "$sft" "${sampled[@]}"

# 3. Side by side: the fine-tuned policy minus the base, paired over the questions (sft.yaml's
# as greedy.md and sampled.md, as first recorded; another's as greedy-STAGE.md, ...).
suffix=""
[ "$stage" = sft ] || suffix="-$stage"
for kind in greedy sampled; do
  rubricsvc train eval-agent-compare "$records/base-$kind" "$records/$stage-$kind" \
    -o "$records/$kind$suffix.md" > /dev/null
  cat "$records/$kind$suffix.md"
done
