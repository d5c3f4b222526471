"""Seeded fuzzing of ``POST /v1/decide`` with DAG snapshots: odd but schema-valid snapshots
(acyclic or not, consistent progress or not, tiny and huge amounts) never produce a 500, and
every 200 keeps the invariants: grants only to stages whose parents finished, at most each
stage's demand, never more slots than the nodes have free."""

from __future__ import annotations

import math
import random
from typing import Any

import httpx

EDGE = [0.5, 1.0, 2.0, 3.0, 7.5, 64.0, 1e6]


def _snapshot(rng: random.Random) -> dict[str, Any]:
    nodes = [
        {
            "id": f"n{i}",
            "capacity": {"cpu": rng.choice(EDGE)},
            "allocated": {"cpu": rng.choice([0.0, 1.0, 2.0])},
            "state": rng.choice(["up", "up", "drain", "down"]),
        }
        for i in range(rng.randint(0, 4))
    ]
    dags = []
    for d in range(rng.randint(0, 4)):
        stages = []
        for k in range(rng.randint(1, 5)):
            deps = [f"s{j}" for j in range(k) if rng.random() < 0.4]
            if rng.random() < 0.05:
                deps.append(f"s{k + 1}")  # a forward edge: maybe a cycle or an unknown stage
            stage: dict[str, Any] = {
                "id": f"s{k}",
                "tasks": rng.randint(1, 6),
                "per_task": {"cpu": rng.choice([0.5, 1.0, 1.0, 2.0])},
                "task_duration_s": rng.choice([0.1, 1.0, 30.0]),
                "depends_on": deps,
            }
            if rng.random() < 0.3:
                stage["max_parallelism"] = rng.randint(1, 3)
            stages.append(stage)
        progress = []
        for st in stages:
            if rng.random() < 0.5:
                launched = rng.randint(0, st["tasks"])
                finished = rng.randint(0, launched)
                running = launched - finished if rng.random() < 0.9 else launched + 1
                progress.append(
                    {
                        "stage_id": st["id"],
                        "launched": launched,
                        "finished": finished,
                        "running_slots": running,
                    }
                )
        dags.append(
            {
                "spec": {"id": f"d{d}", "submit_time": float(d), "stages": stages},
                "stage_progress": progress,
            }
        )
    body: dict[str, Any] = {
        "domain": "dag",
        "now": 100.0,
        "nodes": nodes,
        "executor_capacity": {"cpu": rng.choice([1.0, 1.0, 2.0])},
        "dags": dags,
        "policy": rng.choice(["fair", "fifo", "sjf_cp", "packer", "weighted_fair", "fifo_static"]),
        "explain": rng.random() < 0.5,
    }
    if dags and rng.random() < 0.3:
        body["trigger"] = {"type": "stage_released", "job_id": f"d{rng.randrange(len(dags))}:s0"}
    return body


def _free_slots(body: dict[str, Any]) -> int:
    slot = body["executor_capacity"]["cpu"]
    return sum(
        max(0, math.floor((n["capacity"]["cpu"] - n["allocated"]["cpu"]) / slot + 1e-9))
        for n in body["nodes"]
        if n["state"] == "up"
    )


def _check(body: dict[str, Any], answer: dict[str, Any]) -> None:
    specs = {d["spec"]["id"]: d for d in body["dags"]}
    granted = 0
    for alloc in answer["allocations"]:
        dag_id, _, stage_id = alloc["job_id"].partition(":")
        dag = specs[dag_id]
        stages = {s["id"]: s for s in dag["spec"]["stages"]}
        prog = {p["stage_id"]: p for p in dag["stage_progress"]}
        st = stages[stage_id]
        for parent in st["depends_on"]:
            assert prog.get(parent, {}).get("finished", 0) == stages[parent]["tasks"], alloc
        p = prog.get(stage_id, {"launched": 0, "running_slots": 0})
        slots = sum(x["tasks"] for x in alloc["placements"])
        demand = st["tasks"] - p["launched"] - p["running_slots"]
        if "max_parallelism" in st:
            demand = min(demand, st["max_parallelism"] - p["running_slots"])
        assert 1 <= slots <= demand, (alloc, demand)
        granted += slots
    granted += sum(r["slots"] for r in answer["reservations"])
    assert granted <= _free_slots(body)


async def test_dag_snapshots_never_500_and_keep_the_invariants(client: httpx.AsyncClient) -> None:
    rng = random.Random(22)
    statuses: dict[int, int] = {}
    for _ in range(80):
        body = _snapshot(rng)
        r = await client.post("/v1/decide", json=body)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code in (200, 422), r.text
        if r.status_code == 200:
            _check(body, r.json())
        else:
            assert r.json()["error"]["details"][0]["field"].startswith("body."), r.text
    assert statuses.get(200, 0) > 20, statuses
    assert statuses.get(422, 0) > 5, statuses
