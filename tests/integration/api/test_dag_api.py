"""DAG jobs through HTTP (spec 7.2): submission, validation, progress events, rounds and their
invariants, cancellation. SQLite and PostgreSQL (``database_url``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.db.engine import make_engine
from app.db.orm import ClusterRecord
from tests.factories import cluster_body
from tests.integration.api.dag_helpers import (
    NOW,
    all_dags,
    chain_dag,
    check_invariants,
    finish_running_tasks,
    join_dag,
    make_dag_cluster,
    stage,
    wide_dag,
)


async def _schedule(client: httpx.AsyncClient, cid: str, **body: Any) -> dict[str, Any]:
    r = await client.post(f"/v1/clusters/{cid}/schedule", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


class TestRunToCompletion:
    async def test_three_dags_finish_through_rounds_and_task_events(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=2, cpu=3)
        for body in (join_dag("j", NOW), chain_dag("c", NOW + 1), wide_dag("w", 4, NOW + 2)):
            r = await client.post(f"/v1/clusters/{cid}/dags", json=body)
            assert r.status_code == 201, r.text
        t = NOW + 10
        rounds = 0
        while True:
            decision = await _schedule(client, cid, now=t)
            assert decision["policy"]["name"] == "fair"
            assert decision["fallback"]["used"] is False
            await check_invariants(client, cid, decision, slots_per_node=3)
            rounds += 1
            t += 5
            if not await finish_running_tasks(client, cid, t):
                break
            assert rounds < 60
        dags = {d["id"]: d for d in await all_dags(client, cid)}
        assert {d["state"] for d in dags.values()} == {"finished"}
        for d in dags.values():
            assert d["jct_s"] == pytest.approx(d["end_time"] - d["submit_time"])
            assert d["finished_tasks"] == d["tasks"]
            assert d["running_slots"] == 0
        # the join waited for both scans; the chain ran stage after stage
        join = {s["id"]: s for s in dags["j"]["stages"]}
        assert join["join"]["start_time"] >= max(
            join["scan"]["end_time"], join["filter"]["end_time"]
        )
        chain = {s["id"]: s for s in dags["c"]["stages"]}
        assert chain["b"]["start_time"] >= chain["a"]["end_time"]
        assert chain["c"]["start_time"] >= chain["b"]["end_time"]
        nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
        assert all(n["allocated"].get("cpu", 0.0) == 0.0 for n in nodes)
        jobs = (await client.get(f"/v1/clusters/{cid}/jobs", params={"limit": 100})).json()
        stage_jobs = {j["id"]: j for j in jobs["items"]}
        assert set(stage_jobs) == {
            "j:scan",
            "j:filter",
            "j:join",
            "c:a",
            "c:b",
            "c:c",
            "w:only",
        }
        assert stage_jobs["j:join"]["depends_on"] == ["j:scan", "j:filter"]
        assert stage_jobs["j:join"]["labels"]["kairos/dag-id"] == "j"
        assert stage_jobs["j:join"]["labels"]["kairos/kind"] == "stage"
        assert stage_jobs["j:join"]["labels"]["kairos/gang"] == "false"
        assert {j["state"] for j in stage_jobs.values()} == {"finished"}

    async def test_a_grant_is_slots_on_nodes_with_a_parallelism_limit(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=2, cpu=3)
        assert (
            await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("w", 10))
        ).status_code == 201
        decision = await _schedule(client, cid, now=NOW + 1)
        assert decision["allocations"] == [
            {
                "job_id": "w:only",
                "placements": [{"node_id": "n0", "tasks": 3}, {"node_id": "n1", "tasks": 3}],
                "parallelism_limit": 6,
            }
        ]
        dag = (await client.get(f"/v1/clusters/{cid}/dags/w")).json()
        st = dag["stages"][0]
        assert (st["launched"], st["running_slots"], st["unlaunched"]) == (6, 6, 4)
        assert st["parallelism_limit"] == 6
        assert dag["state"] == "running"
        job = (await client.get(f"/v1/clusters/{cid}/jobs/w:only")).json()
        assert job["state"] == "running"
        assert job["decision_id"] == decision["id"]
        # six tasks finish: four slots take the last four tasks, two are freed
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/w:only/events", json={"type": "task_finished", "count": 6}
        )
        assert r.status_code == 200, r.text
        st = (await client.get(f"/v1/clusters/{cid}/dags/w")).json()["stages"][0]
        assert (st["launched"], st["finished"], st["running_slots"]) == (10, 6, 4)
        nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
        assert sum(n["allocated"].get("cpu", 0.0) for n in nodes) == 4.0

    async def test_parents_saturated_but_running_get_a_reservation_not_slots(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=6)
        body = {"id": "r", "stages": [stage("a", 2), stage("b", 3, ("a",))]}
        assert (await client.post(f"/v1/clusters/{cid}/dags", json=body)).status_code == 201
        decision = await _schedule(client, cid, now=NOW)
        assert [a["job_id"] for a in decision["allocations"]] == ["r:a"]
        assert decision["reservations"] == [
            {"job_id": "r:b", "start_at": None, "slots": 3},
        ]
        dag = (await client.get(f"/v1/clusters/{cid}/dags/r")).json()
        b = dag["stages"][1]
        assert (b["state"], b["running_slots"], b["reserved_slots"]) == ("pending", 0, 3)
        assert b["runnable"] is False


class TestSubmission:
    async def test_same_body_is_200_and_another_body_409(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid)
        body = join_dag("d")
        first = await client.post(f"/v1/clusters/{cid}/dags", json=body)
        assert first.status_code == 201, first.text
        again = await client.post(f"/v1/clusters/{cid}/dags", json=body)
        assert again.status_code == 200
        assert again.json() == first.json()
        other = {**body, "stages": [stage("scan", 6)]}
        r = await client.post(f"/v1/clusters/{cid}/dags", json=other)
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "dag_conflict"
        assert "body.stages" in [d["field"] for d in r.json()["error"]["details"]]
        assert len(await all_dags(client, cid)) == 1

    @pytest.mark.parametrize(
        ("stages", "field"),
        [
            (
                [stage("a", 1, ("c",)), stage("b", 1, ("a",)), stage("c", 1, ("b",))],
                "body.stages",
            ),
            ([stage("a", 1), stage("b", 1, ("nope",))], "body.stages[1].depends_on[0]"),
            ([stage("a", 1), stage("a", 2)], "body.stages[1].id"),
            ([stage("a", 1), stage("big", 1, cpu=2)], "body.stages[1].per_task"),
            ([stage("a:b", 1)], "body.stages[0].id"),
            ([stage("a", 1, per_task={"gpu": 1})], "body.stages[0].per_task.gpu"),
        ],
        ids=["cyclic", "unknown-parent", "duplicate-stage", "larger-than-cluster", "colon", "res"],
    )
    async def test_invalid_dag_is_422_naming_the_field(
        self, client: httpx.AsyncClient, cid: str, stages: list[dict[str, Any]], field: str
    ) -> None:
        await make_dag_cluster(client, cid)
        r = await client.post(f"/v1/clusters/{cid}/dags", json={"id": "bad", "stages": stages})
        assert r.status_code == 422, r.text
        assert field in [d["field"] for d in r.json()["error"]["details"]], r.json()
        assert await all_dags(client, cid) == []

    async def test_dag_id_with_a_colon_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_dag_cluster(client, cid)
        r = await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("x:y"))
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.id"

    async def test_dags_live_on_dag_clusters_only(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        assert (await client.put(f"/v1/clusters/{cid}", json=cluster_body())).status_code == 201
        r = await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("w"))
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "not_a_dag_cluster"
        assert "hpc" in r.json()["error"]["message"]
        assert (await client.get(f"/v1/clusters/{cid}/dags")).status_code == 409

    async def test_plain_jobs_are_refused_on_a_dag_cluster(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid)
        r = await client.post(
            f"/v1/clusters/{cid}/jobs", json={"id": "j", "per_task": {"cpu": 1}, "walltime_s": 5}
        )
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "dag_cluster"

    async def test_unknown_dag_is_404(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_dag_cluster(client, cid)
        assert (await client.get(f"/v1/clusters/{cid}/dags/nope")).status_code == 404
        assert (await client.delete(f"/v1/clusters/{cid}/dags/nope")).status_code == 404

    async def test_list_is_paged(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_dag_cluster(client, cid)
        for i in range(3):
            r = await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag(f"d{i}"))
            assert r.status_code == 201
        page = (await client.get(f"/v1/clusters/{cid}/dags", params={"limit": 2})).json()
        assert [d["id"] for d in page["items"]] == ["d0", "d1"]
        rest = await client.get(
            f"/v1/clusters/{cid}/dags", params={"limit": 2, "cursor": page["next_cursor"]}
        )
        assert [d["id"] for d in rest.json()["items"]] == ["d2"]
        assert rest.json()["next_cursor"] is None


class TestEvents:
    async def test_released_slots_go_back_and_their_dag_is_the_next_source(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=4)
        assert (
            await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("a", 8, NOW))
        ).status_code == 201
        await _schedule(client, cid, now=NOW)
        assert (
            await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("b", 8, NOW + 1))
        ).status_code == 201
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/a:only/events", json={"type": "released", "slots": 2}
        )
        assert r.status_code == 200, r.text
        st = (await client.get(f"/v1/clusters/{cid}/dags/a")).json()["stages"][0]
        assert (st["launched"], st["running_slots"]) == (2, 2)
        # the released slots stay with their DAG (the round's source job), not fair-shared
        decision = await _schedule(client, cid, now=NOW + 2, explain=True)
        assert [a["job_id"] for a in decision["allocations"]] == ["a:only"]
        assert decision["explain"]["steps"][0]["source_dag"] == "a"

    async def test_released_slots_in_a_larger_free_pool_make_no_source_job(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=6)
        capped = {"id": "a", "submit_time": NOW, "stages": [stage("s", 10, max_parallelism=4)]}
        assert (await client.post(f"/v1/clusters/{cid}/dags", json=capped)).status_code == 201
        await _schedule(client, cid, now=NOW)  # a runs 4 slots, 2 stay idle
        await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("b", 8, NOW + 1))
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/a:s/events", json={"type": "released", "slots": 1}
        )
        assert r.status_code == 200, r.text
        # 3 free slots, 1 of them a's: the global pool decides (fair: a holds its share of 3)
        decision = await _schedule(client, cid, now=NOW + 2, explain=True)
        assert decision["explain"]["steps"][0]["source_dag"] is None
        assert [
            (a["job_id"], sum(p["tasks"] for p in a["placements"])) for a in decision["allocations"]
        ] == [("b:only", 3)]
        stored = (await client.get(f"/v1/decisions/{decision['id']}")).json()["input"]
        assert stored["trigger"] is None

    async def test_more_tasks_than_running_slots_is_409(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=2)
        await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("w", 5))
        await _schedule(client, cid, now=NOW)
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/w:only/events", json={"type": "task_finished", "count": 3}
        )
        assert r.status_code == 409
        assert r.json()["error"]["details"][0]["field"] == "body.count"
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/w:only/events", json={"type": "released", "slots": 3}
        )
        assert r.status_code == 409
        assert r.json()["error"]["details"][0]["field"] == "body.slots"
        r = await client.post(f"/v1/clusters/{cid}/jobs/w:only/events", json={"type": "finished"})
        assert r.status_code == 409
        st = (await client.get(f"/v1/clusters/{cid}/dags/w")).json()["stages"][0]
        assert (st["launched"], st["finished"], st["running_slots"]) == (2, 0, 2)

    async def test_task_events_are_for_stages_only(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        assert (await client.put(f"/v1/clusters/{cid}", json=cluster_body())).status_code == 201
        r = await client.post(
            f"/v1/clusters/{cid}/jobs", json={"id": "j", "per_task": {"cpu": 1}, "walltime_s": 5}
        )
        assert r.status_code == 201
        r = await client.post(f"/v1/clusters/{cid}/jobs/j/events", json={"type": "task_finished"})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.type"

    async def test_cancel_frees_the_slots(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=4)
        await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("w", 9))
        await _schedule(client, cid, now=NOW)
        r = await client.delete(f"/v1/clusters/{cid}/dags/w")
        assert r.status_code == 204
        assert (await client.delete(f"/v1/clusters/{cid}/dags/w")).status_code == 204
        dag = (await client.get(f"/v1/clusters/{cid}/dags/w")).json()
        assert dag["state"] == "cancelled"
        assert dag["stages"][0]["state"] == "cancelled"
        assert dag["running_slots"] == 0
        nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
        assert nodes[0]["allocated"].get("cpu", 0.0) == 0.0
        decision = await _schedule(client, cid, now=NOW + 1)
        assert decision["allocations"] == []

    async def test_a_failed_stage_fails_its_dag(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=4)
        await client.post(f"/v1/clusters/{cid}/dags", json=join_dag("j"))
        await _schedule(client, cid, now=NOW)
        r = await client.post(f"/v1/clusters/{cid}/jobs/j:scan/events", json={"type": "failed"})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "failed"
        dag = (await client.get(f"/v1/clusters/{cid}/dags/j")).json()
        assert dag["state"] == "failed"
        assert {s["id"]: s["state"] for s in dag["stages"]} == {
            "scan": "failed",
            "filter": "cancelled",
            "join": "cancelled",
        }
        nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
        assert nodes[0]["allocated"].get("cpu", 0.0) == 0.0


class TestRounds:
    async def test_dry_run_changes_nothing_and_explains(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=4)
        await client.post(f"/v1/clusters/{cid}/dags", json=join_dag("j", NOW))
        await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("w", 3, NOW + 1))
        decision = await _schedule(client, cid, now=NOW + 2, dry_run=True, explain=True)
        assert decision["dry_run"] is True
        assert decision["allocations"]
        steps = decision["explain"]["steps"]
        assert steps[0]["chosen"]["job_id"] == decision["allocations"][0]["job_id"]
        assert steps[0]["runners_up"], steps[0]
        assert {j["dag_id"] for j in steps[0]["jobs"]} == {"j", "w"}
        for dag in await all_dags(client, cid):
            assert dag["state"] == "pending"
            assert all(s["launched"] == 0 for s in dag["stages"])
        nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
        assert nodes[0]["allocated"].get("cpu", 0.0) == 0.0

    async def test_another_domains_policy_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_dag_cluster(client, cid)
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"policy": "f1"})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.policy"

    async def test_a_heuristic_named_in_the_request_decides(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=1, cpu=2)
        await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("big", 9, NOW))
        await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("small", 1, NOW + 1))
        decision = await _schedule(client, cid, now=NOW + 2, policy="sjf_cp", dry_run=True)
        assert decision["policy"] == {"name": "sjf_cp", "version": "1", "kind": "heuristic"}
        assert decision["allocations"][0]["job_id"] == "small:only"


class TestExecutorSlots:
    async def test_the_clusters_executor_slot_sizes_nodes_grants_and_the_largest_task(
        self, client: httpx.AsyncClient, cid: str, database_url: str
    ) -> None:
        await make_dag_cluster(client, cid, nodes=2, cpu=8)  # 16 memory_gb per node
        engine = make_engine(database_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    update(ClusterRecord)
                    .where(ClusterRecord.id == cid)
                    .values(
                        domain_config={"dag": {"executor_capacity": {"cpu": 2, "memory_gb": 6}}}
                    )
                )
        finally:
            await engine.dispose()
        big = {"id": "big", "stages": [stage("s", 1, cpu=3)]}
        r = await client.post(f"/v1/clusters/{cid}/dags", json=big)
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.stages[0].per_task"
        assert (
            await client.post(f"/v1/clusters/{cid}/dags", json=wide_dag("w", 10))
        ).status_code == 201
        decision = await _schedule(client, cid, now=NOW)
        # min(8 / 2, 16 / 6) = 2 slots per node
        assert decision["allocations"][0]["placements"] == [
            {"node_id": "n0", "tasks": 2},
            {"node_id": "n1", "tasks": 2},
        ]
        nodes = (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"]
        assert [n["allocated"] for n in nodes] == [{"cpu": 4.0, "memory_gb": 12.0}] * 2
        stored = (await client.get(f"/v1/decisions/{decision['id']}")).json()["input"]
        assert stored["executor_capacity"] == {"cpu": 2.0, "memory_gb": 6.0}
