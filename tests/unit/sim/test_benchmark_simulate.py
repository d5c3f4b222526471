"""Smoke test: benchmarks/simulate.py (issue 4) still runs and reports the rates it promises,
on a tiny input so that the test stays fast (the figures themselves come from ``make bench``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.domains.hpc.swf import load_swf
from benchmarks import simulate as bench

DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.fixture(scope="module")
def trace():
    return load_swf(DATA / "lublin_256.swf.gz")


def test_the_benchmark_targets_are_the_issues():
    assert bench.LUBLIN1.is_file()
    assert bench.KTH_DEFAULT.name == "KTH-SP2-1996-2.1-cln.swf.gz"
    assert bench.PUBLISHED == {("sjf", False): 85_000.0, ("sjf", True): 47_000.0,
                               ("f1", False): 16_000.0, ("f1", True): 29_000.0}  # fmt: skip
    assert bench.PUBLISHED_ENV_STEPS == 4_100.0
    assert bench.TARGET_FACTOR == 10.0


def test_rlscheduler_rates_for_sjf_easy_and_f1(trace, capsys):
    bench.bench_rlscheduler("Lublin-1", trace, [1981, 2756], 64, 1, with_reference=True)
    out = capsys.readouterr().out
    assert "Lublin-1: 2 x 64 jobs" in out
    for policy, backfill in [("sjf", "easy"), ("sjf", "none"), ("f1", "easy"), ("f1", "none")]:
        row = re.search(rf"^{policy}\s+{backfill}\s+([\d,.]+)k\s", out, re.MULTILINE)
        assert row, (policy, backfill, out)
        assert float(row.group(1).replace(",", "")) > 0


def test_environment_step_rates(trace, capsys):
    bench.bench_env(trace, 20)
    bench.bench_vector_env(trace, 16, sizes=(1, 4))
    out = capsys.readouterr().out
    assert re.search(r"SchedulingEnv .*: [\d,]+ steps/s CPU", out), out
    assert re.search(r"^\s+4 envs: +[\d,]+ steps/s CPU", out, re.MULTILINE), out


def test_kairos_rates_come_from_the_core_engine(trace, capsys):
    bench.bench_kairos(trace, [1981, 2756], 64, 1)
    out = capsys.readouterr().out
    assert "Lublin-1 2 x 64 jobs through the core" in out
    assert "kairos_fast" not in out
    for policy, backfill in [("f1", "easy"), ("sjf", "easy")]:
        row = re.search(rf"^{policy}\s+{backfill}\s+([\d,.]+)k\s.*(met|MISSED)$", out, re.M)
        assert row, (policy, backfill, out)
        assert float(row.group(1).replace(",", "")) > 0
