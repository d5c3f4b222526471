"""The dashboard's page of a gpu cluster: GPUs per node, the queue, running jobs with the
attained service Kairos tracks, and each round's preemptions."""

from __future__ import annotations

import re

import httpx

from tests.factories import cluster_body

T0 = 1_767_225_600.0


def _row(html: str, attr: str, key: str) -> str:
    found = re.search(rf'<tr {attr}="{re.escape(key)}">(.*?)</tr>', html, re.S)
    assert found is not None, key
    return found.group(1)


async def test_gpu_cluster_page(client: httpx.AsyncClient, cid: str) -> None:
    r = await client.put(
        f"/v1/clusters/{cid}", json=cluster_body(domain="gpu", resources=["gpu"], policy="las")
    )
    assert r.status_code == 201, r.text
    nodes = [{"id": "n0", "capacity": {"gpu": 4}}, {"id": "n1", "capacity": {"gpu": 4}}]
    await client.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes})
    # "long" has no run-time estimate (optional on gpu clusters), "big" one of 60 s
    for job_id, at, estimate in (("long", T0, None), ("big", T0 + 1, 60.0)):
        body = {"id": job_id, "tasks": 4, "per_task": {"gpu": 1}, "submit_time": at}
        if estimate is not None:
            body["walltime_s"] = estimate
        r = await client.post(f"/v1/clusters/{cid}/jobs", json=body)
        assert r.status_code == 201, r.text
    await client.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 2})
    late = {"id": "late", "tasks": 8, "per_task": {"gpu": 1}, "walltime_s": 60.0}
    await client.post(
        f"/v1/clusters/{cid}/jobs", json={**late, "submit_time": T0 + 50, "max_tasks": 8}
    )
    d = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 102})).json()
    assert sorted(d["preemptions"]) == ["big", "long"]

    page = await client.get(f"/ui/clusters/{cid}")
    assert page.status_code == 200, page.text
    html = page.text
    assert 'data-testid="restart-cost">30 s' in html
    assert "8 of 8 in use" in html
    node = _row(html, "data-node", "n0")
    assert re.findall(r'<td class="num">([^<]*)</td>', node) == ["4", "4", "0"]
    running = _row(html, "data-job", "late")
    assert "n0\u00d74" in running  # node x GPUs
    assert "n1\u00d74" in running
    queued = _row(html, "data-job", "long")
    # 4 GPUs for 100 s, kept while pending, one preemption
    assert re.findall(r'<td class="num">([^<]*)</td>', queued)[1:4] == ["400", "100", "1"]
    estimate = r'<td class="num" data-testid="estimate">([^<]*)</td>'
    assert re.findall(estimate, queued) == ["\u2014"]
    assert re.findall(estimate, _row(html, "data-job", "big")) == ["60"]
    newest = _row(html, "data-decision", d["id"])
    assert "long, big" in newest
