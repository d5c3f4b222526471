"""Issue 23 findings 5, 8 and 9: inputs that answered 500, inputs accepted although nothing
could come of them, and the OpenAPI document, ``OPTIONS`` and ``HEAD`` against the server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.factories import job_spec, make_cluster, node_body

#: base64 of ``pk:²``: ``"²".isdigit()`` is true, ``int("²")`` raises
NON_ASCII_DIGIT_CURSOR = "cGs6wrI"


def _fields(r: httpx.Response) -> list[str]:
    return [d["field"] for d in r.json()["error"]["details"]]


def _snapshot(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "now": 100.0,
        "nodes": [{"id": "n1", "capacity": {"cpu": 8}}],
        "pending": [{"id": "p1", "per_task": {"cpu": 1}, "walltime_s": 10}],
        "policy": "fcfs",
    }
    body.update(over)
    return body


class TestInputsThatAnswered500:
    """Finding 5 (a) and (b)."""

    @pytest.mark.parametrize("path", ["", "/{cid}/jobs", "/{cid}/nodes", "/{cid}/decisions"])
    async def test_a_cursor_holding_a_non_ascii_digit_is_422(
        self, client: httpx.AsyncClient, cid: str, path: str
    ) -> None:
        await make_cluster(client, cid)
        url = "/v1/clusters" + path.format(cid=cid)
        r = await client.get(url, params={"cursor": NON_ASCII_DIGIT_CURSOR})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"][0]["field"] == "query.cursor"
        # a cursor the service issued still pages
        assert (await client.get(url, params={"limit": 1})).status_code == 200

    @pytest.mark.parametrize("tasks", [10**400, 10**30, 1_000_001])
    async def test_a_huge_task_count_in_a_running_placement_is_422(
        self, client: httpx.AsyncClient, tasks: int
    ) -> None:
        running = [
            {
                "job": {"id": "r1", "per_task": {"cpu": 1}, "walltime_s": 10},
                "placements": [{"node_id": "n1", "tasks": tasks}],
                "start_time": 50.0,
            }
        ]
        raw = json.dumps(_snapshot(running=running))  # json writes the 400-digit integer as is
        r = await client.post(
            "/v1/decide", content=raw, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422, r.text
        assert "body.running[0].placements[0].tasks" in _fields(r)

    @pytest.mark.parametrize(
        ("where", "field"),
        [
            ("now", "body.now"),
            ("capacity", "body.nodes[0].capacity.cpu"),
            ("walltime", "body.pending[0].walltime_s"),
            ("priority", "body.pending[0].priority"),
            ("tasks", "body.pending[0].tasks"),
        ],
    )
    async def test_every_number_of_a_snapshot_is_bounded(
        self, client: httpx.AsyncClient, where: str, field: str
    ) -> None:
        body = _snapshot()
        huge = 10**400
        if where == "now":
            body["now"] = huge
        elif where == "capacity":
            body["nodes"][0]["capacity"]["cpu"] = huge
        elif where == "walltime":
            body["pending"][0]["walltime_s"] = huge
        else:
            body["pending"][0][where] = huge
        r = await client.post(
            "/v1/decide", content=json.dumps(body), headers={"content-type": "application/json"}
        )
        assert r.status_code == 422, r.text
        assert field in _fields(r)


class TestDependencies:
    """Finding 8: cycles and unknown dependencies are 422 naming the field; nothing is stored."""

    async def test_two_jobs_naming_each_other_in_one_batch_are_refused(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        batch = {
            "jobs": [
                job_spec("free"),
                job_spec("a", depends_on=["b"]),
                job_spec("b", depends_on=["a"]),
            ]
        }
        r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json=batch)
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "dependency_cycle"
        assert err["details"][0]["field"] == "body.jobs[1].depends_on"
        assert err["details"][0]["type"] == "dependency_cycle"
        assert "'a' -> 'b' -> 'a'" in err["details"][0]["message"]
        listed = await client.get(f"/v1/clusters/{cid}/jobs")
        assert listed.json()["items"] == []  # all or nothing

    async def test_a_cycle_cannot_be_built_over_several_calls(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        for job_id, dep in (("x", "z"), ("y", "x"), ("z", "y")):
            r = await client.post(url, json=job_spec(job_id, depends_on=[dep]))
            assert r.status_code == 422, r.text
            assert r.json()["error"]["code"] == "unknown_dependency"
            assert _fields(r) == ["body.depends_on[0]"]
        assert (await client.get(url)).json()["items"] == []

    async def test_a_longer_cycle_inside_a_batch_is_refused(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        jobs = [job_spec(f"j{i}", depends_on=[f"j{(i + 1) % 50}"]) for i in range(50)]
        r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": jobs})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "dependency_cycle"

    async def test_an_unknown_dependency_is_refused(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        r = await client.post(url, json=job_spec("j", depends_on=["nope"]))
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "unknown_dependency"
        assert err["details"][0] == {
            "field": "body.depends_on[0]",
            "message": err["details"][0]["message"],
            "type": "unknown_dependency",
        }
        assert "'nope'" in err["details"][0]["message"]
        batch = {"jobs": [job_spec("ok"), job_spec("k", depends_on=["ok", "missing"])]}
        r = await client.post(f"{url}/batch", json=batch)
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.jobs[1].depends_on[1]"]
        assert (await client.get(f"{url}/ok")).status_code == 404  # all or nothing

    async def test_dependencies_on_stored_or_batched_jobs_are_accepted(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        assert (await client.post(url, json=job_spec("etl"))).status_code == 201
        batch = {
            "jobs": [
                job_spec("report", depends_on=["train", "etl"]),  # a later batch-mate, too
                job_spec("train", depends_on=["etl"]),
            ]
        }
        r = await client.post(f"{url}/batch", json=batch)
        assert r.status_code == 201, r.text
        # resubmitting a stored job is idempotent
        again = await client.post(url, json=job_spec("train", depends_on=["etl"]))
        assert again.status_code == 200, again.text

    async def test_a_cycle_among_pending_jobs_of_a_snapshot_is_refused(
        self, client: httpx.AsyncClient
    ) -> None:
        pending = [
            {"id": "p1", "per_task": {"cpu": 1}, "walltime_s": 10},
            {"id": "p2", "per_task": {"cpu": 1}, "walltime_s": 10, "depends_on": ["p3"]},
            {"id": "p3", "per_task": {"cpu": 1}, "walltime_s": 10, "depends_on": ["p2"]},
        ]
        r = await client.post("/v1/decide", json=_snapshot(pending=pending))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "dependency_cycle"
        assert _fields(r) == ["body.pending[1].depends_on"]

    async def test_a_snapshot_dependency_on_a_job_it_does_not_hold_waits(
        self, client: httpx.AsyncClient
    ) -> None:
        """The documented rule of stateless snapshots: such a job counts as unfinished."""
        pending = [
            {"id": "p1", "per_task": {"cpu": 1}, "walltime_s": 10, "depends_on": ["gone"]},
            {"id": "p2", "per_task": {"cpu": 1}, "walltime_s": 10, "depends_on": ["done"]},
        ]
        r = await client.post("/v1/decide", json=_snapshot(pending=pending, finished=["done"]))
        assert r.status_code == 200, r.text
        assert [a["job_id"] for a in r.json()["allocations"]] == ["p2"]


class TestZeroAmounts:
    """Finding 8: empty or all-zero capacities and demands are 422 naming the field."""

    @pytest.mark.parametrize("capacity", [{}, {"cpu": 0}, {"cpu": 0, "gpu": 0.0}])
    async def test_a_node_without_capacity_is_refused(
        self, client: httpx.AsyncClient, cid: str, capacity: dict[str, float]
    ) -> None:
        await make_cluster(client, cid, nodes=0)
        one = await client.put(f"/v1/clusters/{cid}/nodes/n1", json={"capacity": capacity})
        assert one.status_code == 422, one.text
        assert _fields(one) == ["body.capacity"]
        bulk = {"nodes": [{"id": "n2", **node_body()}, {"id": "n3", "capacity": capacity}]}
        r = await client.put(f"/v1/clusters/{cid}/nodes", json=bulk)
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.nodes[1].capacity"]
        assert (await client.get(f"/v1/clusters/{cid}/nodes")).json()["items"] == []
        # one positive resource is enough
        ok = {"capacity": {"cpu": 0, "gpu": 1}}
        assert (await client.put(f"/v1/clusters/{cid}/nodes/n4", json=ok)).status_code == 201

    @pytest.mark.parametrize("per_task", [{}, {"cpu": 0}, {"cpu": 0, "memory_gb": 0}])
    async def test_a_job_without_demand_is_refused(
        self, client: httpx.AsyncClient, cid: str, per_task: dict[str, float]
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        r = await client.post(url, json=job_spec("j", per_task=per_task))
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.per_task"]
        batch = {"jobs": [job_spec("ok"), job_spec("k", per_task=per_task)]}
        r = await client.post(f"{url}/batch", json=batch)
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.jobs[1].per_task"]

    async def test_a_snapshot_with_zero_amounts_is_refused(self, client: httpx.AsyncClient) -> None:
        nodes = [{"id": "n1", "capacity": {"cpu": 8}}, {"id": "n2", "capacity": {"cpu": 0}}]
        r = await client.post("/v1/decide", json=_snapshot(nodes=nodes))
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.nodes[1].capacity"]
        pending = [{"id": "p1", "per_task": {}, "walltime_s": 10}]
        r = await client.post("/v1/decide", json=_snapshot(pending=pending))
        assert r.status_code == 422, r.text
        assert _fields(r) == ["body.pending[0].per_task"]


class TestOpenApiAgreesWithTheServer:
    """Finding 9 (resource maps, OPTIONS, HEAD)."""

    async def test_every_patterned_map_refuses_other_keys(self, client: httpx.AsyncClient) -> None:
        spec = (await client.get("/openapi.json")).json()
        found: list[dict[str, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "patternProperties" in node:
                    found.append(node)
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(spec["components"]["schemas"])
        assert len(found) >= 5  # capacity, allocated, per_task, labels, ...
        assert all(m.get("additionalProperties") is False for m in found), found
        node = spec["components"]["schemas"]["NodeUpsert"]["properties"]["capacity"]
        assert node["minProperties"] == 1

    async def test_a_key_the_schema_refuses_is_refused(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        r = await client.put(
            f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"cpu": 1, "bad key!": 1}}
        )
        assert r.status_code == 422

    @pytest.mark.parametrize(
        ("path", "allow"),
        [
            ("/v1/clusters", "GET, HEAD, OPTIONS"),
            ("/v1/clusters/{cid}", "DELETE, GET, HEAD, OPTIONS, PUT"),
            ("/v1/clusters/{cid}/jobs", "GET, HEAD, OPTIONS, POST"),
            ("/v1/decide", "OPTIONS, POST"),
        ],
    )
    async def test_options_lists_every_method_of_the_path(
        self, client: httpx.AsyncClient, cid: str, path: str, allow: str
    ) -> None:
        url = path.format(cid=cid)
        r = await client.options(url)
        assert r.status_code == 204, r.text
        assert r.headers["allow"] == allow
        # a method the path lacks: 405 with the same Allow
        r = await client.request("PATCH", url)
        assert r.status_code == 405
        assert r.headers["allow"] == allow
        assert r.json()["error"]["code"] == "method_not_allowed"

    async def test_head_answers_as_get_without_a_body(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        got = await client.get(f"/v1/clusters/{cid}")
        head = await client.head(f"/v1/clusters/{cid}")
        assert head.status_code == 200
        assert head.content == b""
        assert head.headers["content-length"] == got.headers["content-length"]
        assert (await client.head("/v1/clusters/nope")).status_code == 404
        post_only = await client.head("/v1/decide")
        assert post_only.status_code == 405
        assert post_only.headers["allow"] == "OPTIONS, POST"

    async def test_unknown_paths_stay_404(self, client: httpx.AsyncClient) -> None:
        assert (await client.options("/v1/nothing-here")).status_code == 404
