from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.metrics import avg_bounded_slowdown
from app.domains.hpc.rlscheduler import sample_starts, simulate_sequence
from app.domains.hpc.simulate import simulate_kairos
from app.domains.hpc.swf import load_swf
from app.domains.hpc.types import Backfill
from sim import evaluate as ev
from sim.cli import main
from sim.evaluate import ROW_KEYS, EvalSpec, UnknownPolicyError, register_policy_loader

DATA = Path(__file__).resolve().parents[3] / "data"
LUBLIN1 = str(DATA / "lublin_256.swf.gz")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# issue 4: the --json row keys, spelled out here so that a change to ROW_KEYS fails a test
# (issue 21 adds start_job)
ISSUE_ROW_KEYS = {"trace", "policy", "backfill", "semantics", "sequences", "length", "seed",
                  "start_job", "bsld", "wait_s", "utilization", "per_sequence_bsld"}  # fmt: skip


def test_rlscheduler_cli_reproduces_published_cells(tmp_path, capsys):
    out = tmp_path / "rows.json"
    code = main(
        ["evaluate", "--trace", LUBLIN1, "--policies", "sjf,f1", "--backfill", "easy",
         "--semantics", "rlscheduler", "--sequences", "10", "--length", "1024", "--seed", "1",
         "--json", str(out)]
    )  # fmt: skip
    assert code == 0
    rows = json.loads(out.read_text())
    assert [tuple(r) for r in rows] == [ROW_KEYS, ROW_KEYS]
    assert all(set(r) == ISSUE_ROW_KEYS for r in rows)
    assert {(r["trace"], r["backfill"], r["semantics"]) for r in rows} == {
        ("lublin_256", "easy", "rlscheduler")
    }
    assert {(r["sequences"], r["length"], r["seed"]) for r in rows} == {(10, 1024, 1)}
    assert [r["policy"] for r in rows] == ["sjf", "f1"]
    assert [round(r["bsld"], 2) for r in rows] == [73.31, 75.07]
    assert [round(r["utilization"], 3) for r in rows] == [0.778, 0.840]
    assert len(rows[0]["per_sequence_bsld"]) == 10
    assert "sjf" in capsys.readouterr().out


def test_kairos_cli_with_workers_and_report(tmp_path):
    out, report = tmp_path / "rows.json", tmp_path / "report"
    argv = ["evaluate", "--trace", LUBLIN1, "--policies", "fcfs,sjf", "--backfill", "easy",
            "--semantics", "kairos", "--sequences", "2", "--length", "40", "--seed", "3",
            "--json", str(out), "--report", str(report)]  # fmt: skip
    assert main([*argv, "--workers", "2"]) == 0
    parallel = json.loads(out.read_text())
    assert main(argv) == 0
    assert json.loads(out.read_text()) == parallel  # same numbers, serial or parallel
    assert {r["semantics"] for r in parallel} == {"kairos"}
    assert (report / "report.md").read_text().count("| fcfs |") == 2
    assert (report / "bsld_per_policy.png").stat().st_size > 0
    assert (report / "wait_cdf.png").stat().st_size > 0
    for png in ("bsld_per_policy.png", "wait_cdf.png"):
        assert (report / png).read_bytes()[:8] == PNG_MAGIC
        assert f"{png}" in (report / "report.md").read_text()
    assert all(set(r) == ISSUE_ROW_KEYS for r in parallel)


def test_workers_use_a_process_pool_and_slice_bounds_the_starts(tmp_path, monkeypatch):
    pools: list[int] = []
    slices: list[tuple[int, list[int]]] = []
    real_context, real_starts = ev.multiprocessing.get_context, ev.sample_starts

    class SpyContext:
        def __init__(self, method: str) -> None:
            self._ctx = real_context(method)

        def Pool(self, processes: int):  # noqa: N802 (multiprocessing's name)
            pools.append(processes)
            return self._ctx.Pool(processes=processes)

    def spy_starts(*args, **kwargs):
        starts = real_starts(*args, **kwargs)
        slices.append((kwargs["batch_slice"], starts))
        return starts

    monkeypatch.setattr(ev.multiprocessing, "get_context", SpyContext)
    monkeypatch.setattr(ev, "sample_starts", spy_starts)
    out = tmp_path / "rows.json"
    code = main(
        ["evaluate", "--trace", LUBLIN1, "--policies", "sjf", "--backfill", "none",
         "--semantics", "rlscheduler", "--sequences", "3", "--length", "32", "--seed", "5",
         "--slice", "100", "--workers", "2", "--json", str(out)]
    )  # fmt: skip
    assert code == 0
    assert pools == [2]
    ((batch_slice, starts),) = slices
    assert batch_slice == 100
    assert all(32 <= s < 100 - 32 - 1 for s in starts)
    (row,) = json.loads(out.read_text())
    assert (row["backfill"], row["semantics"], row["seed"]) == ("none", "rlscheduler", 5)
    trace = load_swf(LUBLIN1)
    direct = [avg_bounded_slowdown(simulate_sequence(trace, s, 32, "sjf", backfill=False))
              for s in starts]  # fmt: skip
    assert row["per_sequence_bsld"] == pytest.approx(direct)


def test_unknown_policy_is_a_clear_error(tmp_path, capsys, monkeypatch):
    # no loader registered by an earlier test of the session (the kairos dispatcher registers one)
    monkeypatch.setattr(ev, "_loaders", [])
    code = main(
        ["evaluate", "--trace", LUBLIN1, "--policies", "fcfs,my-model", "--json",
         str(tmp_path / "x.json"), "--sequences", "1", "--length", "32"]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown policy 'my-model'" in err
    assert "no policy loader is registered" in err
    assert not (tmp_path / "x.json").exists()


def test_learned_policies_are_refused_under_rlscheduler_semantics():
    with pytest.raises(UnknownPolicyError, match="--semantics kairos"):
        ev.resolve_policy("my-model", "rlscheduler")


def test_registered_loader_resolves_a_policy_name(monkeypatch):
    monkeypatch.setattr(ev, "_loaders", [])
    sjf = get_heuristic("sjf")
    register_policy_loader(lambda name: sjf if name == "shortest@1" else None)
    assert ev.resolve_policy("shortest@1", "kairos") is sjf
    with pytest.raises(UnknownPolicyError, match="no registered policy loader knows it"):
        ev.resolve_policy("other", "kairos")
    spec = EvalSpec(LUBLIN1, ("shortest@1",), Backfill.NONE, "kairos", 1, 32, 0)
    result = ev.evaluate(spec, progress=False)
    assert result.rows[0]["policy"] == "shortest@1"


def test_bad_arguments_exit_with_usage_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--trace", str(tmp_path / "missing.swf"), "--policies", "fcfs",
              "--json", str(tmp_path / "o.json")])  # fmt: skip
    assert exc.value.code == 2


class _Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_bar_shows_on_a_terminal_only(monkeypatch, tty):
    stderr = _Terminal(tty)
    monkeypatch.setattr(sys, "stderr", stderr)
    spec = EvalSpec(LUBLIN1, ("fcfs", "sjf"), Backfill.NONE, "kairos", 2, 32, 0)
    ev.evaluate(spec)
    shown = stderr.getvalue()
    if tty:
        assert "evaluate" in shown
        assert "4/4" in shown  # one tick per (policy, sequence)
    else:
        assert shown == ""


def test_start_job_draws_every_window_from_jobs_at_or_after_it(tmp_path):
    out = tmp_path / "rows.json"
    argv = ["evaluate", "--trace", LUBLIN1, "--policies", "fcfs,sjf", "--backfill", "easy",
            "--semantics", "kairos", "--sequences", "6", "--length", "48", "--seed", "3",
            "--start-job", "6000", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads(out.read_text())
    assert {r["start_job"] for r in rows} == {6000}
    spec = EvalSpec(LUBLIN1, ("sjf",), Backfill.EASY, "kairos", 6, 48, 3, start_job=6000)
    result = ev.evaluate(spec, progress=False)
    assert all(6000 <= s <= 10000 - 48 - 2 for s in result.starts)
    assert len(set(result.starts)) > 1
    # deterministic for a seed, another seed draws other windows
    assert ev.evaluate(spec, progress=False).starts == result.starts
    other = EvalSpec(LUBLIN1, ("sjf",), Backfill.EASY, "kairos", 6, 48, 4, start_job=6000)
    assert ev.evaluate(other, progress=False).starts != result.starts
    # the rows are the policies run on exactly those windows
    trace = load_swf(LUBLIN1)
    config = DecisionConfig(backfill=Backfill.EASY)
    direct = [avg_bounded_slowdown(simulate_kairos(trace, s, 48, get_heuristic("sjf"),
                                                   config=config, pooled=True))
              for s in result.starts]  # fmt: skip
    assert rows[1]["per_sequence_bsld"] == pytest.approx(direct)
    assert result.rows[0]["per_sequence_bsld"] == rows[1]["per_sequence_bsld"]


@pytest.mark.parametrize("seed", [1, 3, 7])
@pytest.mark.parametrize("batch_slice", [0, 3000])
def test_start_job_zero_keeps_the_rlscheduler_starts(seed, batch_slice):
    expected = sample_starts(10000, 256, 10, seed, batch_slice=batch_slice)
    assert ev.window_starts(10000, 256, 10, seed, batch_slice=batch_slice) == expected
    assert ev.window_starts(10000, 256, 10, seed, batch_slice=batch_slice, start_job=0) == expected
    # below the protocol's own lower bound (length) it changes nothing either
    assert ev.window_starts(10000, 256, 10, seed, batch_slice=batch_slice, start_job=200) == (
        expected
    )
    later = ev.window_starts(10000, 256, 10, seed, batch_slice=batch_slice, start_job=1000)
    assert min(later) >= 1000
    assert later != expected


def test_start_job_within_the_slice_and_the_json_default(tmp_path):
    starts = ev.window_starts(10000, 32, 20, 5, batch_slice=500, start_job=300)
    assert all(300 <= s < 500 - 32 - 1 for s in starts)
    out = tmp_path / "rows.json"
    argv = ["evaluate", "--trace", LUBLIN1, "--policies", "fcfs", "--sequences", "1",
            "--length", "32", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(out.read_text())[0]["start_job"] == 0


@pytest.mark.parametrize(
    "extra", [["--start-job", "9990"], ["--start-job", "9000", "--slice", "5000"]]
)
def test_a_start_job_without_room_for_a_window_is_a_clear_error(tmp_path, capsys, extra):
    out = tmp_path / "rows.json"
    code = main(
        ["evaluate", "--trace", LUBLIN1, "--policies", "fcfs", "--sequences", "2",
         "--length", "64", "--json", str(out), *extra]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "--start-job" in err
    assert "too few jobs" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_negative_start_job_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--trace", LUBLIN1, "--policies", "fcfs", "--start-job", "-1",
              "--json", str(tmp_path / "o.json")])  # fmt: skip
    assert exc.value.code == 2
    assert "--start-job must be >= 0" in capsys.readouterr().err
