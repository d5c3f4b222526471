#!/usr/bin/env bash
# The "GPU learned policy" tables of docs/results.md: the learned gpu-v1 against the heuristics
# on the 8 Pollux evaluation workloads under kairos and philly-rigid (the workloads as rigid
# jobs with their consolidated run time: python -m sim.gpu_data rigid-pollux) and pollux-compat.
#   bash scripts/gpu_learned_results.sh [OUT_DIR] [POLICY]   (POLICY: gpu-v1 or a model dir)
set -euo pipefail
out=${1:-runs/gpu-results}
model=${2:-gpu-v1}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
"$py" -m sim.gpu_data rigid-pollux "$out/rigid"
heur=tiresias-2dlas,tiresias-2dgittins,las,smallest-first,fifo,fifo-skip,drf,srtf,srsf
for sem in kairos philly-rigid; do
  nice -n 10 .venv/bin/kairos evaluate --domain gpu --semantics "$sem" \
    --workload "$out"/rigid/workload-{1..8}.csv --nodes 16 --gpus-per-node 4 \
    --policies "$model,$heur" --json "$out/$sem.json" > /dev/null
done
nice -n 10 .venv/bin/kairos evaluate --domain gpu --semantics pollux-compat \
  --workload data/gpu/pollux/workloads/workload-{1..8}.csv \
  --policies "$model,tiresias,tiresias-2dlas,smallest-first,las,srsf" \
  --json "$out/pollux-compat.json" > /dev/null
"$py" - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for sem in ("kairos", "philly-rigid", "pollux-compat"):
    rows = json.loads((out / f"{sem}.json").read_text())
    pols = list(dict.fromkeys(r["policy"] for r in rows))
    wls = sorted({r["workload"] for r in rows}, key=lambda w: int(w.split("-")[-1]))
    cell = {(r["policy"], r["workload"]): r for r in rows}
    print(f"\n{sem}: average JCT (s) per workload, mean of the 8, mean p99 (s)\n")
    print("| policy | " + " | ".join(w.split("-")[-1] for w in wls) + " | mean | p99 mean |")
    print("|---" * (len(wls) + 3) + "|")
    for p in pols:
        avgs = [cell[(p, w)]["avg_jct_s"] for w in wls]
        p99 = sum(cell[(p, w)]["p99_jct_s"] for w in wls) / len(wls)
        print(f"| {p} | " + " | ".join(f"{a:,.1f}" for a in avgs)
              + f" | {sum(avgs) / len(avgs):,.1f} | {p99:,.0f} |")
PY
