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


class TestErrorMessages:
    async def test_a_body_without_json_content_type_says_so(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        r = await client.post(
            f"/v1/clusters/{cid}/jobs",
            content=b"id=j1",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 422
        (detail,) = r.json()["error"]["details"]
        assert detail["field"] == "body"
        assert "Content-Type: application/json" in detail["message"]
        assert "application/x-www-form-urlencoded" in detail["message"]

    async def test_a_json_array_body_is_asked_to_be_an_object(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        r = await client.post(f"/v1/clusters/{cid}/jobs", json=[1])
        assert r.status_code == 422
        assert (
            r.json()["error"]["details"][0]["message"] == "the request body must be a JSON object"
        )

    async def test_malformed_json_gives_line_and_column(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        r = await client.post(
            f"/v1/clusters/{cid}/jobs",
            content=b'{\n  "id": "j1",\n  "tasks" 2\n}',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["code"] == "malformed_json"
        assert "line 3, column 11" in error["message"]
        assert "line 3, column 11" in error["details"][0]["message"]

    async def test_an_invalid_id_is_described_in_words(self, client: httpx.AsyncClient) -> None:
        r = await client.put("/v1/clusters/bad%20id", json={"resources": ["cpu"]})
        assert r.status_code == 422
        (detail,) = r.json()["error"]["details"]
        assert detail["field"] == "path.cluster_id"
        assert "letters, digits" in detail["message"]
        assert "1-128 characters" in detail["message"]
        assert "^" not in detail["message"]

    async def test_job_conflict_names_the_fields_that_differ(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        assert (await client.post(url, json=job_spec("j1", cpu=4))).status_code == 201
        r = await client.post(url, json=job_spec("j1", cpu=8, walltime_s=60))
        assert r.status_code == 409
        error = r.json()["error"]
        assert error["code"] == "job_conflict"
        fields = [d["field"] for d in error["details"]]
        assert fields == ["body.id", "body.per_task", "body.walltime_s"]
        assert "per_task, walltime_s" in error["message"]

    async def test_job_conflict_in_one_batch_names_the_fields(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        jobs = [job_spec("j1"), job_spec("j1", priority=3)]
        r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})
        assert r.status_code == 409
        fields = [d["field"] for d in r.json()["error"]["details"]]
        assert fields == ["body.jobs[1].id", "body.jobs[1].priority"]

    async def test_numbers_in_strings_are_refused(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        for field, value in (("walltime_s", "60"), ("tasks", "2"), ("priority", "1")):
            r = await client.post(url, json=job_spec("j1", **{field: value}))
            assert r.status_code == 422, (field, r.text)
            (detail,) = r.json()["error"]["details"]
            assert detail["field"] == f"body.{field}"
            assert "not a string" in detail["message"]
        r = await client.post(url, json={**job_spec("j1"), "per_task": {"cpu": "4"}})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.per_task.cpu"
        r = await client.post(url, json=job_spec("j1", walltime_s=60))  # an integer is a number
        assert r.status_code == 201

    async def test_query_parameters_still_parse_strings(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        r = await client.get(f"/v1/clusters/{cid}/jobs", params={"limit": "5"})
        assert r.status_code == 200

    async def test_a_trailing_slash_is_a_json_404_naming_the_path(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        r = await client.get(f"/v1/clusters/{cid}/")
        assert r.status_code == 404
        assert r.headers["content-type"].startswith("application/json")
        assert f"/v1/clusters/{cid}" in r.json()["error"]["message"]
        assert "trailing slash" in r.json()["error"]["message"]


class TestJobsThatCannotFit:
    async def test_a_task_larger_than_every_node_is_accepted_with_a_warning(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=2, cpu=32, gpu=4)
        url = f"/v1/clusters/{cid}/jobs"
        r = await client.post(url, json={**job_spec("j1"), "per_task": {"cpu": 4, "gpu": 8}})
        assert r.status_code == 201
        (warning,) = r.json()["warnings"]
        assert warning["code"] == "task_exceeds_every_node"
        assert warning["field"] == "per_task.gpu"
        assert "gpu=8" in warning["message"]
        assert "largest has 4" in warning["message"]
        got = (await client.get(f"{url}/j1")).json()
        assert got["warnings"] == [warning]
        listed = (await client.get(url)).json()["items"]
        assert listed[0]["warnings"] == [warning]

    async def test_a_gang_larger_than_the_cluster_is_warned_per_job_of_a_batch(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=2, cpu=32)
        await client.put(f"/v1/clusters/{cid}/nodes/d1", json=node_body(cpu=8, state="drain"))
        jobs = [job_spec("fits", cpu=8, tasks=9), job_spec("gang", cpu=8, tasks=10)]
        r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})
        assert r.status_code == 201
        fits, gang = r.json()["jobs"]
        assert fits["warnings"] == []  # 72 cpu of 72, the drained node included
        (warning,) = gang["warnings"]
        assert (warning["code"], warning["field"]) == ("gang_exceeds_cluster", "tasks")
        assert "cpu=80" in warning["message"]

    async def test_a_cluster_without_nodes_warns_and_the_warning_goes_once_nodes_come(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=0)
        url = f"/v1/clusters/{cid}/jobs"
        r = await client.post(url, json=job_spec("j1"))
        assert [w["code"] for w in r.json()["warnings"]] == ["no_nodes"]
        await client.put(f"/v1/clusters/{cid}/nodes/n1", json=node_body(cpu=8))
        assert (await client.get(f"{url}/j1")).json()["warnings"] == []

    async def test_a_running_job_has_no_warnings(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1, cpu=8)
        url = f"/v1/clusters/{cid}/jobs"
        assert (await client.post(url, json=job_spec("j1", cpu=8))).json()["warnings"] == []
        await client.post(f"/v1/clusters/{cid}/schedule", json={})
        got = (await client.get(f"{url}/j1")).json()
        assert got["state"] == "running"
        assert got["warnings"] == []
