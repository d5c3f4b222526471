"""``POST /v1/decide`` with ``domain: "gpu"``: the GPU snapshot decided through
:mod:`app.domains.gpu`, stored, returned with its input and replayed to the same answer; the hpc
shape unchanged (with or without ``domain: "hpc"``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.schemas.decision import DECIDE_EXAMPLE
from app.schemas.gpu import GPU_DECIDE_EXAMPLE

NOW = 1_767_225_600.0


def snapshot(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "domain": "gpu",
        "now": NOW,
        "nodes": [{"id": "n1", "gpus": 4}, {"id": "n2", "gpus": 4}],
        "jobs": [
            {
                "id": "long",
                "arrival": NOW - 20_000,
                "min_gpus": 4,
                "allocation": [{"node_id": "n1", "gpus": 4}],
                "attained_gpu_s": 60_000.0,
                "executed_s": 15_000.0,
                "starts": 1,
            },
            {
                "id": "mid",
                "arrival": NOW - 10_000,
                "min_gpus": 4,
                "allocation": [{"node_id": "n2", "gpus": 4}],
                "attained_gpu_s": 100.0,
                "executed_s": 25.0,
                "starts": 1,
            },
            {"id": "new", "arrival": NOW - 10, "min_gpus": 4},
        ],
        "policy": "tiresias-2dlas",
        "explain": True,
    }
    body.update(extra)
    return body


async def test_gpu_snapshot_is_decided_with_preemption(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/decide", json=snapshot())
    assert r.status_code == 200, r.text
    d = r.json()
    # 2D-LAS: "long" is in a lower-priority queue (60,000 GPU-s > 7,200): "new" takes its GPUs
    assert d["preemptions"] == ["long"]
    assert [(a["job_id"], a["placements"]) for a in d["allocations"]] == [
        ("new", [{"node_id": "n1", "tasks": 4}])
    ]
    assert d["resizes"] == []
    assert (d["policy"]["name"], d["fallback"]["used"]) == ("tiresias-2dlas", False)
    assert d["explain"]["jobs"]["long"].startswith("preempted")
    assert d["explain"]["jobs"]["mid"].startswith("kept")
    assert d["explain"]["jobs"]["new"].startswith("admitted")
    assert d["queue_length"] == 1


async def test_stored_gpu_decision_replays_to_the_same_answer(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/decide", json=snapshot())).json()
    detail = (await client.get(f"/v1/decisions/{first['id']}")).json()
    assert detail["input"]["domain"] == "gpu"
    assert detail["preemptions"] == first["preemptions"]
    again = await client.post("/v1/decide", json=detail["input"])
    assert again.status_code == 200, again.text
    for key in ("allocations", "resizes", "preemptions", "policy", "fallback", "explain"):
        assert again.json()[key] == first[key], key


async def test_elastic_job_gets_the_gpus_left(client: httpx.AsyncClient) -> None:
    body = snapshot(
        jobs=[{"id": "e", "arrival": NOW - 5, "min_gpus": 2, "max_gpus": 6}], policy="fifo"
    )
    d = (await client.post("/v1/decide", json=body)).json()
    assert [sum(p["tasks"] for p in a["placements"]) for a in d["allocations"]] == [6]


async def test_the_documented_example_decides(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/decide", json=GPU_DECIDE_EXAMPLE)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nodes": [{"id": "n1", "gpus": -1}]}, "body.nodes[0].gpus"),
        (
            {"jobs": [{"id": "j", "arrival": NOW, "min_gpus": 4, "max_gpus": 2}]},
            "body.jobs[0].max_gpus",
        ),
        (
            {
                "jobs": [
                    {
                        "id": "j",
                        "arrival": NOW,
                        "min_gpus": 1,
                        "allocation": [{"node_id": "zz", "gpus": 1}],
                    }
                ]
            },
            "body.jobs.allocation",
        ),
        (
            {
                "jobs": [
                    {
                        "id": "j",
                        "arrival": NOW,
                        "min_gpus": 4,
                        "allocation": [{"node_id": "n1", "gpus": 2}],
                    }
                ]
            },
            "body.jobs[0].allocation",
        ),
        ({"policy": "f1"}, "body.policy"),
        ({"fallback": "hpc-kernel"}, "body.fallback"),
        ({"domain": "quantum"}, "body"),
    ],
)
async def test_bad_gpu_input_is_422_naming_the_field(
    client: httpx.AsyncClient, change: dict[str, Any], field: str
) -> None:
    r = await client.post("/v1/decide", json=snapshot(**change))
    assert r.status_code == 422, r.text
    fields = [d["field"] for d in r.json()["error"]["details"]]
    assert any(f is not None and f.startswith(field) for f in fields), fields


@pytest.mark.parametrize("domain", [None, "hpc"])
async def test_hpc_body_is_unchanged(client: httpx.AsyncClient, domain: str | None) -> None:
    body = dict(DECIDE_EXAMPLE)
    if domain is not None:
        body["domain"] = domain
    r = await client.post("/v1/decide", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["preemptions"], d["resizes"]) == ([], [])
    assert d["allocations"]


async def test_elastic_fields_in_an_hpc_snapshot_are_422(client: httpx.AsyncClient) -> None:
    body = dict(DECIDE_EXAMPLE)
    body["pending"] = [{**DECIDE_EXAMPLE["pending"][0], "max_tasks": 4}]  # type: ignore[index,dict-item]
    r = await client.post("/v1/decide", json=body)
    assert r.status_code == 422, r.text
    assert [d["field"] for d in r.json()["error"]["details"]] == ["body.pending[0].max_tasks"]


async def test_the_learned_policy_sees_the_queue_behind_more_running_jobs_than_its_window(
    client: httpx.AsyncClient,
) -> None:
    """100 one-GPU jobs run on 110 one-GPU nodes (more than the model's 64-row window): the
    learned policy still sees the pending jobs and starts them on the 10 free GPUs."""
    nodes = [{"id": f"n{i:03d}", "gpus": 1} for i in range(110)]
    running = [
        {
            "id": f"r{i:03d}",
            "arrival": NOW - 5_000 + i,
            "min_gpus": 1,
            "allocation": [{"node_id": f"n{i:03d}", "gpus": 1}],
            "attained_gpu_s": 600.0,
            "executed_s": 600.0,
            "starts": 1,
        }
        for i in range(100)
    ]
    pending = [{"id": f"p{i}", "arrival": NOW - 60 + i, "min_gpus": 1} for i in range(5)]
    body = {"domain": "gpu", "now": NOW, "nodes": nodes, "jobs": running + pending}
    body.update(policy="gpu-v1", deadline_ms=60_000)
    r = await client.post("/v1/decide", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["policy"]["name"], d["fallback"]["used"]) == ("gpu-v1", False)
    started = {a["job_id"] for a in d["allocations"]}
    assert started == {f"p{i}" for i in range(5)}
