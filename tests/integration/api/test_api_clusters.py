"""Clusters and nodes over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx

from tests.factories import cluster_body, job_spec, make_cluster, node_body, nodes_body


class TestUpsertCluster:
    async def test_create_then_update(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body())
        assert r.status_code == 201
        body = r.json()
        assert body["id"] == cid
        assert (body["policy"], body["fallback"], body["backfill"]) == ("hpc-kernel", "f1", "easy")
        r = await client.put(
            f"/v1/clusters/{cid}", json=cluster_body(name="renamed", backfill="none")
        )
        assert r.status_code == 200
        assert r.json()["name"] == "renamed"
        assert r.json()["backfill"] == "none"

    async def test_unknown_policy_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(policy="nope"))
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.policy"

    async def test_bad_id_is_422(self, client: httpx.AsyncClient) -> None:
        r = await client.put("/v1/clusters/bad%20id", json=cluster_body())
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "validation_error"

    async def test_empty_resources_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(resources=[]))
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.resources"


class TestGetCluster:
    async def test_totals(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=2, cpu=32, memory_gb=100)
        await client.put(f"/v1/clusters/{cid}/nodes/down1", json=node_body(cpu=8, state="down"))
        r = await client.get(f"/v1/clusters/{cid}")
        assert r.status_code == 200
        body = r.json()
        assert body["nodes"] == 3
        assert body["capacity"] == {"cpu": 64.0, "memory_gb": 200.0}
        assert body["free"] == {"cpu": 64.0, "memory_gb": 200.0}
        assert body["pending_jobs"] == 0
        assert body["running_jobs"] == 0

    async def test_unknown_is_404(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.get(f"/v1/clusters/{cid}")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "cluster_not_found"


class TestListAndDelete:
    async def test_pages_then_delete(self, client: httpx.AsyncClient, cid: str) -> None:
        ids = [f"{cid}-{i}" for i in range(5)]
        for i in ids:
            assert (await client.put(f"/v1/clusters/{i}", json=cluster_body())).status_code == 201
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, str | int] = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = (await client.get("/v1/clusters", params=params)).json()
            seen += [c["id"] for c in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [s for s in seen if s.startswith(cid)] == ids
        assert (await client.delete(f"/v1/clusters/{ids[0]}")).status_code == 204
        assert (await client.get(f"/v1/clusters/{ids[0]}")).status_code == 404
        assert (await client.delete(f"/v1/clusters/{ids[0]}")).status_code == 404

    async def test_delete_with_nodes_jobs_and_decisions(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=2, cluster={"policy": "fcfs"}, cpu=8)
        jobs = {"jobs": [job_spec("a", cpu=8), job_spec("b", cpu=8), job_spec("c", cpu=8)]}
        assert (await client.post(f"/v1/clusters/{cid}/jobs/batch", json=jobs)).status_code == 201
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={})).json()
        assert len(d["allocations"]) == 2
        r = await client.delete(f"/v1/clusters/{cid}")
        assert r.status_code == 204
        assert r.content == b""
        for path in ("", "/nodes", "/jobs", "/jobs/a", "/decisions"):
            assert (await client.get(f"/v1/clusters/{cid}{path}")).status_code == 404, path
        # the id is free again, with nothing left over from the deleted cluster
        assert (await client.put(f"/v1/clusters/{cid}", json=cluster_body())).status_code == 201
        fresh = (await client.get(f"/v1/clusters/{cid}")).json()
        assert (fresh["nodes"], fresh["pending_jobs"], fresh["running_jobs"]) == (0, 0, 0)
        assert (await client.get(f"/v1/clusters/{cid}/jobs")).json()["items"] == []
        assert (await client.get(f"/v1/clusters/{cid}/decisions")).json()["items"] == []

    async def test_bad_cursor_is_422(self, client: httpx.AsyncClient) -> None:
        r = await client.get("/v1/clusters", params={"cursor": "!!!"})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "query.cursor"


class TestNodes:
    async def test_single_upsert_and_list(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=0)
        r = await client.put(f"/v1/clusters/{cid}/nodes/n1", json=node_body(cpu=16, gpu=2))
        assert r.status_code == 201
        assert r.json()["free"] == {"cpu": 16.0, "memory_gb": 128.0, "gpu": 2.0}
        r = await client.put(f"/v1/clusters/{cid}/nodes/n1", json=node_body(cpu=8, state="drain"))
        assert r.status_code == 200
        assert r.json()["state"] == "drain"
        page = (await client.get(f"/v1/clusters/{cid}/nodes")).json()
        assert [n["id"] for n in page["items"]] == ["n1"]
        assert page["items"][0]["capacity"]["cpu"] == 8.0

    async def test_bulk_upsert_pages(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=0)
        r = await client.put(f"/v1/clusters/{cid}/nodes", json=nodes_body(7))
        assert r.status_code == 200
        assert len(r.json()["nodes"]) == 7
        first = (await client.get(f"/v1/clusters/{cid}/nodes", params={"limit": 5})).json()
        rest = (
            await client.get(
                f"/v1/clusters/{cid}/nodes", params={"limit": 5, "cursor": first["next_cursor"]}
            )
        ).json()
        assert len(first["items"]) == 5
        assert len(rest["items"]) == 2
        assert rest["next_cursor"] is None

    async def test_unknown_resource_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=0)
        r = await client.put(f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"tpu": 4}})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.capacity.tpu"

    async def test_negative_and_nan_capacity_are_422(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid, nodes=0)
        r = await client.put(f"/v1/clusters/{cid}/nodes/n1", json={"capacity": {"cpu": -1}})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.capacity.cpu"
        r = await client.put(
            f"/v1/clusters/{cid}/nodes/n1",
            content=b'{"capacity": {"cpu": NaN}}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code in (400, 422)
        assert r.json()["error"]["code"] in ("malformed_json", "validation_error")
        r = await client.put(
            f"/v1/clusters/{cid}/nodes/n1",
            content=b'{"capacity": {"cpu": Infinity}}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code in (400, 422)

    async def test_nodes_of_unknown_cluster_is_404(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        r = await client.put(f"/v1/clusters/{cid}/nodes", json=nodes_body(1))
        assert r.status_code == 404
        assert (await client.get(f"/v1/clusters/{cid}/nodes")).status_code == 404

    async def test_bulk_is_all_or_nothing(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=0)
        body = nodes_body(3)
        body["nodes"][2]["capacity"] = {"tpu": 1}
        assert (await client.put(f"/v1/clusters/{cid}/nodes", json=body)).status_code == 422
        page = (await client.get(f"/v1/clusters/{cid}/nodes")).json()
        assert page["items"] == []
