"""Schedule rounds, stateless decide, the decision log and policies over HTTP."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from tests.factories import job_spec, make_cluster


async def _submit(client: httpx.AsyncClient, cid: str, *specs: dict) -> None:
    r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": list(specs)})
    assert r.status_code == 201, r.text


class TestSchedule:
    async def test_allocates_and_applies(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=2, cluster={"policy": "f1"}, cpu=8)
        await _submit(
            client,
            cid,
            job_spec("a", cpu=8, submit_time=1.0),
            job_spec("b", cpu=4, tasks=2, submit_time=2.0),
            job_spec("c", cpu=8, submit_time=3.0),
        )
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 100.0, "explain": True})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["cluster_id"] == cid
        assert d["dry_run"] is False
        assert d["policy"] == {"name": "f1", "version": "1", "kind": "heuristic"}
        assert d["fallback"] == {"used": False, "reason": None}
        allocated = {a["job_id"] for a in d["allocations"]}
        assert len(allocated) == 2
        assert d["queue_length"] == 3
        assert isinstance(d["explain"], dict)
        cluster = (await client.get(f"/v1/clusters/{cid}")).json()
        assert cluster["running_jobs"] == 2
        assert cluster["pending_jobs"] == 1
        assert cluster["free"]["cpu"] == 0.0
        for job_id in allocated:
            job = (await client.get(f"/v1/clusters/{cid}/jobs/{job_id}")).json()
            assert job["state"] == "running"
            assert job["start_time"] == 100.0
            assert sum(p["tasks"] for p in job["placements"]) == job["tasks"]
        # nothing else fits: the next round allocates nothing and reserves the rest
        d2 = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": 101.0})).json()
        assert d2["allocations"] == []
        assert [r["job_id"] for r in d2["reservations"]] == [(set("abc") - allocated).pop()]

    async def test_dry_run_changes_nothing(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1, cpu=8)
        await _submit(client, cid, job_spec("a", cpu=2))
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={"dry_run": True})).json()
        assert d["dry_run"] is True
        assert [a["job_id"] for a in d["allocations"]] == ["a"]
        job = (await client.get(f"/v1/clusters/{cid}/jobs/a")).json()
        assert job["state"] == "pending"
        assert (await client.get(f"/v1/clusters/{cid}")).json()["allocated"].get("cpu", 0) == 0
        stored = (await client.get(f"/v1/decisions/{d['id']}")).json()
        assert stored["dry_run"] is True

    async def test_a_failing_round_stores_and_applies_nothing(
        self, app: FastAPI, client: httpx.AsyncClient, cid: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The decision and the job/node changes commit together: a round that fails after
        both were written (and flushed) leaves neither behind."""
        from app.services import hpc_rounds

        await make_cluster(client, cid, nodes=1, cluster={"policy": "fcfs"}, cpu=8)
        await _submit(client, cid, job_spec("a", cpu=2))

        def boom(record: object) -> None:
            raise RuntimeError("crash after the decision and its allocations were flushed")

        monkeypatch.setattr(hpc_rounds, "decision_read", boom)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as raw:
            r = await raw.post(f"/v1/clusters/{cid}/schedule", json={})
        assert r.status_code == 500
        monkeypatch.undo()
        assert (await client.get(f"/v1/clusters/{cid}/jobs/a")).json()["state"] == "pending"
        cluster = (await client.get(f"/v1/clusters/{cid}")).json()
        assert cluster["allocated"].get("cpu", 0.0) == 0.0
        assert (await client.get(f"/v1/clusters/{cid}/decisions")).json()["items"] == []
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={})).json()
        assert [a["job_id"] for a in d["allocations"]] == ["a"]

    async def test_no_body_and_policy_override(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1)
        r = await client.post(f"/v1/clusters/{cid}/schedule")
        assert r.status_code == 200
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"policy": "sjf"})
        assert r.json()["policy"]["name"] == "sjf"
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"policy": "nope"})
        assert r.status_code == 422

    async def test_unknown_cluster_is_404(self, client: httpx.AsyncClient, cid: str) -> None:
        assert (await client.post(f"/v1/clusters/{cid}/schedule", json={})).status_code == 404

    async def test_dependencies_and_down_nodes(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=0)
        await client.put(f"/v1/clusters/{cid}/nodes/up", json={"capacity": {"cpu": 4}})
        await client.put(
            f"/v1/clusters/{cid}/nodes/down", json={"capacity": {"cpu": 64}, "state": "down"}
        )
        await _submit(
            client, cid, job_spec("first", cpu=4), job_spec("second", cpu=4, depends_on=["first"])
        )
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={})).json()
        assert d["allocations"] == [
            {"job_id": "first", "placements": [{"node_id": "up", "tasks": 1}]}
        ]
        await client.post(f"/v1/clusters/{cid}/jobs/first/events", json={"type": "finished"})
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={})).json()
        assert [a["job_id"] for a in d["allocations"]] == ["second"]


class TestDecisionLog:
    async def test_get_and_list(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1)
        await _submit(client, cid, job_spec("a"))
        ids = [
            (await client.post(f"/v1/clusters/{cid}/schedule", json={"dry_run": True})).json()["id"]
            for _ in range(3)
        ]
        detail = (await client.get(f"/v1/decisions/{ids[0]}")).json()
        assert detail["input"]["pending"][0]["id"] == "a"
        assert detail["input"]["nodes"][0]["id"] == "n0"
        page = (await client.get(f"/v1/clusters/{cid}/decisions", params={"limit": 2})).json()
        assert [d["id"] for d in page["items"]] == ids[::-1][:2]
        rest = (
            await client.get(
                f"/v1/clusters/{cid}/decisions", params={"cursor": page["next_cursor"]}
            )
        ).json()
        assert [d["id"] for d in rest["items"]] == [ids[0]]
        assert (await client.get("/v1/decisions/dec_nope")).status_code == 404

    async def test_snapshot_replays_through_decide(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=2, cpu=8)
        await _submit(client, cid, job_spec("a", cpu=8), job_spec("b", cpu=8), job_spec("c", cpu=8))
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={"dry_run": True})).json()
        snapshot = (await client.get(f"/v1/decisions/{d['id']}")).json()["input"]
        replay = (await client.post("/v1/decide", json=snapshot)).json()
        assert replay["allocations"] == d["allocations"]
        assert replay["reservations"] == d["reservations"]


class TestDecide:
    async def test_stateless(self, client: httpx.AsyncClient) -> None:
        body = {
            "now": 1000.0,
            "nodes": [
                {"id": "n1", "capacity": {"cpu": 8}},
                {"id": "n2", "capacity": {"cpu": 8}, "allocated": {"cpu": 8}},
            ],
            "running": [
                {
                    "job": {"id": "r", "per_task": {"cpu": 8}, "walltime_s": 100},
                    "placements": [{"node_id": "n2", "tasks": 1}],
                    "start_time": 950.0,
                }
            ],
            "pending": [
                {
                    "id": "p1",
                    "tasks": 2,
                    "per_task": {"cpu": 8},
                    "walltime_s": 10,
                    "submit_time": 1.0,
                },
                {"id": "p2", "per_task": {"cpu": 4}, "walltime_s": 10, "submit_time": 2.0},
            ],
            "policy": "fcfs",
        }
        r = await client.post("/v1/decide", json=body)
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["cluster_id"] is None
        assert d["reservations"] == [{"job_id": "p1", "start_at": 1050.0}]
        assert [a["job_id"] for a in d["allocations"]] == ["p2"]
        assert (await client.get(f"/v1/decisions/{d['id']}")).status_code == 200

    async def test_inconsistent_snapshot_is_422(self, client: httpx.AsyncClient) -> None:
        body = {
            "now": 1.0,
            "nodes": [{"id": "n1", "capacity": {"cpu": 4}, "allocated": {"cpu": 8}}],
        }
        r = await client.post("/v1/decide", json=body)
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "invalid_snapshot"
        node = {"id": "n", "capacity": {"cpu": 1}}
        dup = await client.post("/v1/decide", json={"now": 1.0, "nodes": [node, node]})
        assert dup.status_code == 422
        assert dup.json()["error"]["code"] == "invalid_snapshot"
        missing = {"nodes": []}
        assert (await client.post("/v1/decide", json=missing)).status_code == 422


class TestPolicies:
    async def test_lists_every_heuristic(self, client: httpx.AsyncClient) -> None:
        from app.domains.hpc.heuristics import HEURISTICS

        policies = (await client.get("/v1/policies")).json()
        names = {p["name"] for p in policies if p["kind"] == "heuristic"}
        assert names == set(HEURISTICS)
        assert all(p["loaded"] for p in policies)
        one = await client.get("/v1/policies/wfp3")
        assert one.status_code == 200
        assert one.json()["kind"] == "heuristic"
        assert (await client.get("/v1/policies/f1@1")).status_code == 200
        assert (await client.get("/v1/policies/f1@9")).status_code == 404
        assert (await client.get("/v1/policies/unknown")).status_code == 404
