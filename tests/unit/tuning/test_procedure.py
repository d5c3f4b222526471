"""Site tuning (``app.tuning.procedure``): the history split, the guard, the output directory."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.policy import OrderingPolicy
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import Backfill
from app.policy.onnx_policy import OnnxRankingPolicy, RuntimeOptions
from app.tuning.card import HeuristicCardError, recommended_heuristic
from app.tuning.procedure import (
    HistoryJob,
    Machine,
    TuneConfig,
    TuneError,
    first_jobs,
    history_trace,
    split_history,
    tune,
)
from kairos.policy_loader import load_model_dir, register
from sim.evaluate import EvalSpec, evaluate

DATA = Path(__file__).resolve().parents[3] / "data"
#: a small procedure: 256-job windows, a few candidates, two generations at most
TINY = TuneConfig(
    window_length=256,
    val_windows=3,
    heuristics=("fcfs", "sjf", "f1"),
    blends=(0.5,),
    snapshots=1,
    pairs=2,
    windows_per_generation=1,
    max_generations=2,
)


@pytest.fixture(scope="module")
def lublin() -> SwfTrace:
    return load_swf(DATA / "lublin_256.swf.gz")


@pytest.mark.parametrize(("jobs", "length"), [(2000, 256), (1200, 256), (30_000, 1024)])
def test_validation_is_the_latest_history_and_training_ends_before_it(
    jobs: int, length: int
) -> None:
    config = TuneConfig(window_length=length)
    split = split_history(jobs, config)
    assert split.val_first == jobs - max(length, int(np.ceil(0.3 * jobs)))
    # every validation window lies in the held-out latest jobs [val_first, jobs): none reaches
    # a job after the history, and the last one ends with the history's last job
    assert min(split.val_starts) == split.val_first
    assert max(split.val_starts) + length == jobs
    assert all(split.val_first <= s and s + length <= jobs for s in split.val_starts)
    # training windows, and the earlier windows the guard also reads, end at or before the
    # first held-out job
    assert int(split.train_starts.max()) + length <= split.val_first
    assert int(split.train_starts.min()) == 0
    assert split.early_starts[0] == 0
    assert max(split.early_starts) + length == split.val_first


@pytest.mark.parametrize("jobs", [0, 300, 511])
def test_too_little_history_is_refused_with_the_reason(jobs: int) -> None:
    with pytest.raises(TuneError, match=r"too little history.*at least 512"):
        split_history(jobs, TuneConfig(window_length=256))
    assert split_history(512, TuneConfig(window_length=256)).val_first == 256


def test_tune_refuses_too_little_history_before_any_work(lublin: SwfTrace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(TuneError, match="too little history: 400 jobs"):
        tune(
            first_jobs(lublin, 400),
            backfill=Backfill.EASY,
            from_model=None,
            time_budget_s=60,
            workers=1,
            seed=0,
            out_dir=out,
            config=TINY,
        )
    assert not out.exists()


def test_first_jobs_is_the_prefix(lublin: SwfTrace) -> None:
    head = first_jobs(lublin, 1000)
    assert head.n_jobs == 1000
    assert head.job_id.tolist() == lublin.job_id[:1000].tolist()
    assert (head.max_nodes, head.max_procs) == (lublin.max_nodes, lublin.max_procs)
    with pytest.raises(TuneError):
        first_jobs(lublin, lublin.n_jobs + 1)


def test_a_history_of_jobs_becomes_the_same_trace(lublin: SwfTrace) -> None:
    head = first_jobs(lublin, 500)
    jobs = [
        HistoryJob(int(i), float(s), float(r), int(p), float(q), int(u))
        for i, s, r, p, q, u in zip(
            head.job_id,
            head.submit_time,
            head.run_time,
            head.processors,
            head.request_time,
            head.user_id,
            strict=True,
        )
    ]
    got = history_trace(list(reversed(jobs)), Machine(head.max_nodes, head.max_procs))
    for column in ("job_id", "submit_time", "run_time", "processors", "request_time", "user_id"):
        assert getattr(got, column).tolist() == getattr(head, column).tolist()
    with pytest.raises(TuneError, match="processors"):
        history_trace([HistoryJob(1, 0.0, 5.0, 999, 5.0)], Machine(256, 256))


def _config(**changes: float) -> TuneConfig:
    return replace(TINY, **changes)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_model_winner_is_a_model_directory_that_evaluate_loads(
    lublin: SwfTrace, tmp_path: Path
) -> None:
    history = first_jobs(lublin, 2000)
    out = tmp_path / "tuned"
    result = tune(
        history,
        backfill=Backfill.EASY,
        from_model=None,
        time_budget_s=240,
        workers=1,
        seed=1,
        out_dir=out,
        command="kairos tune ...",
        config=_config(guard_ratio=1e9),  # whichever learned candidate is best wins
    )
    assert result.kind == "model"
    assert sorted(p.name for p in out.iterdir()) == ["card.json", "policy.onnx"]
    card = json.loads((out / "card.json").read_text())
    assert card == result.card
    record = card["tuning"]
    assert record["command"] == "kairos tune ..."
    assert record["validation_job_range"] == [2000 - 600, 2000]
    assert record["training_job_range"] == [0, 1400]
    assert record["winner"] == result.winner
    names = {row["candidate"] for row in record["table"]}
    assert {"fcfs", "sjf", "f1", "start:hpc-kernel@3", "start:hpc-kernel@3+sjf@0.5"} <= names
    assert any(n.startswith("tuned@") for n in names)
    policy = load_model_dir(out, RuntimeOptions())
    assert isinstance(policy, OnnxRankingPolicy)
    # the table's ratios are to the best heuristic of each window set, the score their larger;
    # with the guard open the model of the best score wins
    best_h = min(r.avg_bsld for r in result.table if r.kind == "heuristic")
    models = [r for r in result.table if r.kind == "model"]
    assert min(models, key=lambda r: r.score).candidate == result.winner
    assert all(r.ratio == pytest.approx(r.avg_bsld / best_h) for r in result.table)
    assert all(r.earlier_ratio is not None for r in result.table)
    assert all(r.score == max(r.ratio, r.earlier_ratio or 0.0) for r in result.table)
    assert min(r.earlier_ratio or 0.0 for r in result.table if r.kind == "heuristic") == 1.0
    # kairos evaluate runs the directory on jobs after the history
    register()
    spec = EvalSpec(
        trace_path=str(DATA / "lublin_256.swf.gz"),
        policies=(str(out),),
        backfill=Backfill.EASY,
        semantics="kairos",
        sequences=2,
        length=256,
        seed=3,
        start_job=2000,
    )
    rows = evaluate(spec, progress=False)
    assert rows.rows[0]["policy"] == str(out)
    assert all(s >= 2000 for s in rows.starts)


@pytest.mark.slow
def test_the_guard_names_the_best_heuristic_when_no_model_beats_it_enough(
    lublin: SwfTrace, tmp_path: Path
) -> None:
    out = tmp_path / "guarded"
    result = tune(
        first_jobs(lublin, 2000),
        backfill=Backfill.NONE,
        from_model=None,
        time_budget_s=240,
        workers=1,
        seed=1,
        out_dir=out,
        config=_config(guard_ratio=0.0, max_generations=1),  # no learned candidate can pass
    )
    best = min((r for r in result.table if r.kind == "heuristic"), key=lambda r: r.score)
    assert (result.kind, result.winner) == ("heuristic", best.candidate)
    assert [p.name for p in out.iterdir()] == ["card.json"]
    card = json.loads((out / "card.json").read_text())
    assert recommended_heuristic(card) == best.candidate
    assert card["tuning"]["backfill"] == "none"
    assert "hpc-kernel-none" in card["tuning"]["started_from"]
    loaded = load_model_dir(out, RuntimeOptions())
    assert isinstance(loaded, OrderingPolicy)
    assert loaded.ref == get_heuristic(best.candidate).ref
    # out is taken now: a second tune into it is refused before any work
    with pytest.raises(TuneError, match="not an empty directory"):
        tune(
            first_jobs(lublin, 2000),
            backfill=Backfill.NONE,
            from_model=None,
            time_budget_s=240,
            workers=1,
            seed=1,
            out_dir=out,
            config=TINY,
        )


def test_a_heuristic_card_must_name_a_heuristic() -> None:
    card = {"name": "t", "version": "1", "domain": "hpc", "kind": "heuristic"}
    assert recommended_heuristic({**card, "recommendation": "SJF"}) == "sjf"
    with pytest.raises(HeuristicCardError, match="not a heuristic"):
        recommended_heuristic({**card, "recommendation": "nope"})
    with pytest.raises(HeuristicCardError, match="domain"):
        recommended_heuristic({**card, "domain": "gpu", "recommendation": "sjf"})


def test_a_start_model_that_is_no_ranking_model_is_refused(
    lublin: SwfTrace, tmp_path: Path
) -> None:
    with pytest.raises(TuneError, match="not an ES ranking model"):
        tune(
            first_jobs(lublin, 2000),
            backfill=Backfill.EASY,
            from_model=DATA.parent / "models" / "hpc-kernel" / "1",  # the PPO stepping model
            time_budget_s=60,
            workers=1,
            seed=0,
            out_dir=tmp_path / "x",
            config=TINY,
        )


def test_a_budget_that_ends_before_the_heuristics_ran_is_an_error(
    lublin: SwfTrace, tmp_path: Path
) -> None:
    out = tmp_path / "late"
    with pytest.raises(TuneError, match="ended before every heuristic was validated"):
        tune(
            first_jobs(lublin, 2000),
            backfill=Backfill.EASY,
            from_model=None,
            time_budget_s=1e-6,
            workers=1,
            seed=0,
            out_dir=out,
            config=TINY,
        )
    assert not out.exists()
