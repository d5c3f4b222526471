"""Answers a person can read (issue 24): times in explanations, cluster totals named for what
they count, warnings for jobs that cannot fit, error messages that name the problem and the
fix."""

from __future__ import annotations

import re

import httpx

from tests.factories import job_spec, make_cluster, node_body


class TestExplanationTimes:
    async def test_reservation_start_is_iso_8601_and_relative(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=1, cpu=8)
        now = 1_796_150_000.0
        r = await client.post(
            f"/v1/clusters/{cid}/jobs", json=job_spec("long", cpu=8, walltime_s=4320)
        )
        assert r.status_code == 201, r.text
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": now})
        assert r.json()["allocations"][0]["job_id"] == "long", r.text
        r = await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("big", cpu=8))
        assert r.status_code == 201, r.text
        r = await client.post(f"/v1/clusters/{cid}/schedule", json={"explain": True, "now": now})
        assert r.status_code == 200, r.text
        reason = r.json()["explain"]["not_started"]["big"]
        assert (
            reason == "does not fit; reserved to start at 2026-12-01T19:45:20+00:00 (in 1 h 12 min)"
        )


class TestClusterTotals:
    async def test_totals_say_what_they_count(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=2, cpu=32, memory_gb=100)
        await client.put(f"/v1/clusters/{cid}/nodes/d1", json=node_body(cpu=8, state="drain"))
        await client.put(f"/v1/clusters/{cid}/nodes/d2", json=node_body(cpu=4, state="down"))
        body = (await client.get(f"/v1/clusters/{cid}")).json()
        assert body["nodes"] == 4
        assert body["schedulable_nodes"] == 2
        assert body["total_capacity"] == {"cpu": 76.0, "memory_gb": 456.0}
        assert body["schedulable_capacity"] == {"cpu": 64.0, "memory_gb": 200.0}
        assert body["capacity"] == body["schedulable_capacity"]  # deprecated alias

    async def test_openapi_marks_capacity_deprecated(self, client: httpx.AsyncClient) -> None:
        schema = (await client.get("/openapi.json")).json()["components"]["schemas"]
        props = schema["ClusterRead"]["properties"]
        assert props["capacity"].get("deprecated") is True
        assert {"total_capacity", "schedulable_capacity", "schedulable_nodes"} <= set(props)
        assert re.search("up", props["schedulable_capacity"]["description"])
