"""The HPC snapshot and decision codec: the one JSON form of a :class:`ClusterState` and a
:class:`Decision` (the batching wire, the stored decision input and replay all use it).

Pure functions.  Decoding converts every value to its declared type and refuses (``CodecError``)
an integer outside +-2**63 or of another JSON type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.domains.hpc.types import (
    Allocation,
    ClusterState,
    Decision,
    Job,
    Node,
    NodeState,
    Placement,
    PolicyRef,
    Reservation,
    RunningJob,
)

__all__ = [
    "CodecError",
    "decision_from_json",
    "decision_to_json",
    "job_from_json",
    "job_to_json",
    "state_from_json",
    "state_to_json",
]


class CodecError(ValueError):
    """A wire form that cannot be decoded."""


#: Integers of a message (task counts, priorities, sizes) lie strictly within +-2**63.
_INT_BOUND: Final = 2**63


def _int(value: Any) -> int:
    """A JSON integer of a message, within :data:`_INT_BOUND` (a string, a float or a bool is
    refused: arithmetic on an unbounded count could overflow a float downstream)."""
    if type(value) is not int or not -_INT_BOUND < value < _INT_BOUND:
        raise CodecError(f"not a 64-bit integer: {value!r:.40}")
    return value


def _job(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "per_task": dict(job.per_task),
        "walltime_s": job.walltime_s,
        "submit_time": job.submit_time,
        "tasks": job.tasks,
        "priority": job.priority,
        "user": job.user,
        "queue": job.queue,
        "depends_on": list(job.depends_on),
        "labels": dict(job.labels),
    }


def _job_from(raw: Mapping[str, Any]) -> Job:
    # JSON object keys are always strings; values are converted (a foreign type fails here)
    return Job(
        str(raw["id"]),
        {k: float(v) for k, v in raw["per_task"].items()},
        float(raw["walltime_s"]),
        float(raw["submit_time"]),
        _int(raw["tasks"]),
        _int(raw["priority"]),
        raw.get("user"),
        raw.get("queue"),
        tuple(map(str, raw.get("depends_on", ()))),
        {k: str(v) for k, v in raw.get("labels", {}).items()},
    )


def _placements(placements: tuple[Placement, ...]) -> list[list[Any]]:
    return [[p.node_id, p.tasks] for p in placements]


def _placements_from(raw: list[list[Any]]) -> tuple[Placement, ...]:
    return tuple(Placement(str(n), _int(t)) for n, t in raw)


def state_to_json(state: ClusterState) -> dict[str, Any]:
    return {
        "now": state.now,
        "nodes": [
            {
                "id": n.id,
                "capacity": dict(n.capacity),
                "allocated": dict(n.allocated),
                "state": n.state.value,
                "labels": dict(n.labels),
            }
            for n in state.nodes
        ],
        "running": [
            {"job": _job(r.job), "placements": _placements(r.placements), "start": r.start_time}
            for r in state.running
        ],
        "pending": [_job(j) for j in state.pending],
        "finished": sorted(state.finished),
    }


def state_from_json(raw: Mapping[str, Any]) -> ClusterState:
    return ClusterState(
        now=float(raw["now"]),
        nodes=tuple(
            Node(
                id=str(n["id"]),
                capacity={k: float(v) for k, v in n["capacity"].items()},
                allocated={k: float(v) for k, v in n["allocated"].items()},
                state=NodeState(n["state"]),
                labels={k: str(v) for k, v in n.get("labels", {}).items()},
            )
            for n in raw["nodes"]
        ),
        running=tuple(
            RunningJob(_job_from(r["job"]), _placements_from(r["placements"]), float(r["start"]))
            for r in raw["running"]
        ),
        pending=tuple(_job_from(j) for j in raw["pending"]),
        finished=frozenset(str(f) for f in raw["finished"]),
    )


def decision_to_json(decision: Decision) -> dict[str, Any]:
    return {
        "allocations": [[a.job_id, _placements(a.placements)] for a in decision.allocations],
        "reservations": [[r.job_id, r.start_at] for r in decision.reservations],
        "queue_length": decision.queue_length,
        "policy": [decision.policy.name, decision.policy.version, decision.policy.kind],
        "explain": dict(decision.explain),
    }


def decision_from_json(raw: Mapping[str, Any]) -> Decision:
    name, version, kind = raw["policy"]
    return Decision(
        allocations=tuple(Allocation(str(j), _placements_from(p)) for j, p in raw["allocations"]),
        reservations=tuple(Reservation(str(j), float(t)) for j, t in raw["reservations"]),
        queue_length=_int(raw["queue_length"]),
        policy=PolicyRef(str(name), str(version), str(kind)),
        explain=dict(raw.get("explain") or {}),
    )


job_to_json = _job
job_from_json = _job_from
placements_to_json = _placements
placements_from_json = _placements_from
int_from_json = _int
