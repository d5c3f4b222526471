"""The evaluate report's plots and tables are readable (issue 24, item 7): tick labels that do
not overlap, titles naming the trace and the backfilling mode, a note when every policy gives
the same outcome, the Jain column explained, the text table aligned for long names."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.evaluate import Evaluation, SequenceOutcome
from sim.report import markdown, text_table, write_report

pytest.importorskip("matplotlib")

LONG = ["fcfs", "sjf", "f1", "hpc-kernel@2", "hpc-kernel-kth-sp2", "hpc-kernel-alcf-mira"]


def _evaluation(policies: list[str], *, same: bool, trace: str = "KTH-SP2") -> Evaluation:
    outcomes = []
    rows = []
    for k, p in enumerate(policies):
        bsld = 1.0 if same else 2.0 + 3 * k
        wait = 0.0 if same else 100.0 * (k + 1)
        outs = [
            SequenceOutcome(
                policy=p,
                sequence=s,
                start=10 * s,
                bsld=bsld + s * (0 if same else 0.5),
                wait_s=wait,
                max_wait_s=2 * wait,
                utilization=0.6,
                utilization_makespan=0.5,
                fairness=1.0,
                waits=(0.0, wait, 2 * wait),
            )
            for s in range(2)
        ]
        outcomes += outs
        rows.append(
            {"policy": p, "trace": trace, "backfill": "easy", "semantics": "kairos",
             "sequences": 2, "length": 3, "seed": 1, "bsld": bsld, "wait_s": wait,
             "utilization": 0.6, "per_sequence_bsld": [o.bsld for o in outs]}
        )  # fmt: skip
    return Evaluation(rows=rows, outcomes=outcomes, starts=[0, 10])


def _render(
    evaluation: Evaluation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[object]:
    """Draws the plots as write_report does, keeping the figures open to inspect them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept: list[object] = []
    monkeypatch.setattr(plt, "close", kept.append)
    write_report(evaluation, tmp_path)
    return kept


def _overlaps(a: object, b: object) -> bool:
    from matplotlib.transforms import Bbox

    assert isinstance(a, Bbox)
    assert isinstance(b, Bbox)
    return bool(a.overlaps(b))


@pytest.mark.parametrize("same", [False, True])
def test_plot_labels_do_not_overlap_and_titles_name_trace_and_backfill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same: bool
) -> None:
    from matplotlib.figure import Figure

    figures = _render(_evaluation(LONG, same=same), tmp_path, monkeypatch)
    assert len(figures) == 2
    for fig in figures:
        assert isinstance(fig, Figure)
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        (ax,) = fig.axes
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    assert not _overlaps(boxes[i], boxes[j]), (
                        labels[i].get_text(),
                        labels[j].get_text(),
                    )
        assert "KTH-SP2" in ax.get_title()
        assert "backfill easy" in ax.get_title()
    bars = figures[0]
    assert isinstance(bars, Figure)
    names = {t.get_text() for t in bars.axes[0].yaxis.get_ticklabels()}
    assert set(LONG) <= names
    for name in ("bsld_per_policy.png", "wait_cdf.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_one_distinct_outcome_is_explained() -> None:
    text = markdown(_evaluation(LONG, same=True))
    assert "one distinct outcome" in text
    assert "no job waited" in text
    assert "one distinct outcome" not in markdown(_evaluation(LONG, same=False))


def test_jain_fairness_is_explained_and_its_value_of_one_too() -> None:
    same = markdown(_evaluation(LONG, same=True))
    assert "user fairness (Jain) = (sum x)^2 / (n x sum x^2)" in same
    assert "1.000 here because every job's bounded slowdown is 1" in same
    differ = markdown(_evaluation(LONG, same=False))
    assert "1.000 here because the trace names no users" in differ


def test_text_table_aligns_names_longer_than_ten_characters() -> None:
    lines = text_table(_evaluation(LONG, same=False).rows).splitlines()
    assert len(lines) == len(LONG)
    assert len({line.index("bsld") for line in lines}) == 1
    for line, name in zip(lines, LONG, strict=True):
        assert line.startswith(f"{name} ")
