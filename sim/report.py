"""Markdown + PNG report of an evaluation (``kairos evaluate --report DIR``).

The plots need matplotlib, from the ``sim`` extra; without it the report is the Markdown tables
alone, with a line saying how to get the plots (:data:`NO_PLOTS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.evaluate import Evaluation, SequenceOutcome

BSLD_PNG = "bsld_per_policy.png"
WAIT_CDF_PNG = "wait_cdf.png"
REPORT_MD = "report.md"
#: why a report has no plots, and the fix
NO_PLOTS = (
    "plots skipped: matplotlib is not installed; install the sim extra "
    "(in a checkout: .venv/bin/pip install -e '.[sim]') for them"
)


def can_plot() -> bool:
    """Whether matplotlib (the ``sim`` extra) can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _by_policy(outcomes: list[SequenceOutcome]) -> dict[str, list[SequenceOutcome]]:
    out: dict[str, list[SequenceOutcome]] = {}
    for o in outcomes:
        out.setdefault(o.policy, []).append(o)
    for items in out.values():
        items.sort(key=lambda o: o.sequence)
    return out


def _plots(evaluation: Evaluation, directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _by_policy(evaluation.outcomes)
    policies = [r["policy"] for r in evaluation.rows]

    fig, ax = plt.subplots(figsize=(7, 4))
    means = [float(np.mean([o.bsld for o in groups[p]])) for p in policies]
    ax.bar(policies, means, color="#4c72b0", alpha=0.8, label="mean over sequences")
    for i, p in enumerate(policies):
        values = [o.bsld for o in groups[p]]
        ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
    ax.set_yscale("log")
    ax.set_ylabel("average bounded slowdown (log)")
    ax.set_title("Bounded slowdown per policy (dots: sequences)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(directory / BSLD_PNG, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for p in policies:
        waits = np.sort(np.concatenate([np.asarray(o.waits) for o in groups[p]]))
        cdf = np.arange(1, waits.size + 1) / waits.size
        ax.step(np.maximum(waits, 1.0), cdf, where="post", label=p)
    ax.set_xscale("log")
    ax.set_xlabel("waiting time (s, log; 0 shown at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("CDF of waiting time (all sequences)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(directory / WAIT_CDF_PNG, dpi=120)
    plt.close(fig)


def _fmt(x: float) -> str:
    return f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3f}"


def markdown(evaluation: Evaluation, *, plots: bool = True) -> str:
    rows: list[dict[str, Any]] = evaluation.rows
    groups = _by_policy(evaluation.outcomes)
    first = rows[0] if rows else {}
    lines = [
        f"# Evaluation: {first.get('trace', '?')}",
        "",
        f"- semantics: `{first.get('semantics')}`, backfill: `{first.get('backfill')}`",
        f"- {first.get('sequences')} sequences of {first.get('length')} jobs, seed "
        f"{first.get('seed')}; starts {evaluation.starts}",
        "- utilisation = RLScheduler's definition (work / ((last start - first submit) x "
        "MaxProcs)); makespan utilisation uses the last completion",
        "",
        "| policy | avg bsld | avg wait (s) | max wait (s) | utilisation | util. (makespan) "
        "| user fairness (Jain) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        items = groups[row["policy"]]
        lines.append(
            f"| {row['policy']} | {_fmt(row['bsld'])} | {_fmt(row['wait_s'])} "
            f"| {_fmt(float(np.mean([o.max_wait_s for o in items])))} "
            f"| {row['utilization']:.3f} "
            f"| {float(np.mean([o.utilization_makespan for o in items])):.3f} "
            f"| {float(np.mean([o.fairness for o in items])):.3f} |"
        )
    lines += ["", "Per-sequence average bounded slowdown:", ""]
    header = "| policy | " + " | ".join(str(s) for s in evaluation.starts) + " |"
    lines += [header, "|---|" + "---:|" * len(evaluation.starts)]
    for row in rows:
        values = " | ".join(f"{v:.2f}" for v in row["per_sequence_bsld"])
        lines.append(f"| {row['policy']} | {values} |")
    if plots:
        lines += ["", f"![bsld per policy]({BSLD_PNG})", "", f"![CDF of wait]({WAIT_CDF_PNG})"]
    else:
        lines += ["", f"_{NO_PLOTS}._"]
    return "\n".join([*lines, ""])


def write_report(evaluation: Evaluation, directory: Path) -> Path:
    """``report.md`` in ``directory``, with the plots when :func:`can_plot`."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = can_plot()
    if plots:
        _plots(evaluation, directory)
    path = directory / REPORT_MD
    path.write_text(markdown(evaluation, plots=plots))
    return path
