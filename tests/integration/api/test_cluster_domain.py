"""A cluster's domain (``hpc``, ``gpu``, ``dag``): declared at creation, fixed after, and the
policy names it accepts are its domain's."""

from __future__ import annotations

import httpx
import pytest

from tests.factories import cluster_body


async def _listed(client: httpx.AsyncClient) -> list[dict[str, object]]:
    """Every cluster ``GET /v1/clusters`` lists, page after page (the session's PostgreSQL
    database holds other tests' clusters, so one page need not hold this test's)."""
    items: list[dict[str, object]] = []
    params: dict[str, str | int] = {"limit": 100}
    while True:
        page = (await client.get("/v1/clusters", params=params)).json()
        items += page["items"]
        if page["next_cursor"] is None:
            return items
        params["cursor"] = page["next_cursor"]


async def test_default_domain_is_hpc(client: httpx.AsyncClient, cid: str) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body())
    assert r.status_code == 201
    assert r.json()["domain"] == "hpc"
    assert (await client.get(f"/v1/clusters/{cid}")).json()["domain"] == "hpc"


@pytest.mark.parametrize(("domain", "fallback"), [("gpu", "tiresias-2dlas"), ("dag", "fair")])
async def test_domain_cluster_gets_its_domains_fallback(
    client: httpx.AsyncClient, cid: str, domain: str, fallback: str
) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(domain=domain))
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["domain"] == domain
    assert body["fallback"] == fallback
    assert [c["domain"] for c in await _listed(client) if c["id"] == cid] == [domain]


async def test_another_domains_heuristic_is_422_naming_the_field(
    client: httpx.AsyncClient, cid: str
) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(domain="gpu", policy="f1"))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.policy"
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(domain="gpu", fallback="sjf-cp"))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.fallback"
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(policy="tiresias-2dlas"))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.policy"
    assert (await client.get(f"/v1/clusters/{cid}")).status_code == 404


async def test_a_domain_policy_of_the_domain_is_accepted(
    client: httpx.AsyncClient, cid: str
) -> None:
    r = await client.put(
        f"/v1/clusters/{cid}", json=cluster_body(domain="gpu", policy="las", fallback="fifo")
    )
    assert r.status_code == 201, r.text
    assert (r.json()["policy"], r.json()["fallback"]) == ("las", "fifo")


async def test_an_hpc_model_does_not_decide_a_gpu_cluster(
    client: httpx.AsyncClient, cid: str
) -> None:
    r = await client.put(
        f"/v1/clusters/{cid}", json=cluster_body(domain="gpu", policy="hpc-kernel")
    )
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.policy"


async def test_domain_is_fixed_after_creation(client: httpx.AsyncClient, cid: str) -> None:
    assert (await client.put(f"/v1/clusters/{cid}", json=cluster_body())).status_code == 201
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(domain="gpu"))
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "domain_fixed"
    assert (await client.get(f"/v1/clusters/{cid}")).json()["domain"] == "hpc"


async def test_unknown_domain_is_422(client: httpx.AsyncClient, cid: str) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(domain="quantum"))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.domain"


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "f1", "hpc-kernel-none"])
async def test_an_hpc_cluster_takes_hpc_heuristics_and_models(
    client: httpx.AsyncClient, cid: str, policy: str
) -> None:
    r = await client.put(f"/v1/clusters/{cid}", json=cluster_body(policy=policy))
    assert r.status_code == 201, r.text
    assert r.json()["policy"] == policy


async def test_gpu_settings_are_stored_and_replaced(client: httpx.AsyncClient, cid: str) -> None:
    body = cluster_body(domain="gpu", gpu={"restart_cost_s": 12, "las_thresholds_gpu_s": [100]})
    assert (await client.put(f"/v1/clusters/{cid}", json=body)).status_code == 201
    read = (await client.get(f"/v1/clusters/{cid}")).json()["gpu"]
    assert (read["restart_cost_s"], read["las_thresholds_gpu_s"]) == (12, [100])
    body["gpu"] = {"restart_cost_s": 45}
    assert (await client.put(f"/v1/clusters/{cid}", json=body)).status_code == 200
    read = (await client.get(f"/v1/clusters/{cid}")).json()["gpu"]
    assert read["restart_cost_s"] == 45


async def test_dag_settings_are_stored_and_refused_elsewhere(
    client: httpx.AsyncClient, cid: str
) -> None:
    slot = {"executor_capacity": {"cpu": 2, "memory_gb": 6}, "weighted_fair_alpha": 1.5}
    body = cluster_body(domain="dag", dag=slot)
    assert (await client.put(f"/v1/clusters/{cid}", json=body)).status_code == 201
    read = (await client.get(f"/v1/clusters/{cid}")).json()
    assert read["dag"] == slot
    assert read["gpu"] is None
    r = await client.put(f"/v1/clusters/{cid}-hpc", json=cluster_body(dag=slot))
    assert r.status_code == 422
    assert r.json()["error"]["details"][0]["field"] == "body.dag"
