"""Seeded fuzzing of ``POST /v1/decide``: odd but schema-valid snapshots never produce a 500,
and every 200 respects the contract's invariants."""

from __future__ import annotations

import random
from collections import defaultdict

import httpx
import pytest

EDGE = [0.0, 1e-9, 0.5, 1.0, 3.0, 7.5, 64.0, 1e6, 1e15]


def _amount(rng: random.Random) -> float:
    return rng.choice(EDGE) if rng.random() < 0.3 else float(rng.randint(0, 32))


def _snapshot(rng: random.Random) -> dict:
    resources = ["cpu", "gpu", "mem"][: rng.randint(1, 3)]
    nodes = []
    for i in range(rng.randint(0, 5)):
        cap = {r: _amount(rng) for r in resources if rng.random() < 0.9}
        nodes.append(
            {
                "id": f"n{i}",
                "capacity": cap,
                "allocated": {r: v * rng.choice([0, 0, 0.5, 1]) for r, v in cap.items()},
                "state": rng.choice(["up", "up", "up", "down", "drain"]),
                "labels": {"kairos/x": "y"} if rng.random() < 0.2 else {},
            }
        )
    now = rng.choice([0.0, 1.0, 1.7e9, 9.9e10])
    pending = []
    for j in range(rng.randint(0, 12)):
        spec: dict = {
            "id": f"p{j}",
            "tasks": rng.choice([1, 1, 2, 3, 17]),
            "per_task": {r: _amount(rng) for r in resources if rng.random() < 0.8},
            "walltime_s": rng.choice([1e-6, 1.0, 60.0, 3600.0, 1e10]),
            "submit_time": rng.choice([0.0, now, max(0.0, now - 100.0)]),
            "priority": rng.randint(-5, 5),
        }
        if rng.random() < 0.2:
            spec["depends_on"] = [f"p{rng.randint(0, 12)}", "done"]
        if rng.random() < 0.2:
            spec["labels"] = {"kairos/single-node": "true"}
        pending.append(spec)
    return {
        "now": now,
        "nodes": nodes,
        "pending": [p for p in pending if p["id"] not in p.get("depends_on", [])],
        "finished": ["done"],
        "policy": rng.choice(["f1", "fcfs", "sjf", "wfp3", "unicep", "f4", "smallest"]),
        "backfill": rng.choice(["easy", "none"]),
        "placement": rng.choice(["first_fit", "best_fit", "tetris"]),
        "explain": rng.random() < 0.5,
    }


@pytest.mark.parametrize("seed", range(3))
async def test_decide_never_500s(client: httpx.AsyncClient, seed: int) -> None:
    rng = random.Random(seed)
    decided = 0
    for _ in range(25):
        body = _snapshot(rng)
        r = await client.post("/v1/decide", json=body)
        assert r.status_code in (200, 422), (body, r.text)
        if r.status_code != 200:
            continue
        decided += 1
        d = r.json()
        nodes = {n["id"]: n for n in body["nodes"]}
        jobs = {j["id"]: j for j in body["pending"]}
        used: dict[str, dict[str, float]] = defaultdict(dict)
        seen = set()
        for a in d["allocations"]:
            assert a["job_id"] not in seen
            seen.add(a["job_id"])
            job = jobs[a["job_id"]]
            assert sum(p["tasks"] for p in a["placements"]) == job["tasks"]
            assert set(job.get("depends_on", [])) <= {"done"}
            for p in a["placements"]:
                node = nodes[p["node_id"]]
                assert node["state"] == "up"
                u = used[p["node_id"]]
                for name, v in job["per_task"].items():
                    u[name] = u.get(name, 0.0) + v * p["tasks"]
        for node_id, u in used.items():
            node = nodes[node_id]
            for name, v in u.items():
                total = v + node["allocated"].get(name, 0.0)
                cap = node["capacity"].get(name, 0.0)
                assert total <= cap + 1e-9 * max(1.0, cap), (node_id, name, total, cap)
    assert decided > 10, "the fuzzer mostly produced invalid snapshots"
