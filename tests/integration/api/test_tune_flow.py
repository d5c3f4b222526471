"""A cluster tuned through the API from a history recorded through the API: the shadow phase,
the guarded promotion, a promotion the guard refuses, an operator's forced promotion, and all
of it read back from the audit log.

Each tune runs the real procedure (``app.tuning.procedure`` in its child process) with a small
budget and short windows; the guard's verdicts are fixed by the histories, not by how far
training got: on a contended machine some heuristic beats FCFS on every set of windows (and
the winner is at most the best heuristic), and on a machine where every job starts at once every
candidate has a bounded slowdown of exactly 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.domains.hpc.heuristics import HEURISTIC_CLASSES
from app.domains.hpc.swf import parse_swf
from app.settings import Settings
from tests.integration.api.tune_helpers import (
    T0,
    Planned,
    audit,
    record,
    setup_cluster,
    wait_tune,
    workload,
)

pytestmark = pytest.mark.slow

#: small enough for a test, large enough for the procedure to validate every candidate
TUNE = {"time_budget_s": 4.0, "window_length": 16, "seed": 1}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    """The shared settings with this test's own models directory: the models a tune registers
    are written there, not into the checkout's ``models/``."""
    return Settings(
        DATABASE_URL=database_url,
        MAX_BODY_BYTES=256 * 1024,
        DEFAULT_DEADLINE_MS=5_000,
        MODELS_DIR=str(tmp_path / "models"),
    )


def _row(tune: dict[str, Any], candidate: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [r for r in tune["result"]["table"] if r["candidate"] == candidate]
    assert len(rows) == 1, (candidate, tune["result"]["table"])
    return rows[0]


async def test_shadow_then_guarded_promotion(client: httpx.AsyncClient, cid: str) -> None:
    await setup_cluster(client, cid, nodes=2, cpu=4, policy="fcfs", backfill="none")
    await record(client, cid, workload(72, seed=5, gap_s=35, max_tasks=6))
    history = await client.get(f"/v1/clusters/{cid}/history")
    assert parse_swf(history.text.splitlines()).n_jobs == 72

    key = {"Idempotency-Key": f"tune-{cid}"}
    r = await client.post(f"/v1/clusters/{cid}/tune", json=TUNE, headers=key)
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["state"] in ("queued", "running")
    assert started["baseline_policy"] == "fcfs"
    assert r.headers["location"] == f"/v1/clusters/{cid}/tunes/{started['id']}"
    again = await client.post(f"/v1/clusters/{cid}/tune", json=TUNE, headers=key)
    assert again.status_code == 202
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["id"] == started["id"]

    tune = await wait_tune(client, cid, started["id"])
    assert tune["state"] == "succeeded", tune["error"]
    assert tune["history_jobs"] == 72
    assert tune["progress"]["fraction"] == 1.0
    result = tune["result"]
    names = {r["candidate"] for r in result["table"]}
    assert set(HEURISTIC_CLASSES) <= names
    assert any(n.startswith("start:hpc-kernel-none@") for n in names)
    assert result["card"]["tuning"]["history_jobs"] == 72
    assert float(_row(tune, result["winner"])["avg_bsld"]) < float(_row(tune, "fcfs")["avg_bsld"])
    listed = (await client.get(f"/v1/clusters/{cid}/tunes")).json()["items"]
    assert [t["id"] for t in listed] == [tune["id"]]

    # the shadow phase: the result decides beside the primary, never applied
    assert tune["phase"] == "shadow"
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == ("fcfs", result["policy"])
    if result["kind"] == "model":
        policy = (await client.get(f"/v1/policies/{result['policy']}")).json()
        assert policy["scope"] == "tenant"
    else:
        assert result["recommendation"] == result["winner"] == result["policy"]
    job = {"id": "after", "per_task": {"cpu": 1}, "walltime_s": 60.0, "submit_time": T0 + 1e5}
    assert (await client.post(f"/v1/clusters/{cid}/jobs", json=job)).status_code == 201
    r = await client.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 1e5})
    assert r.status_code == 200
    report = (await client.get(f"/v1/clusters/{cid}/shadow-report")).json()
    assert report["shadow_policy"] == result["policy"]
    assert report["compared"] >= 1

    # the guarded promotion
    r = await client.post(f"/v1/clusters/{cid}/tunes/{tune['id']}/promote", json={})
    assert r.status_code == 200, r.text
    promoted = r.json()
    assert promoted["guard"]["passed"] is True
    assert promoted["forced"] is False
    assert (promoted["policy"], promoted["previous_policy"]) == (result["policy"], "fcfs")
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == (result["policy"], None)
    assert (await client.get(f"/v1/clusters/{cid}/tunes/{tune['id']}")).json()["phase"] == (
        "primary"
    )
    r = await client.post(f"/v1/clusters/{cid}/tunes/{tune['id']}/promote", json={})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "already_primary"
    # the promoted policy decides the cluster's rounds (no fallback)
    job = {"id": "later", "per_task": {"cpu": 1}, "walltime_s": 60.0, "submit_time": T0 + 2e5}
    assert (await client.post(f"/v1/clusters/{cid}/jobs", json=job)).status_code == 201
    decision = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 2e5})).json()
    assert decision["fallback"]["used"] is False, decision["fallback"]
    assert decision["policy"]["name"] == result["policy"].partition("@")[0]
    assert decision["allocations"][0]["job_id"] == "later"

    events = list(reversed(await audit(client, cid)))
    assert [e["action"] for e in events] == [
        "tune.start",
        "tune.finish",
        "tune.shadow",
        "tune.promote",
        "tune.promote_refused",
    ]
    assert events[1]["details"]["winner"] == result["winner"]
    assert events[2]["details"]["shadow_policy"] == result["policy"]
    assert events[3]["details"]["guard"]["passed"] is True
    assert events[3]["details"]["previous_policy"] == "fcfs"
    assert events[4]["details"]["code"] == "already_primary"


def _quiet(n: int) -> list[Planned]:
    """Jobs that never overlap: every one starts at its submit time under any policy."""
    return [
        Planned(f"q{k:03d}", T0 + 300.0 * k, 30.0 + 7 * (k % 9), 1 + k % 3, 400.0, "u1")
        for k in range(n)
    ]


async def test_the_guard_refuses_a_result_no_better_and_an_operator_forces_it(
    client: httpx.AsyncClient, cid: str
) -> None:
    await setup_cluster(client, cid, nodes=2, cpu=4, backfill="easy")
    ran = await record(client, cid, _quiet(40))
    assert all(r.start == r.submit for r in ran.values())
    before = (await client.get(f"/v1/clusters/{cid}")).json()

    r = await client.post(f"/v1/clusters/{cid}/tune", json={**TUNE, "auto_promote": True})
    assert r.status_code == 202, r.text
    assert "from_model" not in r.json()["params"]
    tune = await wait_tune(client, cid, r.json()["id"])
    assert tune["state"] == "succeeded", tune["error"]
    result = tune["result"]
    assert {row["avg_bsld"] for row in result["table"]} == {1.0}
    # a tie: a heuristic wins (a learned candidate needs a margin), nothing is registered
    winner = result["winner"]
    assert winner in HEURISTIC_CLASSES
    assert (result["kind"], result["policy"], result["recommendation"]) == (
        "heuristic",
        winner,
        winner,
    )
    assert result["card"]["kind"] == "heuristic"
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == (before["policy"], winner)

    # the current policy (the shipped default) has the same validation result: refused
    r = await client.post(f"/v1/clusters/{cid}/tunes/{tune['id']}/promote", json={"force": False})
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_not_better"
    assert "1.0000, not below" in error["message"]
    assert before["policy"] in error["message"]
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == (before["policy"], winner)

    r = await client.post(f"/v1/clusters/{cid}/tunes/{tune['id']}/promote", json={"force": True})
    assert r.status_code == 200, r.text
    forced = r.json()
    assert forced["forced"] is True
    assert forced["guard"]["passed"] is False
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == (winner, None)

    events = list(reversed(await audit(client, cid)))
    assert [e["action"] for e in events] == [
        "tune.start",
        "tune.finish",
        "tune.shadow",
        "tune.promote_refused",  # auto_promote: the guard's own attempt
        "tune.promote_refused",
        "tune.promote",
    ]
    by_guard, refused, promoted = (e["details"] for e in events[3:])
    assert (by_guard["by"], by_guard["code"]) == ("guard", "validation_not_better")
    assert (refused["by"], refused["code"]) == ("operator", "validation_not_better")
    assert refused["guard"]["current_avg_bsld"] == refused["guard"]["candidate_avg_bsld"] == 1.0
    assert (promoted["forced"], promoted["previous_policy"]) == (True, before["policy"])
