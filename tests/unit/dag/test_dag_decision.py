"""DAG snapshots: validation (422 fields), one decision round, heuristics, codec, registry."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from app.domains import get_domain
from app.domains.dag import codec
from app.domains.dag.decision import decide
from app.domains.dag.heuristics import HEURISTIC_NAMES, WeightedFair, get_heuristic
from app.domains.dag.policy import JobView, RoundView, StageView
from app.domains.dag.types import (
    DagClusterState,
    DagSpec,
    DagState,
    StageProgress,
    StageSpec,
    validate_state,
)
from app.kernel.errors import SnapshotError, UnknownHeuristicError


def chain(
    dag_id: str, tasks: tuple[int, ...] = (4, 4, 1), dur: float = 1.0, submit: float = 0.0
) -> DagSpec:
    stages = tuple(
        StageSpec(f"s{i}", t, dur, depends_on=(f"s{i - 1}",) if i else ())
        for i, t in enumerate(tasks)
    )
    return DagSpec(dag_id, stages, submit_time=submit)


def state(*dags: DagState, executors: int = 10, free: int | None = None) -> DagClusterState:
    running = sum(p.running for d in dags for p in d.progress)
    return DagClusterState(
        now=0.0,
        executors=executors,
        free_slots=executors - running if free is None else free,
        dags=dags,
    )


# -- validation --------------------------------------------------------------------------------


def _field(st: DagClusterState) -> str:
    with pytest.raises(SnapshotError) as exc:
        validate_state(st)
    return exc.value.field


def test_cyclic_dag_is_refused_naming_the_stages() -> None:
    spec = DagSpec(
        "d",
        (
            StageSpec("a", 1, 1.0, depends_on=("c",)),
            StageSpec("b", 1, 1.0, depends_on=("a",)),
            StageSpec("c", 1, 1.0, depends_on=("b",)),
        ),
    )
    with pytest.raises(SnapshotError) as exc:
        validate_state(state(DagState(spec)))
    assert exc.value.field == "dags[0].spec.stages"
    assert "cyclic" in exc.value.message
    assert "a" in exc.value.message


def test_self_loop_is_a_cycle() -> None:
    spec = DagSpec("d", (StageSpec("a", 1, 1.0, depends_on=("a",)),))
    assert _field(state(DagState(spec))) == "dags[0].spec.stages"


def test_unknown_parent_names_the_depends_on_entry() -> None:
    spec = DagSpec("d", (StageSpec("a", 1, 1.0), StageSpec("b", 1, 1.0, depends_on=("a", "zz"))))
    assert _field(state(DagState(spec))) == "dags[0].spec.stages[1].depends_on[1]"


def test_duplicate_stage_id() -> None:
    spec = DagSpec("d", (StageSpec("a", 1, 1.0), StageSpec("a", 2, 1.0)))
    assert _field(state(DagState(spec))) == "dags[0].spec.stages[1].id"


def test_stage_larger_than_the_cluster() -> None:
    big = StageSpec("a", 3, 1.0, per_task=MappingProxyType({"cpu": 2.0}))
    st = DagClusterState(0.0, 4, 4, (DagState(DagSpec("d", (big,))),))
    with pytest.raises(SnapshotError) as exc:
        validate_state(st)
    assert exc.value.field == "dags[0].spec.stages[0].per_task"
    assert "larger than the cluster" in exc.value.message


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (DagSpec("d", ()), "dags[0].spec.stages"),
        (DagSpec("a:b", (StageSpec("a", 1, 1.0),)), "dags[0].spec.id"),
        (DagSpec("d", (StageSpec("a", 0, 1.0),)), "dags[0].spec.stages[0].tasks"),
        (DagSpec("d", (StageSpec("a", 1, 0.0),)), "dags[0].spec.stages[0].task_duration_s"),
        (
            DagSpec("d", (StageSpec("a", 1, 1.0, max_parallelism=0),)),
            "dags[0].spec.stages[0].max_parallelism",
        ),
    ],
)
def test_other_spec_errors(spec: DagSpec, field: str) -> None:
    assert _field(state(DagState(spec))) == field


def test_progress_errors() -> None:
    spec = chain("d")
    early = DagState(spec, (StageProgress("s1", launched=1, running=1),))
    assert _field(state(early)) == "dags[0].progress[0].launched"
    over = DagState(spec, (StageProgress("s0", launched=2, finished=1, running=2),))
    assert _field(state(over)) == "dags[0].progress[0].running"
    busy = DagState(spec, (StageProgress("s0", launched=4, running=4),))
    assert _field(state(busy, executors=4, free=1)) == "free_slots"
    dup = state(DagState(spec), DagState(spec))
    assert _field(dup) == "dags[1].spec.id"


# -- decisions ---------------------------------------------------------------------------------


def test_fair_splits_free_slots_between_dags() -> None:
    st = state(DagState(chain("a", (20, 1))), DagState(chain("b", (20, 1), submit=1.0)))
    d = decide(st, get_heuristic("fair"))
    assert [(g.dag_id, g.stage_id, g.slots) for g in d.allocations] == [
        ("a", "s0", 5),
        ("b", "s0", 5),
    ]
    assert d.idle_slots == 0
    assert d.reservations == ()


def test_fifo_gives_everything_to_the_first_dag() -> None:
    st = state(DagState(chain("a", (20, 1))), DagState(chain("b", (20, 1), submit=1.0)))
    d = decide(st, get_heuristic("fifo"))
    assert [(g.dag_id, g.slots) for g in d.allocations] == [("a", 10)]


def test_no_stage_gets_more_than_its_demand_and_children_wait_as_reservations() -> None:
    st = state(DagState(chain("a", (3, 4, 1))))
    d = decide(st, get_heuristic("fifo"))
    # s0 takes 3; s1's parent is then saturated, so s1 is reserved 4; s2 waits (s1 unsaturated
    # until then) and the rest of the slots can go to the sink only once s1 is saturated
    assert [(g.stage_id, g.slots) for g in d.allocations] == [("s0", 3)]
    assert [(g.stage_id, g.slots) for g in d.reservations] == [("s1", 4), ("s2", 1)]
    assert d.idle_slots == 2


def test_parallelism_limit_is_kept() -> None:
    stages = (StageSpec("s0", 50, 1.0, max_parallelism=3),)
    st = DagClusterState(
        0.0, 10, 8, (DagState(DagSpec("a", stages), (StageProgress("s0", 2, 0, 2),)),)
    )
    d = decide(st, get_heuristic("fifo"))
    assert [(g.stage_id, g.slots) for g in d.allocations] == [("s0", 1)]
    assert d.idle_slots == 7


def test_running_slots_count_against_demand_and_supply() -> None:
    prog = (StageProgress("s0", launched=5, finished=0, running=5),)
    st = state(DagState(chain("a", (6, 1)), prog), DagState(chain("b", (20, 1), submit=1.0)))
    d = decide(st, get_heuristic("fair"))
    # a runs 5 (its cap), one unlaunched task left is covered by no new slot; b gets its cap
    assert [(g.dag_id, g.slots) for g in d.allocations] == [("b", 5)]


def test_sjf_cp_prefers_the_smaller_dag_and_the_longest_path() -> None:
    small = DagSpec(
        "small",
        (
            StageSpec("x", 2, 1.0),
            StageSpec("y", 2, 5.0),
            StageSpec("z", 1, 1.0, depends_on=("y",)),
        ),
        submit_time=5.0,
    )
    st = state(DagState(chain("big", (100, 1))), DagState(small))
    d = decide(st, get_heuristic("sjf_cp"))
    assert (d.allocations[0].dag_id, d.allocations[0].stage_id) == ("small", "y")


def test_source_dag_keeps_its_slots() -> None:
    prog = (StageProgress("s0", launched=4, finished=4),)
    st = DagClusterState(
        0.0,
        10,
        4,
        (DagState(chain("a", (4, 8, 1)), prog), DagState(chain("b", (50, 1)))),
        trigger_dag="a",
    )
    d = decide(st, get_heuristic("fair"))
    assert [(g.dag_id, g.stage_id, g.slots) for g in d.allocations] == [("a", "s1", 4)]


def test_decision_is_deterministic_and_replays_through_the_codec() -> None:
    st = state(DagState(chain("a", (20, 3, 1))), DagState(chain("b", (7, 1), submit=1.0)))
    dom = get_domain("dag")
    again = dom.state_from_json(dom.state_to_json(st))
    assert again == st
    d1 = dom.decide(st, dom.heuristic("sjf_capped"))
    d2 = dom.decide(again, dom.heuristic("sjf_capped"))
    assert d1 == d2
    assert codec.decision_from_json(codec.decision_to_json(d1)) == d1
    # SJF order: the smaller DAG b first; each stage is also the job "{dag}:{stage}"
    assert [g["job_id"] for g in codec.decision_to_json(d1)["allocations"]] == ["b:s0", "a:s0"]


def test_codec_names_the_bad_field() -> None:
    raw = codec.state_to_json(state(DagState(chain("a"))))
    raw["dags"][0]["spec"]["stages"][1]["tasks"] = "four"
    with pytest.raises(SnapshotError) as exc:
        codec.state_from_json(raw)
    assert exc.value.field == "dags[0].spec.stages[1].tasks"


def test_registry() -> None:
    dom = get_domain("dag")
    assert dom.name == "dag"
    assert dom.default_fallback == "fair"
    assert dom.heuristic_names() == tuple(sorted(HEURISTIC_NAMES))


# -- heuristics on hand-made views -------------------------------------------------------------


def job(jid: str, supply: int, demands: list[int], dur: float = 100.0) -> JobView:
    stages = tuple(
        StageView(
            index=i,
            unlaunched=d,
            demand=d,
            selectable=d > 0,
            runnable=d > 0,
            finished=False,
            duration_ms=dur,
            children=(),
        )
        for i, d in enumerate(demands)
    )
    return JobView(jid, 0.0, supply, stages)


def view(*jobs: JobView, n: int = 12, source: int = 12, fair_count: str = "active") -> RoundView:
    return RoundView(jobs, None, source, n, fair_count)  # type: ignore[arg-type]


def test_fair_counts_jobs_per_view_mode() -> None:
    done = job("done", 2, [0])
    hungry = job("h", 0, [50])
    v_active = view(done, hungry, fair_count="active")
    v_unsat = view(done, hungry, fair_count="unsaturated")
    assert get_heuristic("fair").choose(v_active).executors == 6  # type: ignore[union-attr]
    assert get_heuristic("fair").choose(v_unsat).executors == 12  # type: ignore[union-attr]


def test_fifo_static_never_refunds() -> None:
    pol = get_heuristic("fifo_static")
    a = pol.choose(view(job("a", 0, [8]), job("b", 0, [50]), source=8))
    assert a is not None
    assert (a.job, a.executors) == (0, 8)
    # job a's executors went away (live supply 0) but its counter stays at 8
    b = pol.choose(view(job("a", 0, [20]), job("b", 0, [50]), source=12))
    assert b is not None
    assert (b.job, b.executors) == (0, 4)
    pol.reset()
    c = pol.choose(view(job("a", 0, [20]), job("b", 0, [50]), source=12))
    assert c is not None
    assert (c.job, c.executors) == (0, 12)


def test_fifo_live_supply_is_refunded() -> None:
    pol = get_heuristic("fifo")
    pol.choose(view(job("a", 0, [8]), source=8))
    b = pol.choose(view(job("a", 0, [20]), source=12))
    assert b is not None
    assert b.executors == 12


def test_weighted_fair_alpha() -> None:
    small, big = job("s", 0, [10], dur=100.0), job("b", 0, [90], dur=100.0)
    v = view(big, small, n=20, source=20)
    assert WeightedFair(alpha=0.0).caps(v) == [10, 10]
    assert WeightedFair(alpha=1.0).caps(v) == [18, 2]
    assert WeightedFair(alpha=-1.0).caps(v) == [2, 18]
    assert get_heuristic("weighted_fair(-1)").choose(v).executors == 2  # type: ignore[union-attr]


def test_packer_prefers_the_best_fitting_stage() -> None:
    light = StageView(0, 5, 5, True, True, False, 1.0, (), per_task=(0.2, 0.1))
    heavy = StageView(0, 5, 5, True, True, False, 1.0, (), per_task=(1.0, 0.5))
    v = RoundView(
        (JobView("a", 0.0, 0, (light,)), JobView("b", 1.0, 0, (heavy,))),
        None,
        4,
        4,
        "active",
        executor_capacity=(1.0, 1.0),
    )
    a = get_heuristic("packer").choose(v)
    assert a is not None
    assert a.job == 1
    assert a.executors == 2


def test_unknown_heuristic() -> None:
    with pytest.raises(UnknownHeuristicError):
        get_heuristic("nope")
    with pytest.raises(UnknownHeuristicError):
        get_heuristic("weighted_fair(abc)")
