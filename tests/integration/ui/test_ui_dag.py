"""The dashboard's DAG pages: a dag cluster links to its DAGs, and a DAG's page draws its stages
as a graph (one box per stage with its state and progress, one edge per dependency) beside a
table of the stages' progress. Through ASGI on the embedded SQLite database."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from app.ui.settings import UISettings, get_ui_settings
from tests.integration.api.dag_helpers import NOW, join_dag, make_dag_cluster


@pytest.fixture
async def ui(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        Settings(DATABASE_URL=f"sqlite:///{tmp_path / 'kairos.db'}", DEFAULT_DEADLINE_MS=5_000)
    )
    app.dependency_overrides[get_ui_settings] = lambda: UISettings(
        REPORTS_DIR=str(tmp_path / "none"), UI_ROWS=50
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


async def test_a_dags_page_draws_its_stages_and_progress(ui: httpx.AsyncClient) -> None:
    await make_dag_cluster(ui, "etl", nodes=1, cpu=8)
    assert (await ui.post("/v1/clusters/etl/dags", json=join_dag("q<1>", NOW))).status_code == 422
    assert (await ui.post("/v1/clusters/etl/dags", json=join_dag("q1", NOW))).status_code == 201
    decided = await ui.post("/v1/clusters/etl/schedule", json={"now": NOW + 1, "explain": True})
    assert decided.status_code == 200
    r = await ui.post(
        "/v1/clusters/etl/jobs/q1:filter/events", json={"type": "task_finished", "count": 1}
    )
    assert r.status_code == 200, r.text

    cluster = await ui.get("/ui/clusters/etl")
    assert cluster.status_code == 200
    assert 'href="/ui/clusters/etl/dags"' in cluster.text
    listing = await ui.get("/ui/clusters/etl/dags")
    assert listing.status_code == 200
    assert 'href="/ui/clusters/etl/dags/q1"' in listing.text

    page = await ui.get("/ui/clusters/etl/dags/q1")
    assert page.status_code == 200
    svg = page.text.split('data-testid="dag-graph"', 1)[1].split("</svg>", 1)[0]
    stages = dict(re.findall(r'<g class="stage" data-stage="([^"]+)" data-state="([^"]+)"', svg))
    assert stages == {"scan": "running", "filter": "running", "join": "pending"}
    edges = set(re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', svg))
    assert edges == {("scan", "join"), ("filter", "join")}
    # the join is drawn right of both its parents
    xs = dict(re.findall(r'data-stage="([^"]+)"[^>]*><title>[^<]*</title><rect x="(\d+)"', svg))
    assert int(xs["join"]) > max(int(xs["scan"]), int(xs["filter"]))
    assert "1/3 done" in svg  # filter: one of three tasks finished
    table = page.text.split('data-testid="stages"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'<tr data-stage="([^"]+)"', table) == ["scan", "filter", "join"]
    # the round's decision page reads its DAG input without the HPC shape
    decision = await ui.get(f"/ui/decisions/{decided.json()['id']}")
    assert decision.status_code == 200
    assert 'data-testid="input-nodes">1' in decision.text


async def test_an_unknown_dag_is_a_404_page(ui: httpx.AsyncClient) -> None:
    await make_dag_cluster(ui, "etl", nodes=1)
    r = await ui.get("/ui/clusters/etl/dags/nope")
    assert r.status_code == 404
