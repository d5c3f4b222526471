"""A tune whose winner is a learned model: the model is registered for the tenant alone, runs
as the cluster's shadow policy, and once promoted decides the cluster's rounds.

Which candidate the procedure picks depends on how far its training got within the budget, so
this test hands the runner's last step (:meth:`TuneRunner._finish`) the outcome of a model
winner directly: the shipped ranking model, renamed as the tune would name it, with a table in
which it beats the cluster's policy.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from app.db.orm import ClusterRecord, TuneRecord
from app.db.session import Database
from app.kernel.clock import epoch_now
from app.policy.registry import PACKAGED_MODELS
from app.services.tunes import RUNNING, TuneRunner
from app.settings import Settings
from tests.integration.api.tune_helpers import T0, audit, setup_cluster

SHIPPED = PACKAGED_MODELS / "hpc-kernel-none" / "1"


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


async def _running_tune(app: FastAPI, cid: str, runner: TuneRunner) -> tuple[str, int, str]:
    database: Database = app.state.database
    tune_id = f"tune_{uuid.uuid4().hex}"
    async with database.transaction(write=True) as session:
        cluster = (
            await session.execute(select(ClusterRecord).where(ClusterRecord.id == cid))
        ).scalar_one()
        record = TuneRecord(
            id=tune_id,
            tenant=cluster.tenant,
            cluster_pk=cluster.pk,
            cluster_id=cid,
            state=RUNNING,
            phase="none",
            params={"backfill": "none", "time_budget_s": 60.0, "auto_promote": False},
            baseline_policy=cluster.policy,
            owner=runner.owner,
            lease_until=epoch_now() + 600.0,
            started_at=epoch_now(),
            history_jobs=100,
        )
        session.add(record)
        await session.flush()
        return tune_id, record.pk, cluster.tenant


def _model_result(out: Path, name: str, version: str) -> dict[str, Any]:
    shutil.copytree(SHIPPED, out)
    card = json.loads((out / "card.json").read_text())
    card.update(name=name, version=version)
    (out / "card.json").write_text(json.dumps(card))
    table = [
        {"candidate": "tuned@3", "kind": "model", "avg_bsld": 2.0, "ratio": 0.8, "score": 0.8},
        {"candidate": "sjf", "kind": "heuristic", "avg_bsld": 2.5, "ratio": 1.0, "score": 1.0},
        {"candidate": "start:hpc-kernel-none@1", "kind": "model", "avg_bsld": 3.0, "ratio": 1.2},
    ]
    return {"winner": "tuned@3", "kind": "model", "table": table, "card": card, "model_dir": out}


async def test_a_learned_winner_is_the_tenants_shadow_then_its_primary(
    app: FastAPI, client: httpx.AsyncClient, cid: str, tmp_path: Path
) -> None:
    await setup_cluster(client, cid, nodes=2, cpu=4, backfill="none")
    assert (await client.get(f"/v1/clusters/{cid}")).json()["policy"] == "hpc-kernel-none"
    runner = TuneRunner(app.state.database, app.state.decisions)
    tune_id, pk, tenant = await _running_tune(app, cid, runner)
    name = f"tuned-{cid}"
    await runner._finish(tune_id, tenant, _model_result(tmp_path / "out", name, str(pk)), False)

    tune = (await client.get(f"/v1/clusters/{cid}/tunes/{tune_id}")).json()
    assert (tune["state"], tune["phase"]) == ("succeeded", "shadow")
    result = tune["result"]
    assert (result["kind"], result["policy"], result["recommendation"]) == (
        "model",
        f"{name}@{pk}",
        None,
    )
    policy = (await client.get(f"/v1/policies/{name}@{pk}")).json()
    assert (policy["scope"], policy["loaded"], policy["domain"]) == ("tenant", True, "hpc")
    cluster = (await client.get(f"/v1/clusters/{cid}")).json()
    assert (cluster["policy"], cluster["shadow_policy"]) == ("hpc-kernel-none", f"{name}@{pk}")

    job = {"id": "a", "per_task": {"cpu": 1}, "walltime_s": 60.0, "submit_time": T0, "tasks": 2}
    assert (await client.post(f"/v1/clusters/{cid}/jobs", json=job)).status_code == 201
    decision = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": T0})).json()
    assert decision["policy"]["name"] == "hpc-kernel-none"
    report = (await client.get(f"/v1/clusters/{cid}/shadow-report")).json()
    assert [(p["shadow_policy"], p["compared"]) for p in report["policies"]] == [
        (f"{name}@{pk}", 1)
    ]

    r = await client.post(f"/v1/clusters/{cid}/tunes/{tune_id}/promote")  # no body: guarded
    assert r.status_code == 200, r.text
    guard = r.json()["guard"]
    assert (guard["passed"], guard["current_avg_bsld"], guard["candidate_avg_bsld"]) == (
        True,
        3.0,
        2.0,
    )
    job = {**job, "id": "b"}
    assert (await client.post(f"/v1/clusters/{cid}/jobs", json=job)).status_code == 201
    decision = (await client.post(f"/v1/clusters/{cid}/schedule", json={"now": T0 + 1})).json()
    assert decision["policy"]["name"] == name
    assert decision["policy"]["version"] == str(pk)
    assert decision["fallback"]["used"] is False, decision["fallback"]
    assert [a["job_id"] for a in decision["allocations"]] == ["b"]

    actions = [e["action"] for e in reversed(await audit(client, cid))]
    assert actions == ["tune.finish", "tune.shadow", "tune.promote"]
    uploads = (await client.get("/v1/audit", params={"action": "policy.upload"})).json()
    assert all(e["subject"] != f"{name}@{pk}" for e in uploads["items"])  # a tune, not an upload

    # a runner other than the tune's owner never finishes it
    other = TuneRunner(app.state.database, app.state.decisions)
    second, pk2, _ = await _running_tune(app, cid, runner)
    await other._finish(second, tenant, _model_result(tmp_path / "o2", name, str(pk2)), False)
    assert (await client.get(f"/v1/clusters/{cid}/tunes/{second}")).json()["state"] == "running"
