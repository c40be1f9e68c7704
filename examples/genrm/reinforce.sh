#!/usr/bin/env bash
# The RL rung of the genrm recipe (examples/genrm/README.md, "RL on the judge"): GRPO on the SFT
# judge genrm (`rubricsvc judges reinforce`, reinforce.json), gated against genrm on the label
# set's held-out prompts, then measured against genrm on the lab's held-out prompts.
#
#   1. start    after run.sh (WORKDIR holds its distill.json): the distilled genrm in the
#               training database, with its lineage. Without it: the training database and
#               label set alone (run.sh with GENRM_UNTIL=labels, about a minute) and genrm
#               registered there from the committed judge.yaml and adapter/
#   2. RL       `judges reinforce --judge genrm --into genrm-rl` on the same labels and split
#               (prompt:0.7, seed 0): the gate compares genrm-rl with genrm, paired, with 95%
#               intervals; the adapter is copied to adapter-rl/
#   3. evaluate genrm and genrm-rl on the lab's held-out prompts (evaluate.py, genrm first, so
#               the differences are genrm-rl minus genrm), figures into results/rl/
#
# Resumable: a step whose output is there is kept; the RL training resumes from its last
# checkpoint.
#
# Usage: bash examples/genrm/reinforce.sh [WORKDIR]   (default: .genrm-run, run.sh's)
#   GENRM_EVAL_PER_GROUP=N, GENRM_EVAL_PROMPTS=a,b   as for run.sh
# For a check of the wiring at small scale, after run.sh with the same settings:
#   GENRM_BASE=DIR GENRM_OUT=DIR   run.sh's (the tiny judge's SFT in WORKDIR)
#   GENRM_STEPS=N                  RL optimizer steps, overriding reinforce.json's epochs
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-.genrm-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
out=${GENRM_OUT:-$here}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "${GENRM_BASE:-}" ] && { [ "$out" = "$here" ] || [ ! -f "$work/distill.json" ]; }; then
  echo "GENRM_BASE needs GENRM_OUT and run.sh's WORKDIR with the same settings" >&2
  exit 1
fi
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$repo"

# 1. The judge RL starts from.
export RUBRICSVC_DATABASE_URL="sqlite:///$work/train.sqlite"
if [ ! -f "$work/distill.json" ]; then
  GENRM_UNTIL=labels bash "$here/run.sh" "$work"
  if ! rubricsvc judges show genrm > /dev/null 2>&1; then
    rubricsvc judges add "$here/judge.yaml" > /dev/null
  fi
fi

# 2. RL. The labels and split are named (rather than read from genrm's lineage) so that a
# genrm registered from its file, which has none, is trained and gated on the same ones.
settings=$here/reinforce.json
if [ -n "${GENRM_STEPS:-}" ]; then
  settings=$work/reinforce-settings.json
  python -c 'import json, sys
settings = json.load(open(sys.argv[1]))
settings["max_steps"] = int(sys.argv[2])
json.dump(settings, open(sys.argv[3], "w"), indent=2)' "$here/reinforce.json" "$GENRM_STEPS" "$settings"
fi
if [ ! -f "$work/reinforce.json" ]; then
  echo "RL on genrm (run folder $work/reinforce; a re-run resumes it)"
  rubricsvc judges reinforce --judge genrm --into genrm-rl --labels genrm-train \
    --split prompt:0.7 --config "$settings" --run-dir "$work/reinforce" --json \
    > "$work/reinforce.json.partial"
  mv "$work/reinforce.json.partial" "$work/reinforce.json"
fi
rm -rf "$out/adapter-rl"
mkdir -p "$out/adapter-rl"
cp "$work/reinforce/model/adapter_config.json" "$work/reinforce/model/adapter_model.safetensors" \
  "$out/adapter-rl/"

# 3. Evaluation on the lab's held-out prompts, in run.sh's evaluation database when it is
# there (genrm's verdicts are then reused), else in a new one.
export RUBRICSVC_DATABASE_URL="sqlite:///$work/eval.sqlite"
if [ ! -f "$work/eval.sqlite" ]; then
  rubricsvc db upgrade > /dev/null
  rubricsvc rubrics add examples/overopt/rubrics.yaml > /dev/null
  rubricsvc completions add "$work/collected/held-out.jsonl"
fi
if ! rubricsvc judges show genrm > /dev/null 2>&1; then
  rubricsvc judges add "$out/judge.yaml" > /dev/null
fi
model=""
[ -n "${GENRM_BASE:-}" ] && model=", model: $GENRM_BASE"
printf 'judges:\n  - {name: genrm-rl, backend: transformers, mode: criterion-prob%s, adapter: %s}\n' \
  "$model" "$out/adapter-rl" > "$work/judge-rl.yaml"
if ! rubricsvc judges show genrm-rl > /dev/null 2>&1; then
  rubricsvc judges add "$work/judge-rl.yaml" > /dev/null
fi
mkdir -p "$out/results/rl"
cp "$work/reinforce.json" "$out/results/rl/reinforce.json"
eval_args=()
[ -n "${GENRM_EVAL_PER_GROUP:-}" ] && eval_args+=(--per-group "$GENRM_EVAL_PER_GROUP")
[ -n "${GENRM_EVAL_PROMPTS:-}" ] && eval_args+=(--prompts "$GENRM_EVAL_PROMPTS")
python examples/genrm/evaluate.py --completions "$work/collected/held-out.jsonl" \
  --judges genrm,genrm-rl --out "$out/results/rl" ${eval_args[@]+"${eval_args[@]}"}
