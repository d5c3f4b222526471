"""Markdown + PNG report of a GPU evaluation (``kairos evaluate --domain gpu --report DIR``):
per workload, a table of the policies, the JCT CDF per policy and the GPUs in use over time.
Without matplotlib (the ``sim`` extra) the report is the tables and a line saying so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.domains.gpu.metrics import RunResult
from sim.report import NO_PLOTS, can_plot

__all__ = ["REPORT_MD", "write_report"]

REPORT_MD = "report.md"


def _plots(workload: str, runs: Mapping[str, RunResult], directory: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, res in runs.items():
        xs = sorted(res.jcts)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=policy)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s, log)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF, {workload}")
    ax.legend(fontsize="small")
    fig.tight_layout()
    name = f"jct_cdf_{workload}.png"
    fig.savefig(directory / name, dpi=100)
    plt.close(fig)
    names.append(name)
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, res in runs.items():
        ax.step([t for t, _ in res.usage], [g for _, g in res.usage], where="post", label=policy)
    total = next(iter(runs.values())).total_gpus if runs else 0
    ax.axhline(total, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GPUs allocated")
    ax.set_title(f"GPUs in use, {workload} ({total} GPUs)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    name = f"gpus_in_use_{workload}.png"
    fig.savefig(directory / name, dpi=100)
    plt.close(fig)
    names.append(name)
    return names


def write_report(
    rows: Sequence[dict[str, Any]], runs: Mapping[tuple[str, str], RunResult], directory: Path
) -> Path:
    """Write ``report.md`` (and the plots when matplotlib is there) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = can_plot()
    semantics = rows[0]["semantics"] if rows else "?"
    lines = [f"# GPU evaluation ({semantics})", ""]
    if not plots:
        lines += [f"_{NO_PLOTS}_", ""]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    for w in workloads:
        lines += [
            f"## {w}",
            "",
            "| policy | avg JCT (s) | p50 (s) | p99 (s) | makespan (s) | GPU util. | preemptions |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            if r["workload"] == w:
                lines.append(
                    f"| {r['policy']} | {r['avg_jct_s']:,.2f} | {r['p50_jct_s']:,.0f} | "
                    f"{r['p99_jct_s']:,.0f} | {r['makespan_s']:,.0f} | "
                    f"{r['gpu_utilization']:.3f} | {r['preemptions']} |"
                )
        lines.append("")
        if plots:
            per = {p: res for (wl, p), res in runs.items() if wl == w}
            for name in _plots(w, per, directory):
                lines += [f"![{name}]({name})", ""]
    out = directory / REPORT_MD
    out.write_text("\n".join(lines))
    return out
