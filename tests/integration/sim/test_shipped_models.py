"""The shipped learned policies against the heuristics on the paper's Lublin protocol.

These are the acceptance numbers of issue 5 (``scripts/results.sh`` writes the same cells into
``docs/results.md``): seed 1, 10 x 1024 jobs, average bounded slowdown, the served default of each
backfilling mode under kairos semantics on the Lublin traces and the real traces (with a site
model where one is shipped), and the rlscheduler-semantics models against RLScheduler's published
RL column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.rlscheduler import sample_starts
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import Backfill
from app.policy.onnx_policy import OnnxPolicy, OnnxRankingPolicy
from app.settings import Settings
from sim.engine import Semantics, run_sequence

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "models"
LUBLIN = {"lublin-1": "lublin_256.swf.gz", "lublin-2": "lublin_256_new2.swf.gz"}
REAL = {
    "kth-sp2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "nasa-ipsc": "NASA-iPSC-1993-3.1-cln.swf.gz",
    "alcf-mira": "ALCF-Mira-2018.swf.gz",
}
#: site models (ADR 0069): the EASY default tuned on one trace's own training windows
SITE = {
    ("alcf-mira", Backfill.EASY): "hpc-kernel-alcf-mira",
    ("kth-sp2", Backfill.EASY): "hpc-kernel-kth-sp2",
}
HEURISTICS = ("fcfs", "sjf", "wfp3", "unicep", "f1")
PUBLISHED_RL = {
    ("lublin-1", "none"): 254.67,
    ("lublin-1", "easy"): 58.64,
    ("lublin-2", "none"): 724.51,
    ("lublin-2", "easy"): 118.79,
}

_traces: dict[str, SwfTrace] = {}


def _trace(name: str) -> SwfTrace:
    if name not in _traces:
        _traces[name] = load_swf(ROOT / "data" / {**LUBLIN, **REAL}[name])
    return _traces[name]


def _protocol(
    trace: SwfTrace, policy: str | OnnxPolicy, backfill: Backfill, semantics: Semantics
) -> float:
    starts = sample_starts(trace.n_jobs, 1024, 10, seed=1)
    runs = [
        run_sequence(trace, policy, start=s, length=1024, backfill=backfill, semantics=semantics)
        for s in starts
    ]
    return float(np.mean([avg_bounded_slowdown(r) for r in runs]))


def _default_model(backfill: Backfill) -> OnnxPolicy:
    return _newest(Settings().default_policy_for(backfill.value))


def _newest(name: str) -> OnnxPolicy:
    directory = MODELS / name
    versions = [p.name for p in directory.iterdir()]
    version = max(versions, key=lambda v: [int(x) for x in v.split(".")])
    return OnnxPolicy.load(directory / version)


@pytest.mark.slow
def test_served_defaults_against_the_best_heuristic_on_lublin() -> None:
    ratios = {}
    for backfill in (Backfill.EASY, Backfill.NONE):
        policy = _default_model(backfill)
        assert isinstance(policy, OnnxRankingPolicy)
        for trace in sorted(LUBLIN):
            learned = _protocol(_trace(trace), policy, backfill, "kairos")
            best = min(_protocol(_trace(trace), h, backfill, "kairos") for h in HEURISTICS)
            ratios[(trace, backfill.value)] = learned / best
    # issue 5: at or below the best heuristic in >= 3 of the 4 Lublin cells, never > 10 % above
    assert sum(r <= 1.0 for r in ratios.values()) >= 3, ratios
    assert max(ratios.values()) <= 1.10, ratios


@pytest.mark.slow
@pytest.mark.parametrize("trace", sorted(LUBLIN))
@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
def test_rlscheduler_model_against_the_published_rl_cell(trace: str, backfill: Backfill) -> None:
    policy = OnnxPolicy.load(MODELS / f"hpc-rls-{backfill.value}" / "1")
    learned = _protocol(_trace(trace), policy, backfill, "rlscheduler")
    assert learned <= PUBLISHED_RL[(trace, backfill.value)]


_best_heuristic: dict[tuple[str, Backfill], float] = {}


def _ratio_to_best_heuristic(trace: str, policy: OnnxPolicy, backfill: Backfill) -> float:
    if (trace, backfill) not in _best_heuristic:  # shared by the tests of one cell
        _best_heuristic[(trace, backfill)] = min(
            _protocol(_trace(trace), h, backfill, "kairos") for h in HEURISTICS
        )
    learned = _protocol(_trace(trace), policy, backfill, "kairos")
    return learned / _best_heuristic[(trace, backfill)]


@pytest.mark.slow
@pytest.mark.parametrize("trace", sorted(REAL))
@pytest.mark.parametrize("backfill", [Backfill.EASY, Backfill.NONE])
def test_learned_policy_against_the_best_heuristic_on_the_real_traces(
    trace: str, backfill: Backfill
) -> None:
    site = SITE.get((trace, backfill))
    policy = _newest(site) if site is not None else _default_model(backfill)
    assert isinstance(policy, OnnxRankingPolicy)
    assert _ratio_to_best_heuristic(trace, policy, backfill) <= 1.0  # issue 5, real traces


@pytest.mark.slow
@pytest.mark.parametrize("trace", sorted(REAL))
def test_the_easy_default_is_never_more_than_ten_percent_above_on_the_real_traces(
    trace: str,
) -> None:
    assert _ratio_to_best_heuristic(trace, _default_model(Backfill.EASY), Backfill.EASY) <= 1.10
