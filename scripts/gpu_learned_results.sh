#!/usr/bin/env bash
# The "GPU learned policy" tables of docs/results.md: learned gpu-v1 models against the heuristics
# * on the 8 Pollux evaluation workloads under kairos and philly-rigid (the workloads as rigid
#   jobs with their consolidated run time: python -m sim.gpu_data rigid-pollux) and pollux-compat
#   (with the wins against the artifact's tiresias and the p99 ratio to it);
# * under philly-rigid on 8 test-week workloads: 160 jobs each generated with
#   app/domains/gpu/philly.py from the Philly weeks 12-15 (seeds 1200000..1200007, written to
#   OUT_DIR/test-weeks/), jobs rigid with their consolidated run time.
#   bash scripts/gpu_learned_results.sh [OUT_DIR] [POLICY ...]   (POLICY: gpu-v1 or a model dir)
set -euo pipefail
out=${1:-runs/gpu-results}
shift || true
models=$(IFS=,; echo "${*:-gpu-v1}")
py=${PYTHON:-.venv/bin/python}
kairos=${KAIROS:-.venv/bin/kairos}
mkdir -p "$out"
"$py" -m sim.gpu_data rigid-pollux "$out/rigid"
"$py" - "$out/test-weeks" <<'PY'
import sys
from pathlib import Path
from app.domains.gpu.philly import TEST_WEEKS, generate_pollux_workload, rigid_jobs, split_weeks
from sim.gpu_data import load_applications, load_philly, write_rigid
(rows,) = split_weeks(load_philly(), TEST_WEEKS)
apps = load_applications()
for i in range(8):
    jobs = rigid_jobs(generate_pollux_workload(rows, 1_200_000 + i, 160), apps)
    write_rigid(jobs, Path(sys.argv[1]) / f"workload-{i + 1}.csv")
PY
heur=tiresias-2dlas,tiresias-2dgittins,las,smallest-first,fifo,fifo-skip,drf,srtf,srsf
for sem in kairos philly-rigid; do
  nice -n 10 "$kairos" evaluate --domain gpu --semantics "$sem" \
    --workload "$out"/rigid/workload-{1..8}.csv --nodes 16 --gpus-per-node 4 \
    --policies "$models,$heur" --json "$out/$sem.json" > /dev/null
done
nice -n 10 "$kairos" evaluate --domain gpu --semantics philly-rigid \
  --workload "$out"/test-weeks/workload-{1..8}.csv --nodes 16 --gpus-per-node 4 \
  --policies "$models,fifo-skip,tiresias-2dlas,las,drf,smallest-first,srtf" \
  --json "$out/test-weeks-philly-rigid.json" > /dev/null
nice -n 10 "$kairos" evaluate --domain gpu --semantics pollux-compat \
  --workload data/gpu/pollux/workloads/workload-{1..8}.csv \
  --policies "$models,tiresias,tiresias-2dlas,smallest-first,las,srsf" \
  --json "$out/pollux-compat.json" > /dev/null
"$py" - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("kairos", "philly-rigid", "test-weeks-philly-rigid", "pollux-compat"):
    rows = json.loads((out / f"{name}.json").read_text())
    pols = list(dict.fromkeys(r["policy"] for r in rows))
    wls = sorted({r["workload"] for r in rows}, key=lambda w: int(w.split("-")[-1]))
    cell = {(r["policy"], r["workload"]): r for r in rows}
    ref = "tiresias" if name == "pollux-compat" else None
    print(f"\n{name}: average JCT (s) per workload, mean of the 8, mean p99 (s), preemptions\n")
    extra = " wins vs tiresias | p99 / tiresias's |" if ref else ""
    print("| policy | " + " | ".join(w.split("-")[-1] for w in wls)
          + " | mean | p99 mean | preempt. |" + extra)
    print("|---" * (len(wls) + 4 + (2 if ref else 0)) + "|")
    for p in pols:
        avgs = [cell[(p, w)]["avg_jct_s"] for w in wls]
        p99 = sum(cell[(p, w)]["p99_jct_s"] for w in wls) / len(wls)
        pre = sum(cell[(p, w)]["preemptions"] for w in wls)
        line = (f"| {p} | " + " | ".join(f"{a:,.1f}" for a in avgs)
                + f" | {sum(avgs) / len(avgs):,.1f} | {p99:,.0f} | {pre} |")
        if ref:
            wins = sum(cell[(p, w)]["avg_jct_s"] < cell[(ref, w)]["avg_jct_s"] for w in wls)
            ratio = max(cell[(p, w)]["p99_jct_s"] / cell[(ref, w)]["p99_jct_s"] for w in wls)
            rmean = p99 / (sum(cell[(ref, w)]["p99_jct_s"] for w in wls) / len(wls))
            line += f" {wins}/8 | {rmean:.3f} (max {ratio:.3f}) |"
        print(line)
PY
