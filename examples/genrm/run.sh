#!/usr/bin/env bash
# The genrm recipe (examples/genrm/README.md): a criterion-prob judge trained (LoRA) on
# per-criterion labels of the over-optimization lab's recorded completions, decided by the gold
# checks, and measured on the lab's held-out prompts against the base it was trained from.
#
#   1. collect    the recorded runs' completions and the hand-written answers, split by the
#                 task set into the lab's training prompts and its held-out prompts
#   2. labels     a training database holding the training prompts' completions only; every
#                 completion and perturbed copy of it labelled by the checks, onto the proxy
#                 rubric's criteria, split by prompt (30% held out for the gate) and balanced
#   3. distill    a LoRA student on the bundled model (distill.json), gated on the label
#                 set's held-out prompts; its adapter copied into adapter/ beside judge.yaml
#   4. evaluate   a database of its own with the lab's held-out prompts' answers: the base
#                 (embedded) and genrm against gold (evaluate.py), figures into results/
#
# Resumable: a step whose output is there is kept; the distillation resumes from its last
# checkpoint. The lab's held-out prompts never enter the training database.
#
# Usage: bash examples/genrm/run.sh [WORKDIR]   (default: .genrm-run)
#   GENRM_PER_PROMPT=15     recorded completions drawn per training prompt (default 15; "all")
#   GENRM_PERTURB=truncate,drop_sentence,pad   perturbed copies (rubricsvc labels build)
#   GENRM_EVAL_PER_GROUP=N  answers per held-out (step, prompt) group evaluated (default all)
#   GENRM_EVAL_PROMPTS=a,b  held-out prompts evaluated (default all 9)
#   GENRM_UNTIL=labels      stop after step 2 (the training database and its label set)
# For a check of the wiring at small scale (nothing in examples/genrm/ is written):
#   GENRM_BASE=DIR          the student's base model folder (default: the bundled model)
#   GENRM_STEPS=N           optimizer steps, overriding distill.json's epochs
#   GENRM_OUT=DIR           where adapter/, judge.yaml and results/ go (default: examples/genrm;
#                           required with GENRM_BASE, whose adapter judge.yaml cannot serve)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-.genrm-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
out=${GENRM_OUT:-$here}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "${GENRM_BASE:-}" ] && [ "$out" = "$here" ]; then
  echo "GENRM_BASE needs GENRM_OUT: judge.yaml here serves the bundled model's adapter" >&2
  exit 1
fi
per_prompt=${GENRM_PER_PROMPT:-15}
perturb=${GENRM_PERTURB:-truncate,drop_sentence,pad}
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$repo"

# 1. Collect. 15 completions per training prompt (of about 560 recorded) keeps the labels at
# about 1,000 to train on and 1,000 for the gate, sized for a 2-core CPU (README.md).
cap=()
[ "$per_prompt" != all ] && cap=(--max-per-prompt "$per_prompt")
python examples/genrm/collect.py --out "$work/collected" ${cap[@]+"${cap[@]}"} > /dev/null
echo "collected: $work/collected/summary.json"

# 2. The training set, in a database that holds only the training prompts' completions.
export RUBRICSVC_DATABASE_URL="sqlite:///$work/train.sqlite"
rubricsvc db upgrade > /dev/null
rubricsvc rubrics add examples/overopt/rubrics.yaml > /dev/null
rubricsvc completions add "$work/collected/train.jsonl"
train_prompts=$(python -c '
from pathlib import Path
from trainer.overopt import Split, load_task_set
tasks = load_task_set(Path("examples/overopt/tasks.yaml"))
print(",".join(task.id for task in tasks.split(Split.TRAIN)))')
if [ ! -f "$work/labels.json" ]; then
  # The split (--test-share 0.3, seed 0) is the one `judges distill --split prompt:0.7` draws:
  # the gate judges the label set's held-out prompts, all of them lab training prompts.
  rubricsvc labels build genrm-train --labeller 'checks:{prompt_id}/gold' \
    --onto '{prompt_id}/proxy' --perturb "$perturb" --prompts "$train_prompts" \
    --seed 0 --test-share 0.3 --max-ratio 3 --json > "$work/labels.json.partial"
  mv "$work/labels.json.partial" "$work/labels.json"
fi
echo "labels: $work/labels.json"
# The training set alone (reinforce.sh starts the RL rung from the committed adapter this way).
[ "${GENRM_UNTIL:-}" = labels ] && exit 0

# 3. The student. The base is the bundled model (prepared from the installed package).
base=${GENRM_BASE:-$(python -c '
from rubricsvc.backends.embedded import prepare_embedded_model
from rubricsvc.config import get_settings
print(prepare_embedded_model(get_settings().judge.model_dir))')}
settings=$here/distill.json
if [ -n "${GENRM_STEPS:-}" ]; then
  settings=$work/distill-settings.json
  python -c 'import json, sys
settings = json.load(open(sys.argv[1]))
settings["max_steps"] = int(sys.argv[2])
json.dump(settings, open(sys.argv[3], "w"), indent=2)' "$here/distill.json" "$GENRM_STEPS" "$settings"
fi
if [ ! -f "$work/distill.json" ]; then
  echo "distilling (run folder $work/distill; a re-run resumes it)"
  rubricsvc judges distill --labels genrm-train --split prompt:0.7 --base "$base" --into genrm \
    --config "$settings" --run-dir "$work/distill" --json > "$work/distill.json.partial"
  mv "$work/distill.json.partial" "$work/distill.json"
fi
# The adapter alone (its config and weights, 10 MB at r 8): the judge takes its tokenizer from
# the base. The rest of the run (checkpoints, loss plot, examples) stays in $work/distill.
rm -rf "$out/adapter"
mkdir -p "$out/adapter"
cp "$work/distill/model/adapter_config.json" "$work/distill/model/adapter_model.safetensors" \
  "$out/adapter/"
if [ "$out" != "$here" ]; then
  # Another base than the bundled model: a judge file that names it, and the base alone as
  # the reference (the bundled model's is the built-in judge embedded).
  printf 'judges:\n  - {name: genrm-base, backend: transformers, mode: criterion-prob, model: %s}
  - {name: genrm, backend: transformers, mode: criterion-prob, model: %s, adapter: adapter}\n' \
    "$base" "$base" > "$out/judge.yaml"
fi
reference=embedded
[ -n "${GENRM_BASE:-}" ] && reference=genrm-base

# 4. Evaluation on the lab's held-out prompts, in a database of their own: the judge is
# registered from its file as anyone would (a distilled judge's gate decision stays with the
# training database).
export RUBRICSVC_DATABASE_URL="sqlite:///$work/eval.sqlite"
rubricsvc db upgrade > /dev/null
rubricsvc rubrics add examples/overopt/rubrics.yaml > /dev/null
rubricsvc completions add "$work/collected/held-out.jsonl"
rubricsvc judges add "$out/judge.yaml" > /dev/null
mkdir -p "$out/results"
cp "$work/collected/summary.json" "$out/results/collected.json"
cp "$work/labels.json" "$out/results/labels.json"
cp "$work/distill.json" "$out/results/distill.json"
eval_args=()
[ -n "${GENRM_EVAL_PER_GROUP:-}" ] && eval_args+=(--per-group "$GENRM_EVAL_PER_GROUP")
[ -n "${GENRM_EVAL_PROMPTS:-}" ] && eval_args+=(--prompts "$GENRM_EVAL_PROMPTS")
python examples/genrm/evaluate.py --completions "$work/collected/held-out.jsonl" \
  --judges "$reference,genrm" --out "$out/results" ${eval_args[@]+"${eval_args[@]}"}
