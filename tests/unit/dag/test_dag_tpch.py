"""V1-V2: the TPC-H loader and the duration sampler (spec 1.2-1.4, Appendices A and D)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest

from app.domains.dag.tpch import (
    QUERY_SIZES,
    WARMUP_DELAY_MS,
    StageRecord,
    TpchLibrary,
    clean_record,
    executor_interval,
    sample_executor_key,
    sample_task_duration,
)
from sim.dag_data import DEFAULT_TPCH, load_tpch

STAGES_PER_QUERY = [4, 18, 6, 6, 14, 2, 13, 18, 14, 9, 11, 6, 7, 4, 7, 9, 6, 8, 4, 12, 16, 8]
TASKS_PER_SIZE = {
    "2g": 20065,
    "5g": 20479,
    "10g": 21188,
    "20g": 22684,
    "50g": 27157,
    "80g": 31657,
    "100g": 34660,
}
Q1_TASKS = [417, 434, 463, 522, 700, 879, 998]
MEAN_WORK_PER_SIZE_S = [203, 269, 380, 589, 1152, 1743, 2209]


@pytest.fixture(scope="module")
def lib() -> TpchLibrary:
    return load_tpch()


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    with gzip.open(DEFAULT_TPCH, "rt", encoding="utf-8") as fh:
        out: dict[str, Any] = json.load(fh)
    return out


def test_154_dags_with_the_json_task_counts(lib: TpchLibrary, raw: dict[str, Any]) -> None:
    assert len(lib) == 154
    for (size, q), dag in lib.dags.items():
        nodes = raw[size][str(q)]["nodes"]
        assert [s.num_tasks for s in dag.stages] == [n["num_tasks"] for n in nodes]


def test_structure_per_spec_1_2(lib: TpchLibrary) -> None:
    for q in range(1, 23):
        edges = {lib.get(size, q).edges for size in QUERY_SIZES}
        assert len(edges) == 1, f"Q{q}: adjacency differs between sizes"
        dag = lib.get("2g", q)
        assert len(dag.stages) == STAGES_PER_QUERY[q - 1]
        assert all(p < c for p, c in dag.edges), "node indices are a topological order"
        sinks = set(range(len(dag.stages))) - {p for p, _ in dag.edges}
        assert len(sinks) == 1
    for size, total in TASKS_PER_SIZE.items():
        assert sum(lib.get(size, q).total_tasks() for q in range(1, 23)) == total
    assert [lib.get(s, 1).total_tasks() for s in QUERY_SIZES] == Q1_TASKS


def test_task_count_uses_the_first_key_q15_node6(lib: TpchLibrary) -> None:
    assert [lib.get(s, 15).stages[6].num_tasks for s in QUERY_SIZES] == [2, 2, 2, 2, 1, 2, 2]


def test_work_totals_of_appendix_a(lib: TpchLibrary) -> None:
    works = [d.work_ms() / 1000 for d in lib.dags.values()]
    assert np.mean(works) == pytest.approx(935.0, abs=0.5)
    assert np.median(works) == pytest.approx(546.2, abs=0.5)
    per_size = [
        np.mean([lib.get(s, q).work_ms() / 1000 for q in range(1, 23)]) for s in QUERY_SIZES
    ]
    assert np.round(per_size).tolist() == MEAN_WORK_PER_SIZE_S


def test_cleaning_is_a_multiset_difference_with_gap_fill() -> None:
    first = {2: [5, 5, 7], 5: [9], 10: [3, 3]}
    fresh = {2: [5], 5: [9], 10: []}
    rest = {2: [1], 5: [], 10: []}
    cleaned, rough = clean_record(first, rest, fresh)
    assert cleaned[2] == (5, 7)  # one fresh 5 removes one first-wave 5
    assert cleaned[5] == (5, 7)  # emptied key inherits the next smaller key's list
    assert cleaned[10] == (3, 3)
    samples = [5, 7, 5, 7, 3, 3, 1, 5, 9]
    assert rough == pytest.approx(np.mean(samples))


def test_six_q6_records_without_key_100_use_their_largest_key(lib: TpchLibrary) -> None:
    st = lib.get("2g", 6).stages[0]
    assert max(st.first_wave) == 13
    assert sample_executor_key(st, 100, lambda w: 1) == 13


def test_executor_intervals() -> None:
    assert executor_interval(1) == (5, 5)
    assert executor_interval(5) == (5, 5)
    assert executor_interval(7) == (5, 10)
    assert executor_interval(40) == (40, 40)
    assert executor_interval(45) == (40, 50)
    assert executor_interval(100) == (100, 100)
    assert executor_interval(250) == (100, 100)


@pytest.mark.parametrize(("n", "left", "right"), [(7, 5, 10), (23, 20, 40), (93, 80, 100)])
def test_key_frequencies_follow_the_far_point_rule(n: int, left: int, right: int) -> None:
    record = StageRecord(
        num_tasks=1,
        first_wave=dict.fromkeys((5, 10, 20, 40, 50, 60, 80, 100), (1,)),
        rest_wave={},
        fresh={},
        rough_duration_ms=1.0,
    )
    rng = np.random.default_rng(0)
    draws = 100_000
    counts = Counter(
        sample_executor_key(record, n, lambda w: 1 + int(rng.random() * w)) for _ in range(draws)
    )
    assert set(counts) == {left, right}
    p_left = (n - left) / (right - left)
    assert counts[left] / draws == pytest.approx(p_left, abs=0.005)


def test_duration_branches() -> None:
    record = StageRecord(
        num_tasks=4,
        first_wave={5: (100,), 10: (200,)},
        rest_wave={5: (10,), 10: ()},
        fresh={5: (1000,), 10: ()},
        rough_duration_ms=1.0,
    )

    def pick(n: int) -> int:
        return 0

    def dur(key: int, fresh: bool, same: bool) -> int:
        return sample_task_duration(record, key, fresh_to_job=fresh, same_stage=same, pick=pick)

    assert dur(5, True, False) == 1000  # fresh executor: fresh list
    assert dur(10, True, False) == 200 + WARMUP_DELAY_MS  # no fresh sample: first + warm-up
    assert dur(5, False, True) == 10  # continuing its stage: rest wave
    assert dur(10, False, True) == 200  # no rest sample: first wave
    assert dur(5, False, False) == 100  # new to the stage: first wave


def test_duration_draws_are_uniform_over_the_list() -> None:
    record = StageRecord(1, {5: (1, 2, 3, 4)}, {}, {}, 1.0)
    rng = np.random.default_rng(1)
    counts = Counter(
        sample_task_duration(
            record, 5, fresh_to_job=False, same_stage=False, pick=lambda n: int(rng.integers(n))
        )
        for _ in range(40_000)
    )
    assert sorted(counts) == [1, 2, 3, 4]
    assert all(abs(c / 40_000 - 0.25) < 0.01 for c in counts.values())
