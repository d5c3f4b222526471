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


def _setting(evaluation: Evaluation) -> str:
    """The trace and the backfilling mode, as the plots' titles name them."""
    first = evaluation.rows[0] if evaluation.rows else {}
    return f"{first.get('trace', '?')}, backfill {first.get('backfill', '?')}"


def distinct_outcomes(evaluation: Evaluation) -> int:
    """How many different results the policies give (per-sequence bsld and waits, rounded)."""
    groups = _by_policy(evaluation.outcomes)
    keys = {
        tuple((round(o.bsld, 6), round(o.wait_s, 6), round(o.max_wait_s, 6)) for o in items)
        for items in groups.values()
    }
    return len(keys)


def _degenerate(evaluation: Evaluation) -> str | None:
    """Why the plots show one bar height and one curve, or None when the policies differ."""
    if len(evaluation.rows) < 2 or distinct_outcomes(evaluation) != 1:
        return None
    why = (
        "no job waited: each job found enough free processors when it arrived, so the order a "
        "policy chooses changes nothing"
        if all(o.max_wait_s == 0 for o in evaluation.outcomes)
        else "on these sequences every policy picks the same jobs in the same order"
    )
    return (
        f"All {len(evaluation.rows)} policies give one distinct outcome ({why}); the bars are "
        "equal and the wait curves lie on top of each other. Longer sequences, another trace or "
        "another backfilling mode separate them."
    )


def _plots(evaluation: Evaluation, directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _by_policy(evaluation.outcomes)
    policies = [r["policy"] for r in evaluation.rows]
    setting = _setting(evaluation)
    degenerate = _degenerate(evaluation)
    # horizontal bars: the policy names are y tick labels, one per line, however long
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.45 * len(policies)))
    means = [float(np.mean([o.bsld for o in groups[p]])) for p in policies]
    rows = list(range(len(policies)))
    ax.barh(rows, means, color="#4c72b0", alpha=0.8, label="mean over sequences")
    for i, p in enumerate(policies):
        values = [o.bsld for o in groups[p]]
        ax.scatter(values, [i] * len(values), color="black", s=10, zorder=3, label=None)
    ax.set_yticks(rows, policies)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("average bounded slowdown (log; dots: sequences)")
    ax.set_title(f"Bounded slowdown per policy\n{setting}")
    if degenerate is not None:
        ax.text(0.5, 0.02, "one distinct outcome: all policies equal", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=8, style="italic")  # fmt: skip
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / BSLD_PNG, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p in policies:
        waits = np.sort(np.concatenate([np.asarray(o.waits) for o in groups[p]]))
        cdf = np.arange(1, waits.size + 1) / waits.size
        ax.step(np.maximum(waits, 1.0), cdf, where="post", label=p)
    ax.set_xscale("log")
    ax.set_xlabel("waiting time (s, log; 0 shown at 1 s)")
    ax.set_ylabel("fraction of jobs")
    title = f"CDF of waiting time (all sequences)\n{setting}"
    if degenerate is not None:
        title += " - one distinct outcome"
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / WAIT_CDF_PNG, dpi=120)
    plt.close(fig)


def _fmt(x: float) -> str:
    return f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3f}"


def text_table(rows: list[dict[str, Any]]) -> str:
    """The rows as ``kairos evaluate`` prints them: the name column as wide as the longest name."""
    width = max((len(str(r["policy"])) for r in rows), default=6)
    return "\n".join(
        f"{r['policy']:<{width}}  bsld {r['bsld']:>10.2f}  wait {r['wait_s']:>10.1f} s  "
        f"util {r['utilization']:.3f}"
        for r in rows
    )


def _fairness_note(evaluation: Evaluation) -> str:
    """What the Jain column measures and, when it is 1 everywhere, why."""
    text = (
        "- user fairness (Jain) = (sum x)^2 / (n x sum x^2) over the n users of a sequence, x = "
        "a user's mean bounded slowdown: 1 when every user sees the same mean slowdown, 1/n when "
        "one user bears all of it"
    )
    outcomes = evaluation.outcomes
    if not outcomes or any(o.fairness < 1.0 - 1e-9 for o in outcomes):
        return text
    if all(abs(o.bsld - 1.0) < 1e-9 for o in outcomes):
        why = "every job's bounded slowdown is 1 (no job waited), so all users' means are equal"
    else:
        why = (
            "the trace names no users (user id -1) or one user, so all jobs form one group, and "
            "the index of a single value is 1"
        )
    return f"{text}; it is 1.000 here because {why}"


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
        _fairness_note(evaluation),
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
    degenerate = _degenerate(evaluation)
    if degenerate is not None:
        lines += ["", f"**Note:** {degenerate}"]
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
