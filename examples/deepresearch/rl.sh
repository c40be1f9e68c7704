#!/usr/bin/env bash
# RL after the warm start (examples/deepresearch/README.md, "RL after the warm start"): GRPO of
# the fine-tuned policy (warmstart.sh's WORKDIR/runs/sft/policy) in the environment with
# train.yaml's trajectory reward, in two arms, each under seeds 0-2:
#   genrm    the rubric component judged by genrm (examples/genrm), the best judge here
#   oracle   the rubric component the question's gold checks (no judge): what is reachable
#            in this budget. The citations component needs a judge, so the oracle leaves it
#            out (its weight goes to the components that remain); gold checks citations.
# then each trained policy evaluated on the held-out questions as warmstart.sh evaluates the
# warm start (greedy and 4 samples a question at 0.7), and set against the warm start.
#
# Memory: train.yaml's batch of 8 rollouts of up to 1,024 tokens (with the prompt and the tools'
# schemas, about 1,500 tokens each) in one backward pass took more than 23 GB on the CPU and
# was killed; the same 8 rollouts a step (two questions' groups of 4) are generated at once
# and learned from in micro-batches of 2, the gradients accumulated over 4 (the same step).
#
# Records (config, metrics, samples, report, plots, log; each evaluation) go to
# RECORDS/<arm>-s<seed>/ (the evaluations in <arm>-s<seed>-greedy and -sampled) and the comparisons to RECORDS/compare-*.md.
#
# Usage: bash examples/deepresearch/rl.sh [WORKDIR]   (default: .warmstart-run, warmstart.sh's)
#   ARMS="genrm oracle" SEEDS="0 1 2" JOBS=2 THREADS=1 STEPS=20
#   RECORDS=docs/deepresearch/runs/rl   WARMSTART=docs/deepresearch/runs/warmstart
#   WARM=sft-lora   start from warmstart.sh's SFT=sft-lora warm start (default: sft): its
#                   policy in WORKDIR/runs/sft-lora, or, where there is none, made from the
#                   adapter kept in WARMSTART/sft-lora/adapter (rubricsvc train merge-adapter)
# Resumable: a finished run (its policy saved) and a finished evaluation are kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-.warmstart-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
cd "$repo"
records=${RECORDS:-docs/deepresearch/runs/rl}
warmstart=${WARMSTART:-docs/deepresearch/runs/warmstart}
arms=${ARMS:-genrm oracle}
seeds=${SEEDS:-0 1 2}
jobs=${JOBS:-2}
threads=${THREADS:-1}
steps=${STEPS:-20}
warm=${WARM:-sft}
policy="$work/runs/$warm/policy"
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"
if [ ! -f "$policy/config.json" ] && [ -f "$warmstart/$warm/adapter/adapter_config.json" ]; then
  rm -rf "$policy"
  rubricsvc train merge-adapter "$warmstart/$warm/adapter" --output "$policy"
fi
[ -f "$policy/config.json" ] || { echo "no warm-started policy at $policy: run warmstart.sh first" >&2; exit 1; }
mkdir -p "$records"
export RUBRICSVC_DATABASE_URL="sqlite:///$work/rl.sqlite"
rubricsvc db upgrade
rubricsvc rubrics add "$here/rubrics.yaml" > /dev/null
rubricsvc judges add "$repo/examples/genrm/judge.yaml"

arm_args() {  # arm_args ARM: the --set options that make the arm
  case $1 in
    genrm) echo "--set reward.judge=genrm" ;;
    oracle) echo "--set reward.rubric={prompt_id}/gold --set agent.citations_rubric=null" ;;
    *) echo "unknown arm $1 (genrm, oracle)" >&2; return 1 ;;
  esac
}

one() {  # one ARM SEED: train, keep the records, evaluate
  local arm=$1 seed=$2 name="$1-s$2"
  local run="$work/runs/rl/$name" out="$records/$name"
  local args
  args=$(arm_args "$arm")
  if [ ! -f "$run/policy/config.json" ]; then
    rm -rf "$run"
    # shellcheck disable=SC2086  # the arm's options are words
    nice -n 10 rubricsvc train "$here/train.yaml" --name "$name" \
      --set "output_dir=$work/runs/rl" --set "policy=$policy" --set save_policy=true \
      --set "threads=$threads" --set "grpo.seed=$seed" --set "grpo.max_steps=$steps" \
      --set grpo.per_device_train_batch_size=2 --set grpo.gradient_accumulation_steps=4 \
      $args > "$work/$name.log" 2>&1
  fi
  mkdir -p "$out"
  for file in config.yaml grpo_args.json environment.json metrics.jsonl samples.jsonl report.md; do
    [ -f "$run/$file" ] && cp "$run/$file" "$out/"
  done
  [ -d "$run/plots" ] && cp -r "$run/plots" "$out/"
  # A policy made from a kept adapter: which adapter, on which base.
  [ -f "$policy/merged_from.json" ] && cp "$policy/merged_from.json" "$out/policy_merged_from.json"
  cp "$work/$name.log" "$out/train.log"
  for kind in greedy sampled; do
    local options=()
    [ "$kind" = sampled ] && options=(--samples 4 --temperature 0.7)
    [ -f "$out/$name-$kind/evaluation.json" ] || nice -n 10 rubricsvc train eval-agent \
      --config "$here/train.yaml" --split held-out --threads "$threads" --policy "$run" \
      -o "$out/$name-$kind" "${options[@]}" > "$work/$name-$kind.log" 2>&1
  done
}

running=0
for arm in $arms; do
  for seed in $seeds; do
    one "$arm" "$seed" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  done
done
wait

# Each arm's seeds against the warm start, paired over the held-out questions.
for kind in greedy sampled; do
  for arm in $arms; do
    evaluations=()
    for seed in $seeds; do evaluations+=("$records/$arm-s$seed/$arm-s$seed-$kind"); done
    rubricsvc train eval-agent-compare "$warmstart/$warm-$kind" "${evaluations[@]}" \
      -o "$records/compare-$arm-$kind.md" > /dev/null
  done
done
cat "$records"/compare-*.md
