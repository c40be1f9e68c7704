#!/usr/bin/env bash
# The over-optimization experiment (docs/overoptimization.md): GRPO on the embedded policy
# against the embedded judge's proxy rubric, with gold decided by checks, in four runs:
#   baseline  no defence
#   dropout   criterion dropout 0.5 (each rollout group rewarded on half its judged criteria)
#   jury      the mean of the embedded judge under two prompts (examples/overopt/judges.yaml)
#   control   random rewards (the rubric reward still logged)
# then `rubricsvc train compare` over them. Resumable: a run with a report.md is kept, a
# stopped one is started again. Measured here (2-core CPU, one torch thread per run, JOBS=2):
# 17-18 minutes a run (jury: 23), about 5 to measure the two judges first, about 45 minutes
# per seed for all four runs, about 90 for SEEDS="0 1" (docs/overoptimization.md).
#
# Round 2 (ROUND=2; docs/overoptimization.md, "Round 2: the analysis plan"): the arms
# baseline, dropout, refresh and control under seeds 0-3, the gold monitor on all 9 held-out
# prompts of tasks.yaml, everything else as in round 1:
#   refresh   the judge retrained every 10 steps on the run's own completions, labelled by
#             the gold checks, swapped in only when its gate passes (docs/trainer.md)
#   evolving       evolving rubrics (docs/evolving-rubrics.md), the embedded model writing
#                  the criteria
#   evolving-pool  evolving rubrics, a scripted generator standing in for a strong model: it
#                  proposes criteria from examples/overopt/evolving_pool.yaml, max_new at a
#                  time, and the evolution step keeps those whose verdicts separate the group
#                  (trainer/overopt_pool.py)
# After round 2 (not an arm of its plan; RUNS=refresh-within):
#   refresh-within  the refresh arm under the promotion gate as it is now, which also asks
#                   for a gain on the criteria that some completions meet and others do not
# Round 2 as measured (seed 0, two runs side by side, little other work): baseline, dropout
# and the two evolving arms about 23-24 minutes a run (23-58 s a step); each of the refresh
# arm's three refreshes about 12 minutes more (its first, measured with another run beside it
# and other work: 336 labels, 712 s to distill and gate). On a busy machine runs took up to
# three times as long. Seed 1, two runs side by side and little else: the two evolving arms
# 36 minutes (both), the two refresh runs 54 minutes (both; each refresh 327-517 s).
# A run a session's end cuts short is started again from scratch.
#
# Usage: bash examples/overopt/run.sh [WORKDIR]   (default: .overopt-run; round 2: .overopt-run-2)
#   ROUND=2      round 2's runs (default: 1, round 1's as recorded)
#   SEEDS="0"    the seeds of each run (default: "0 1", round 2: "0 1 2 3")
#   RUNS="baseline dropout"  a subset of the runs (default: all of the round's)
#   JOBS=1       runs at a time (default: 2, for two cores; each uses one torch thread)
#   SETUP=2      round 3 under its second setup (80 steps; default: 1, the frozen setup)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
round=${ROUND:-1}
case $round in
  1)
    work=${1:-.overopt-run}
    seeds=${SEEDS:-0 1}
    runs=${RUNS:-baseline dropout jury control}
    round_args=()
    ;;
  2)
    work=${1:-.overopt-run-2}
    seeds=${SEEDS:-0 1 2 3}
    runs=${RUNS:-baseline dropout evolving evolving-pool refresh control}
    # baseline.yaml keeps round 1's 4 held-out prompts, so that it still reproduces round 1.
    held_out=overopt-stress,overopt-seasons,overopt-cooking,overopt-summary,overopt-cold
    held_out=$held_out,overopt-backup,overopt-rainbow,overopt-meeting,overopt-jetlag
    round_args=(--set "monitors.gold.prompts=[$held_out]")
    ;;
  3)
    seeds=${SEEDS:-0 1 2 3}
    runs=${RUNS:-control oracle baseline genrm}
    held_out=overopt-stress,overopt-seasons,overopt-cooking,overopt-summary,overopt-cold
    held_out=$held_out,overopt-backup,overopt-rainbow,overopt-meeting,overopt-jetlag
    round_args=(--set "monitors.gold.prompts=[$held_out]")
    # The setup the pilot chose (docs/overoptimization.md, "Round 3: the pilot"), frozen
    # before any proxy run: completions up to 128 tokens, the rest as round 2. The pilot's own
    # runs (pilot-*) set their setup themselves.
    round3_setup=(--set grpo.max_completion_length=128)
    # SETUP=2 (docs/overoptimization.md, "Round 3: the oracle under the frozen setup, and the
    # setup tried next"): the oracle did not raise held-out gold at four seeds under the frozen
    # setup, so the plan's next candidate, 80 steps, the rest as the frozen setup.
    case ${SETUP:-1} in
      1) work=${1:-.overopt-run-3} ;;
      2) work=${1:-.overopt-run-3-setup2}; round3_setup+=(--set grpo.max_steps=80) ;;
      *) echo "unknown SETUP=$SETUP (round 3: 1, the frozen setup, or 2)" >&2; exit 1 ;;
    esac
    ;;
  *) echo "unknown ROUND=$round (1, 2 or 3)" >&2; exit 1 ;;
esac
mkdir -p "$work"
work=$(cd "$work" && pwd)
jobs=${JOBS:-2}
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"
export RUBRICSVC_DATABASE_URL="sqlite:///$work/overopt.sqlite"
# The evolving-pool arm's generator backend (overopt-pool) is a plugin; it only registers a name.
export RUBRICSVC_PLUGINS=${RUBRICSVC_PLUGINS:+$RUBRICSVC_PLUGINS,}trainer.overopt_pool
cd "$repo"  # the jury's template path is relative to the repository
rubricsvc db upgrade
rubricsvc rubrics add examples/overopt/rubrics.yaml > /dev/null
rubricsvc judges add examples/overopt/judges.yaml
# Round 3's genrm arm: the trained judge of examples/genrm (its adapter is committed).
[ "$round" = 3 ] && rubricsvc judges add examples/genrm/judge.yaml
sed "s#^output_dir: .*#output_dir: $work/runs#" examples/overopt/baseline.yaml > "$work/baseline.yaml"

# How well the proxy's judges decide the criteria at all: each against the checks' verdicts on
# the task set's hand-written answers (132 criterion verdicts), in a database of its own.
measure_judges() {
  local out="$work/agreement" judge
  mkdir -p "$out"
  python -m trainer.overopt examples/overopt/tasks.yaml --answers "$out" > /dev/null
  (
    export RUBRICSVC_DATABASE_URL="sqlite:///$out/agreement.sqlite"
    rubricsvc db upgrade > /dev/null
    rubricsvc rubrics add examples/overopt/rubrics.yaml > /dev/null
    rubricsvc judges add examples/overopt/judges.yaml > /dev/null
    rubricsvc completions add "$out/answers.jsonl" > /dev/null
    rubricsvc labels import jsonl "$out/labels.jsonl" --name overopt-answers > /dev/null
    for judge in embedded overopt-checklist; do
      [ -f "$out/$judge.json" ] && continue
      echo "measuring $judge against the checks (agreement/$judge.json)"
      rubricsvc judges evaluate --judge "$judge" --labels overopt-answers --json \
        > "$out/$judge.json.partial"
      mv "$out/$judge.json.partial" "$out/$judge.json"
    done
  )
}
measure_judges

evolution_settings() {  # [EXTRA]...: the evolving arms' shared settings (see settings)
  echo "--set reward.evolution.every=1 --set reward.evolution.max_new=3" \
    "--set reward.evolution.max_active=5 --set reward.evolution.prune_tolerance=0.0" \
    "--set reward.evolution.generator.category_weights.essential=1" \
    "--set reward.evolution.generator.category_weights.important=1" \
    "--set reward.evolution.generator.category_weights.optional=1" \
    "--set reward.evolution.generator.category_weights.pitfall=-1" "$@"
}

refresh_settings() {  # [EXTRA]...: the refresh arms' shared settings (see settings)
  echo "--set refresh.every=10 --set refresh.labeller=gold --set refresh.samples=80" \
    "--set refresh.gate.min_agreement=0.6 --set refresh.gate.min_gain=0.0" \
    "--set refresh.gate.split=0.5 --set refresh.training.epochs=1" \
    "--set refresh.training.learning_rate=1.0e-4 --set refresh.training.batch_size=1" \
    "--set refresh.training.gradient_accumulation_steps=8" \
    "--set refresh.training.trainable_layers=8 --set refresh.training.seed=0" "$@"
}

settings() {
  case $1 in
    baseline) ;;
    dropout) echo "--set reward.criterion_dropout=0.5" ;;
    jury) echo "--set reward.judge=overopt-jury --set reward.mode=null" ;;
    control) echo "--random-rewards" ;;
    # Judge refresh, labelled by the gold checks. every 10: three refreshes in 40 steps (at
    # 10, 20, 30), each after the policy has moved 10 updates, and 10 steps left after the
    # last for the swapped judge to act. samples 80: exactly the 10 steps' completions since
    # the previous refresh (8 a step), so each refresh learns only from what the policy writes
    # now and no completion is labelled twice; with ~4.2 criteria a prompt, ~340 labels. The
    # gate holds out half the labelled prompts (~5-6 prompts, not the 2 of a 0.8 split, so its
    # intervals resample more than a couple of prompts); it asks the student to agree with
    # the checks at least 0.6 (the embedded judge's own agreement on the hand-written answers,
    # 0.606) and to beat the current judge with 95% confidence. The student's training is
    # examples/distill/healthbench.yaml's, the one distillation tried on this model (one
    # epoch, learning rate 1e-4, 8 examples a step, the top 8 of 30 layers). Round 2 was
    # recorded before the gate measured the gain within criteria (now a refresh's default):
    # within_criteria=false keeps a resumed or repeated run the gate its runs had.
    refresh) refresh_settings "--set refresh.gate.within_criteria=false" ;;
    # The same refresh under the gate as it is now (within_criteria on): a follow-up after
    # round 2, not one of the arms its analysis plan named.
    refresh-within) refresh_settings ;;
    # Evolving rubrics (docs/evolving-rubrics.md), DR Tulu's settings where they fit:
    # every 1: DR Tulu evolves every step; a step here holds 2 of the 12 prompts (8 samples,
    #   groups of 4), so each prompt evolves at each of its ~6-7 visits in 40 steps.
    # max_new 3: DR Tulu asks for 1-5; 3 lets the pool arm try a prompt's 9 pool criteria
    #   (3 of its own, 6 shared) in its first three visits, with visits left to prune.
    # max_active 5: DR Tulu's. prune_tolerance 0.0: DR Tulu drops criteria whose scores do
    #   not vary at all. The embedded judge's criterion-prob verdicts are probabilities that
    #   barely move within a group (a 2-step check of the pool arm: values 0.36-0.63, spreads
    #   0.016-0.033 for all 12 pool criteria it tried), so no spread is 0 and no threshold
    #   above 0 has a measured reason yet: max_active does the pruning (highest spread kept).
    # Category weights 1 (pitfall -1): DR Tulu's evolved criteria weigh +1 or -1; the
    #   embedded generator names a category and the pool maps +1 to important, -1 to pitfall,
    #   so both arms' criteria weigh +-1, and five of them weigh less than a proxy rubric's
    #   positive criteria (6 for most tasks). The arms differ only in who writes the criteria.
    evolving) evolution_settings ;;
    # (one_run word-splits these settings: no value may hold a space)
    evolving-pool) evolution_settings "--set reward.evolution.generator.backend=overopt-pool" \
      "--set reward.evolution.generator.backend_options.pool=examples/overopt/evolving_pool.yaml" \
      "--set reward.evolution.generator.backend_options.tasks=examples/overopt/tasks.yaml" ;;
    # Round 3 (docs/overoptimization.md, "Round 3"): the ceiling, a reward that is gold
    # itself (the checks of each prompt's gold rubric: no judge is called), and the judge
    # trained from rubric data (examples/genrm).
    oracle) echo "--set reward.rubric={prompt_id}/gold" ;;
    genrm) echo "--set reward.judge=genrm" ;;
    # Round 3's pilot: the oracle under candidate setups, seed 0, recorded as pilot runs;
    # the setup it chose is frozen in round3_setup (above) before any proxy arm runs.
    pilot-r2) echo "--set reward.rubric={prompt_id}/gold" ;;  # round 2's setup as it was
    pilot-len128) echo "--set reward.rubric={prompt_id}/gold --set grpo.max_completion_length=128" ;;
    *) echo "unknown run $1 (baseline, dropout, jury, refresh, refresh-within, evolving," \
      "evolving-pool, control, oracle, genrm, pilot-r2, pilot-len128)" >&2; return 1 ;;
  esac
}

frozen_setup() {  # RUN: round 3's frozen setup, for every run but the pilot's
  case $1 in pilot-*) ;; *) echo "${round3_setup[@]+"${round3_setup[@]}"}" ;; esac
}

one_run() {  # RUN SEED
  local name="$1-s$2" dir="$work/runs/$1-s$2"
  if [ -f "$dir/report.md" ]; then echo "$name: done before, kept"; return; fi
  rm -rf "$dir"
  echo "$name: training (log: $work/$name.log)"
  # A database per run: SQLite takes one writer at a time, and runs may go side by side.
  cp "$work/overopt.sqlite" "$work/$name.sqlite"
  # shellcheck disable=SC2046
  if ! RUBRICSVC_DATABASE_URL="sqlite:///$work/$name.sqlite" rubricsvc train "$work/baseline.yaml" \
    --name "$name" --set "group=$1" --set "grpo.seed=$2" --set "reward.dropout_seed=$2" \
    ${round_args[@]+"${round_args[@]}"} $(frozen_setup "$1") $(settings "$1") \
    > "$work/$name.log" 2>&1; then
    echo "$name: FAILED: $(tail -n 1 "$work/$name.log")" >&2
    return 1
  fi
  echo "$name: $(tail -n 1 "$work/$name.log")"
}

pending=()
for run in $runs; do settings "$run" > /dev/null; done
# Seed by seed, so that a cut-short experiment has every run of its first seeds.
for seed in $seeds; do
  for run in $runs; do pending+=("$run $seed"); done
done
# A run that fails is reported and the others go on; the script exits non-zero at the end.
failed=0
running=0
for item in "${pending[@]}"; do
  # shellcheck disable=SC2086
  one_run $item &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || failed=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done
dirs=()
for run in $runs; do for seed in $seeds; do
  if [ -f "$work/runs/$run-s$seed/report.md" ]; then dirs+=("$work/runs/$run-s$seed"); fi
done; done
if [ "${#dirs[@]}" -gt 0 ]; then rubricsvc train compare "${dirs[@]}" --output "$work/compare"; fi
if [ "$failed" -ne 0 ]; then echo "some runs failed: see their logs in $work" >&2; exit 1; fi
