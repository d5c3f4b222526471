"""``state_from_request`` builds the domain snapshot straight from the validated ``/v1/decide``
body: every job is the ``Job`` that the general conversion (``job_from_spec`` of the job's
JSON form, with the default submit time filled in) gives, and every node keeps its fields."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.kernel.types import NodeState
from app.schemas.decision import DecideRequest
from app.services.convert import job_from_spec
from app.services.hpc_rounds import state_from_request

NOW = 1_000_000.0

ids = st.text(alphabet="abcdefgh0123", min_size=1, max_size=6)
text = st.none() | st.text(alphabet="xyz", min_size=1, max_size=4)


@st.composite
def job_json(draw: st.DrawFn, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": job_id,
        "per_task": draw(
            st.dictionaries(
                st.sampled_from(["cpu", "mem", "gpu"]),
                st.integers(1, 64) | st.floats(0.5, 64.0),
                min_size=1,
            )
        ),
        "walltime_s": draw(st.floats(1.0, 1e5)),
    }
    optional: dict[str, Any] = {
        "tasks": st.integers(1, 8),
        "submit_time": st.floats(0.0, NOW),
        "priority": st.integers(-5, 5),
        "user": text,
        "queue": text,
        "depends_on": st.lists(ids, max_size=3),
        "labels": st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["1", "2"])),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            job[name] = draw(strategy)
    return job


@st.composite
def body_json(draw: st.DrawFn) -> dict[str, Any]:
    nodes = [
        {
            "id": f"n{k}",
            "capacity": {"cpu": 64, "mem": 256},
            "allocated": {"cpu": draw(st.integers(0, 8))},
            "state": draw(st.sampled_from([s.value for s in NodeState])),
            "labels": draw(st.dictionaries(st.sampled_from(["zone"]), st.sampled_from(["a"]))),
        }
        for k in range(draw(st.integers(1, 3)))
    ]
    pending = [draw(job_json(f"p{i}")) for i in range(draw(st.integers(0, 5)))]
    running = [
        {
            "job": {**draw(job_json(f"r{i}")), "tasks": 1},
            "placements": [{"node_id": "n0", "tasks": 1}],
            "start_time": NOW - 10.0,
        }
        for i in range(draw(st.integers(0, 2)))
    ]
    return {
        "now": NOW,
        "nodes": nodes,
        "pending": pending,
        "running": running,
        "finished": draw(st.lists(ids, max_size=3)),
    }


def _general(job: dict[str, Any], default_submit: float) -> Any:
    model = DecideRequest.model_validate(
        {"now": NOW, "nodes": [{"id": "n", "capacity": {"cpu": 1}}], "pending": [job]}
    ).pending[0]
    dumped = model.model_dump()
    if dumped["submit_time"] is None:
        dumped["submit_time"] = default_submit
    return job_from_spec(dumped)


@settings(max_examples=60, deadline=None)
@given(body_json())
def test_the_snapshot_is_what_the_general_conversion_gives(raw: dict[str, Any]) -> None:
    state = state_from_request(DecideRequest.model_validate(raw))
    assert state.now == NOW
    assert [_general(j, NOW) for j in raw["pending"]] == list(state.pending)
    for r, rj in zip(raw["running"], state.running, strict=True):
        assert rj.job == _general(r["job"], r["start_time"])
        assert rj.start_time == r["start_time"]
        assert [(p.node_id, p.tasks) for p in rj.placements] == [("n0", 1)]
    assert len(state.running) == len(raw["running"])
    for n, node in zip(raw["nodes"], state.nodes, strict=True):
        assert node.id == n["id"]
        assert node.state is NodeState(n["state"])
        assert dict(node.capacity) == n["capacity"]
        assert dict(node.allocated) == n["allocated"]
        assert dict(node.labels) == n["labels"]
    assert state.finished == frozenset(raw["finished"])


def test_a_job_without_dependencies_holds_an_empty_tuple() -> None:
    body = DecideRequest.model_validate(
        {
            "now": NOW,
            "nodes": [{"id": "n", "capacity": {"cpu": 1}}],
            "pending": [
                {"id": "a", "per_task": {"cpu": 1}, "walltime_s": 1.0},
                {"id": "b", "per_task": {"cpu": 1}, "walltime_s": 1.0, "depends_on": ["a"]},
            ],
        }
    )
    a, b = state_from_request(body).pending
    assert a.depends_on == ()
    assert a.submit_time == NOW
    assert b.depends_on == ("a",)
