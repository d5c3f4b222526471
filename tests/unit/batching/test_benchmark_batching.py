"""benchmarks.batching: the batch counters read from /metrics and the verdicts it prints."""

from __future__ import annotations

from benchmarks import batching as bench
from benchmarks.decide import NO_DECISION, Result

PAGE = """# HELP kairos_batch_size Requests decided together in one batch.
# TYPE kairos_batch_size histogram
kairos_batch_size_bucket{le="1.0"} 4.0
kairos_batch_size_count 25.0
kairos_batch_size_sum 119.0
kairos_batch_size_created 1.7e+09
kairos_decision_latency_seconds_count{kind="onnx"} 40.0
"""


def test_the_batch_totals_are_the_histograms_sum_and_count() -> None:
    assert bench.parse_batch_totals(PAGE) == (119.0, 25.0)
    assert bench.parse_batch_totals("") == (0.0, 0.0)


def _result(rps: float, answered: int, fallbacks: int = 0, errors: int = 0) -> Result:
    return Result(
        rps=rps,
        p50_ms=10.0,
        p99_ms=20.0,
        fallback=fallbacks / answered,
        errors=errors,
        answered=answered,
        fallback_count=fallbacks,
        reasons={"deadline_exceeded": fallbacks} if fallbacks else {},
        cores="0.50",
        cpu_ms=2.0,
    )


def test_the_verdicts_follow_the_figures() -> None:
    cells = [
        bench.Cell("ceiling", _result(1000.0, 6000), None, 0),
        bench.Cell("embedded", _result(250.0, 1000, fallbacks=5), 6.0, 160),
        bench.Cell(NO_DECISION, _result(400.0, 1000), 1.0, 1000),
        bench.Cell("redis", _result(150.0, 1000, fallbacks=20), 1.5, 600),
        bench.Cell("ceiling", _result(1500.0, 9000), None, 0),
    ]
    text = "\n".join(bench.report(cells, 32, 6.0, "hpc-kernel"))
    assert "1250 req/s, mean of 1000 and 1500" in text
    assert "met: embedded: learned policy >= 99 % (99.5%) and mean batch >= 2 (6.00)" in text
    assert "NOT met: redis: learned policy >= 99 % (98.0%) and mean batch >= 2 (1.50)" in text
    assert "met: embedded >= 0.2 x ceiling (0.20; by CPU per request" in text
    assert "shares its cores: 1.00)" in text
    assert f"{NO_DECISION}: learned" not in text  # no verdict for the floor cell
    assert "deadline_exceeded 20" in text


def test_errors_count_against_the_learned_share() -> None:
    cell = bench.Cell("embedded", _result(100.0, 100, errors=2), 4.0, 25)
    assert cell.learned == 0.98
