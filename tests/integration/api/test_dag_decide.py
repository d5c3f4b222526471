"""``POST /v1/decide`` with a DAG snapshot (``domain: "dag"``), and the stored decisions of dag
rounds replayed through it. SQLite and PostgreSQL (``database_url``)."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from app.schemas.dag import DAG_DECIDE_EXAMPLE
from tests.integration.api.dag_helpers import (
    NOW,
    chain_dag,
    finish_running_tasks,
    join_dag,
    make_dag_cluster,
    wide_dag,
)


def _decided(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["policy"], d["fallback"], d["allocations"], d["reservations"], d["queue_length"])


async def test_a_dag_snapshot_is_decided_and_stored(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/decide", json=DAG_DECIDE_EXAMPLE)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["cluster_id"] is None
    assert d["policy"]["name"] == "fair"
    # n1 has 4 free slots, n2 2 (2 of its 4 cpu allocated): 6 free; q1's map keeps 2 running
    granted = sum(p["tasks"] for a in d["allocations"] for p in a["placements"])
    assert 0 < granted <= 6
    assert {a["job_id"] for a in d["allocations"]} <= {"q1:map", "q2:scan"}
    assert d["explain"]["steps"]
    stored = (await client.get(f"/v1/decisions/{d['id']}")).json()
    assert stored["input"]["domain"] == "dag"
    again = await client.post("/v1/decide", json=stored["input"])
    assert again.status_code == 200
    assert _decided(again.json()) == _decided(d)


async def test_a_stage_before_its_parents_finish_is_never_placed(
    client: httpx.AsyncClient,
) -> None:
    body = copy.deepcopy(DAG_DECIDE_EXAMPLE)
    body["explain"] = False
    d = (await client.post("/v1/decide", json=body)).json()
    assert "q1:reduce" not in {a["job_id"] for a in d["allocations"]}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda b: b["dags"][0]["spec"]["stages"][1].update(depends_on=["nope"]),
            "body.dags[0].spec.stages[1].depends_on[0]",
        ),
        (
            lambda b: b["dags"][0]["stage_progress"][0].update(finished=5),
            "body.dags[0].stage_progress[0].launched",
        ),
        (lambda b: b["dags"][1]["spec"].update(id="q1"), "body.dags[1].spec.id"),
        (lambda b: b.update(policy="f1"), "body.policy"),
        (lambda b: b.update(fallback="decima"), "body.fallback"),
        (
            lambda b: b.update(trigger={"type": "stage_released", "job_id": "zz:map"}),
            "body.trigger.job_id",
        ),
        (
            lambda b: b["dags"][0]["spec"]["stages"][0].update(id="m:ap"),
            "body.dags[0].spec.stages[0].id",
        ),
    ],
    ids=[
        "unknown-parent",
        "progress",
        "duplicate-dag",
        "hpc-policy",
        "fallback",
        "trigger",
        "colon",
    ],
)
async def test_a_bad_dag_snapshot_is_422_naming_the_field(
    client: httpx.AsyncClient, change: Any, field: str
) -> None:
    body = copy.deepcopy(DAG_DECIDE_EXAMPLE)
    change(body)
    r = await client.post("/v1/decide", json=body)
    assert r.status_code == 422, r.text
    assert field in [d["field"] for d in r.json()["error"]["details"]], r.json()


async def test_every_stored_round_replays_through_decide(
    client: httpx.AsyncClient, cid: str
) -> None:
    await make_dag_cluster(client, cid, nodes=2, cpu=3)
    for body in (join_dag("j", NOW), chain_dag("c", NOW + 1), wide_dag("w", 7, NOW + 2)):
        assert (await client.post(f"/v1/clusters/{cid}/dags", json=body)).status_code == 201
    t = NOW + 10
    decisions = []
    for _ in range(40):
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": t, "explain": True})
        assert r.status_code == 200, r.text
        decisions.append(r.json())
        t += 5
        if not await finish_running_tasks(client, cid, t):
            break
    assert len(decisions) > 3
    for d in decisions:
        stored = await client.get(f"/v1/decisions/{d['id']}")
        assert stored.status_code == 200
        replay = await client.post("/v1/decide", json=stored.json()["input"])
        assert replay.status_code == 200, replay.text
        assert _decided(replay.json()) == _decided(d)
        assert replay.json()["explain"]["steps"] == d["explain"]["steps"]
