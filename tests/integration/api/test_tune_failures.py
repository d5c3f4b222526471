"""A tune that cannot finish fails, says why in the tune and the audit log, and leaves its
cluster's policies as they were: over its time budget (stopped), its program crashing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.services import tunes
from tests.integration.api.tune_helpers import T0, Planned, audit, record, setup_cluster, wait_tune


async def _cluster_with_history(client: httpx.AsyncClient, cid: str) -> dict[str, Any]:
    await setup_cluster(client, cid, nodes=4, cpu=8, backfill="none")
    # sixteen jobs that all start in one round and end one after another
    jobs = [Planned(f"j{k}", T0, 60.0 + k, 1 + k % 2, 120.0, "u1") for k in range(16)]
    await record(client, cid, jobs)
    cluster: dict[str, Any] = (await client.get(f"/v1/clusters/{cid}")).json()
    return cluster


async def _fails_with(client: httpx.AsyncClient, cid: str, code: str) -> dict[str, Any]:
    before = await _cluster_with_history(client, cid)
    r = await client.post(
        f"/v1/clusters/{cid}/tune", json={"window_length": 8, "time_budget_s": 30.0}
    )
    assert r.status_code == 202, r.text
    tune = await wait_tune(client, cid, r.json()["id"], timeout_s=120.0)
    assert tune["state"] == "failed"
    assert tune["error"]["code"] == code, tune["error"]
    assert tune["result"] is None
    assert tune["phase"] == "none"
    after = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (after["policy"], after["shadow_policy"]) == (before["policy"], before["shadow_policy"])
    events = list(reversed(await audit(client, cid)))
    assert [e["action"] for e in events] == ["tune.start", "tune.fail"]
    assert events[1]["details"]["code"] == code
    assert events[1]["details"]["reason"] == tune["error"]["message"]
    r = await client.post(f"/v1/clusters/{cid}/tunes/{tune['id']}/promote", json={"force": True})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "tune_failed"
    return tune


async def test_a_tune_past_its_time_budget_is_stopped(
    client: httpx.AsyncClient, cid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the procedure would use its 30 s; the runner's deadline is moved to 0.5 s after start
    monkeypatch.setattr(tunes, "OVERRUN_GRACE_S", -29.5)
    tune = await _fails_with(client, cid, "time_budget_exceeded")
    assert "time budget of 30 s" in tune["error"]["message"]


async def test_a_crashing_tune_program_fails_the_tune(
    client: httpx.AsyncClient, cid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tunes, "WORKER_MODULE", "app.no_such_tune_worker")
    tune = await _fails_with(client, cid, "crash")
    # tuning starts from a ranking model: a heuristic is no start
    r = await client.post(
        f"/v1/clusters/{cid}/tune", json={"window_length": 8, "from_policy": "sjf"}
    )
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "not_a_ranking_model"
    assert r.json()["error"]["details"][0]["field"] == "body.from_policy"
    assert "exited with status 1" in tune["error"]["message"]
    assert "No module named app.no_such_tune_worker" in tune["error"]["message"]
