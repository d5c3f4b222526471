"""The one JSON form of a GPU snapshot and a GPU decision (round-trips exactly)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.domains.gpu.types import (
    Allocation,
    ClusterSnapshot,
    GpuDecision,
    GpuJob,
    Node,
    NodeState,
    Placement,
    PolicyRef,
)
from app.kernel.errors import SnapshotError

__all__ = ["decision_from_json", "decision_to_json", "state_from_json", "state_to_json"]


def _placements_to_json(ps: tuple[Placement, ...]) -> list[dict[str, Any]]:
    return [{"node_id": p.node_id, "gpus": p.tasks} for p in ps]


def _placements_from_json(raw: Any, where: str) -> tuple[Placement, ...]:
    if not isinstance(raw, list):
        raise SnapshotError(where, "must be a list of {node_id, gpus}")
    try:
        return tuple(Placement(str(p["node_id"]), int(p["gpus"])) for p in raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(where, f"each entry needs node_id and gpus ({exc})") from None


def state_to_json(state: ClusterSnapshot) -> dict[str, Any]:
    return {
        "now": state.now,
        "nodes": [
            {"id": n.id, "gpus": int(n.capacity.get("gpu", 0.0)), "state": n.state.value}
            for n in state.nodes
        ],
        "jobs": [
            {
                "id": j.id,
                "arrival": j.arrival,
                "min_gpus": j.min_gpus,
                "max_gpus": j.max_gpus,
                "tenant": j.tenant,
                "app": j.app,
                "estimate_s": j.estimate_s,
                "allocation": _placements_to_json(j.allocation),
                "attained_gpu_s": j.attained_gpu_s,
                "executed_s": j.executed_s,
                "starts": j.starts,
                "preemptions": j.preemptions,
                "restart_left_s": j.restart_left_s,
                "labels": dict(j.labels),
            }
            for j in state.jobs
        ],
    }


def state_from_json(raw: Mapping[str, Any]) -> ClusterSnapshot:
    try:
        nodes = tuple(
            Node(
                id=str(n["id"]),
                capacity={"gpu": float(n["gpus"])},
                state=NodeState(n.get("state", "up")),
            )
            for n in raw["nodes"]
        )
        jobs = tuple(
            GpuJob(
                id=str(j["id"]),
                arrival=float(j["arrival"]),
                min_gpus=int(j["min_gpus"]),
                max_gpus=int(j.get("max_gpus", j["min_gpus"])),
                tenant=str(j.get("tenant", "default")),
                app=j.get("app"),
                estimate_s=None if j.get("estimate_s") is None else float(j["estimate_s"]),
                allocation=_placements_from_json(j.get("allocation", []), f"jobs[{i}].allocation"),
                attained_gpu_s=float(j.get("attained_gpu_s", 0.0)),
                executed_s=float(j.get("executed_s", 0.0)),
                starts=int(j.get("starts", 0)),
                preemptions=int(j.get("preemptions", 0)),
                restart_left_s=float(j.get("restart_left_s", 0.0)),
                labels={str(k): str(v) for k, v in j.get("labels", {}).items()},
            )
            for i, j in enumerate(raw["jobs"])
        )
        return ClusterSnapshot(now=float(raw["now"]), nodes=nodes, jobs=jobs)
    except KeyError as exc:
        raise SnapshotError(str(exc.args[0]), "is required") from None
    except (TypeError, ValueError) as exc:
        raise SnapshotError("snapshot", str(exc)) from None


def _alloc_json(a: Allocation) -> dict[str, Any]:
    return {"job_id": a.job_id, "placements": _placements_to_json(a.placements)}


def decision_to_json(d: GpuDecision) -> dict[str, Any]:
    return {
        "policy": {"name": d.policy.name, "version": d.policy.version, "kind": d.policy.kind},
        "allocations": [_alloc_json(a) for a in d.allocations],
        "resizes": [_alloc_json(a) for a in d.resizes],
        "preemptions": list(d.preemptions),
        "reasons": dict(d.reasons),
    }


def decision_from_json(raw: Mapping[str, Any]) -> GpuDecision:
    def allocs(key: str) -> tuple[Allocation, ...]:
        return tuple(
            Allocation(str(a["job_id"]), _placements_from_json(a["placements"], key))
            for a in raw.get(key, [])
        )

    p = raw["policy"]
    return GpuDecision(
        policy=PolicyRef(str(p["name"]), str(p["version"]), str(p["kind"])),
        allocations=allocs("allocations"),
        resizes=allocs("resizes"),
        preemptions=tuple(str(x) for x in raw.get("preemptions", [])),
        reasons={str(k): str(v) for k, v in raw.get("reasons", {}).items()},
    )
