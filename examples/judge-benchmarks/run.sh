#!/usr/bin/env bash
# The bundled judge and genrm measured on JudgeBench's GPT-4o split and a seeded sample of
# RM-Bench (docs/validation.md, "Measuring a judge on them"), each response scored against the
# benchmark's shared rubric in criterion-prob mode (both judges' mode), a pair decided by the
# order of its two scores. One SQLite database in WORKDIR; the reports (evaluation.json and
# plots) go to RESULTS/<benchmark>-<judge>/ and the stages' times to RESULTS/times.tsv.
#
# Usage: JUDGEBENCH=FILE RMBENCH=DIR bash examples/judge-benchmarks/run.sh [WORKDIR]
#   JUDGEBENCH   JudgeBench's data/dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl
#   RMBENCH      RM-Bench's data/ folder (its domain files)
#   PER_DOMAIN=20 SEED=0   the RM-Bench sample (sample_rmbench.py): label set rm-bench-20-s0
#   JUDGES="embedded genrm" THREADS=1 RESULTS=examples/judge-benchmarks/results
#   SETS="judgebench rm-bench"   the benchmarks measured, in order
# Resumable: a finished report is kept; verdicts already stored are reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-.judge-benchmarks-run}
mkdir -p "$work"
work=$(cd "$work" && pwd)
: "${JUDGEBENCH:?JUDGEBENCH: JudgeBench GPT-4o data file}" "${RMBENCH:?RMBENCH: RM-Bench data/ folder}"
judgebench=$(cd "$(dirname "$JUDGEBENCH")" && pwd)/$(basename "$JUDGEBENCH")
rmbench=$(cd "$RMBENCH" && pwd)
cd "$repo"
results=${RESULTS:-examples/judge-benchmarks/results}
judges=${JUDGES:-embedded genrm}
mkdir -p "$results"
[ -x "$repo/.venv/bin/rubricsvc" ] && export PATH="$repo/.venv/bin:$PATH"
export RUBRICSVC_DATABASE_URL="sqlite:///$work/benchmarks.db" OMP_NUM_THREADS=${THREADS:-1}

rubricsvc db upgrade
rubricsvc labels import judgebench "$judgebench"
sample="rm-bench-${PER_DOMAIN:-20}-s${SEED:-0}"
python "$here/sample_rmbench.py" "$rmbench" "$work/$sample" \
  --per-domain "${PER_DOMAIN:-20}" --seed "${SEED:-0}"
rubricsvc labels import rm-bench "$work/$sample" --name "$sample"
rubricsvc judges add "$repo/examples/genrm/judge.yaml"

for benchmark in ${SETS:-judgebench rm-bench}; do
  case $benchmark in
    judgebench) labels=judgebench-gpt-4o-2024-05-13 ;;
    rm-bench) labels=$sample ;;
    *) echo "unknown benchmark $benchmark (judgebench, rm-bench)" >&2; exit 2 ;;
  esac
  for judge in $judges; do
    report="$results/${labels%%-2024*}-$judge"
    [ -f "$report/evaluation.json" ] && continue
    started=$SECONDS
    nice -n 10 rubricsvc judges evaluate --judge "$judge" --labels "$labels" \
      --report "$report" 2>&1 | tee "$work/${labels}-$judge.log"
    printf '%s\t%s\t%s\n' "$labels" "$judge" "$((SECONDS - started))" >> "$results/times.tsv"
  done
done
