#!/usr/bin/env bash
# Regenerate docs/results.md and docs/results/ (tables + plots) with `kairos evaluate --report`.
# Usage: scripts/results.sh [SWF_DIR]   (default data/, which holds every trace of the table)
set -euo pipefail
cd "$(dirname "$0")/.."
swf=${1:-data}
kairos=${KAIROS:-.venv/bin/kairos}
out=docs/results
# heuristics, the PPO stepping model, and the served defaults per backfilling mode (ADR 0003)
policies=fcfs,sjf,wfp3,unicep,f1,hpc-kernel@1,hpc-kernel@2,hpc-kernel@3,hpc-kernel-none@1
export KAIROS_MODELS_DIR=${KAIROS_MODELS_DIR:-models}
rm -rf "$out" && mkdir -p "$out"

traces=("lublin-1:data/lublin_256.swf.gz" "lublin-2:data/lublin_256_new2.swf.gz"
        "kth-sp2:$swf/KTH-SP2-1996-2.1-cln.swf.gz" "nasa-ipsc:$swf/NASA-iPSC-1993-3.1-cln.swf.gz"
        "alcf-mira:$swf/ALCF-Mira-2018.swf.gz")
for entry in "${traces[@]}"; do
  name=${entry%%:*}; path=${entry#*:}
  [ -f "$path" ] || { echo "skip $name: $path not found" >&2; continue; }
  for bf in easy none; do
    extra=""  # a site model (ADR 0069) is evaluated on its own trace, in its own mode
    [ -d "$KAIROS_MODELS_DIR/hpc-kernel-$name" ] && [ "$bf" = easy ] && extra=",hpc-kernel-$name@1"
    "$kairos" evaluate --trace "$path" --policies "$policies$extra" --backfill "$bf" --semantics kairos \
      --sequences 10 --length 1024 --seed 1 --workers 2 \
      --json "$out/$name-$bf.json" --report "$out/$name-$bf" >/dev/null
  done
done
for name in lublin-1 lublin-2; do
  path=data/lublin_256.swf.gz; [ "$name" = lublin-2 ] && path=data/lublin_256_new2.swf.gz
  for bf in easy none; do
    "$kairos" evaluate --trace "$path" --policies "fcfs,sjf,wfp3,unicep,f1,hpc-rls-$bf" \
      --backfill "$bf" --semantics rlscheduler --sequences 10 --length 1024 --seed 1 \
      --json "$out/$name-$bf-rlscheduler.json" >/dev/null
  done
done
.venv/bin/python scripts/results_table.py "$out" > docs/results.md
echo "wrote docs/results.md"
