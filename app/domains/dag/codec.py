"""JSON forms of the DAG domain's snapshot and decision (round-trip exact:
``state_from_json(state_to_json(s)) == s``).  Malformed input raises
:class:`~app.kernel.errors.SnapshotError` naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from app.domains.dag.types import (
    DEFAULT_PER_TASK,
    DagClusterState,
    DagDecision,
    DagSpec,
    DagState,
    StageGrant,
    StageProgress,
    StageSpec,
)
from app.kernel.errors import SnapshotError
from app.kernel.types import Resources

__all__ = ["decision_from_json", "decision_to_json", "state_from_json", "state_to_json"]


def _res(raw: Any, at: str) -> Resources:
    if raw is None:
        return DEFAULT_PER_TASK
    if not isinstance(raw, Mapping):
        raise SnapshotError(at, "must be an object of resource amounts")
    try:
        return MappingProxyType({str(k): float(v) for k, v in raw.items()})
    except (TypeError, ValueError):
        raise SnapshotError(at, "resource amounts must be numbers") from None


def _get(raw: Mapping[str, Any], key: str, at: str) -> Any:
    try:
        return raw[key]
    except (KeyError, TypeError):
        raise SnapshotError(f"{at}.{key}" if at else key, "is required") from None


def _int(v: Any, at: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError(at, f"must be an integer, got {v!r}")
    return v


def _num(v: Any, at: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SnapshotError(at, f"must be a number, got {v!r}")
    return float(v)


def _stage_json(s: StageSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": s.id,
        "tasks": s.tasks,
        "task_duration_s": s.task_duration_s,
        "depends_on": list(s.depends_on),
        "per_task": dict(s.per_task),
    }
    if s.max_parallelism is not None:
        out["max_parallelism"] = s.max_parallelism
    return out


def _stage(raw: Mapping[str, Any], at: str) -> StageSpec:
    mp = raw.get("max_parallelism")
    deps = raw.get("depends_on", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise SnapshotError(f"{at}.depends_on", "must be a list of stage ids")
    return StageSpec(
        id=str(_get(raw, "id", at)),
        tasks=_int(_get(raw, "tasks", at), f"{at}.tasks"),
        task_duration_s=_num(_get(raw, "task_duration_s", at), f"{at}.task_duration_s"),
        depends_on=tuple(deps),
        per_task=_res(raw.get("per_task"), f"{at}.per_task"),
        max_parallelism=None if mp is None else _int(mp, f"{at}.max_parallelism"),
    )


def state_to_json(state: DagClusterState) -> dict[str, Any]:
    return {
        "now": state.now,
        "executors": state.executors,
        "free_slots": state.free_slots,
        "executor_capacity": dict(state.executor_capacity),
        "trigger_dag": state.trigger_dag,
        "dags": [
            {
                "spec": {
                    "id": d.spec.id,
                    "submit_time": d.spec.submit_time,
                    "stages": [_stage_json(s) for s in d.spec.stages],
                },
                "progress": [
                    {
                        "stage_id": p.stage_id,
                        "launched": p.launched,
                        "finished": p.finished,
                        "running": p.running,
                    }
                    for p in d.progress
                ],
            }
            for d in state.dags
        ],
    }


def state_from_json(raw: Mapping[str, Any]) -> DagClusterState:
    dags: list[DagState] = []
    raw_dags = raw.get("dags", [])
    if not isinstance(raw_dags, list):
        raise SnapshotError("dags", "must be a list")
    for i, d in enumerate(raw_dags):
        at = f"dags[{i}]"
        spec_raw = _get(d, "spec", at)
        stages_raw = _get(spec_raw, "stages", f"{at}.spec")
        if not isinstance(stages_raw, list):
            raise SnapshotError(f"{at}.spec.stages", "must be a list")
        spec = DagSpec(
            id=str(_get(spec_raw, "id", f"{at}.spec")),
            stages=tuple(_stage(s, f"{at}.spec.stages[{k}]") for k, s in enumerate(stages_raw)),
            submit_time=_num(spec_raw.get("submit_time", 0.0), f"{at}.spec.submit_time"),
        )
        progress = tuple(
            StageProgress(
                stage_id=str(_get(p, "stage_id", f"{at}.progress[{k}]")),
                launched=_int(p.get("launched", 0), f"{at}.progress[{k}].launched"),
                finished=_int(p.get("finished", 0), f"{at}.progress[{k}].finished"),
                running=_int(p.get("running", 0), f"{at}.progress[{k}].running"),
            )
            for k, p in enumerate(d.get("progress", []))
        )
        dags.append(DagState(spec, progress))
    trigger = raw.get("trigger_dag")
    return DagClusterState(
        now=_num(raw.get("now", 0.0), "now"),
        executors=_int(_get(raw, "executors", ""), "executors"),
        free_slots=_int(_get(raw, "free_slots", ""), "free_slots"),
        dags=tuple(dags),
        executor_capacity=_res(raw.get("executor_capacity"), "executor_capacity"),
        trigger_dag=None if trigger is None else str(trigger),
    )


def _grant_json(g: StageGrant) -> dict[str, Any]:
    return {
        "job_id": f"{g.dag_id}:{g.stage_id}",
        "dag_id": g.dag_id,
        "stage_id": g.stage_id,
        "slots": g.slots,
        "parallelism_limit": g.parallelism_limit,
        "score": g.score,
    }


def _grant(raw: Mapping[str, Any]) -> StageGrant:
    score = raw.get("score")
    return StageGrant(
        dag_id=str(raw["dag_id"]),
        stage_id=str(raw["stage_id"]),
        slots=int(raw["slots"]),
        parallelism_limit=int(raw["parallelism_limit"]),
        score=None if score is None else float(score),
    )


def decision_to_json(decision: DagDecision) -> dict[str, Any]:
    return {
        "policy": decision.policy,
        "allocations": [_grant_json(g) for g in decision.allocations],
        "reservations": [_grant_json(g) for g in decision.reservations],
        "idle_slots": decision.idle_slots,
    }


def decision_from_json(raw: Mapping[str, Any]) -> DagDecision:
    return DagDecision(
        policy=str(raw["policy"]),
        allocations=tuple(_grant(g) for g in raw.get("allocations", [])),
        reservations=tuple(_grant(g) for g in raw.get("reservations", [])),
        idle_slots=int(raw["idle_slots"]),
    )
