"""The dashboard shows the ``warnings`` of queued jobs that cannot fit on any current node
(ADR 0092; issue 24, item 5), through ASGI on the embedded SQLite database like the other /ui
tests."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from app.ui.settings import UISettings, get_ui_settings


@pytest.fixture
async def ui(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(DATABASE_URL=f"sqlite:///{tmp_path / 'kairos.db'}"))
    app.dependency_overrides[get_ui_settings] = lambda: UISettings(
        REPORTS_DIR=str(tmp_path / "none"), UI_ROWS=50
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


def _queue_rows(page: str) -> dict[str, str]:
    """The queue table's rows by job id (their HTML)."""
    table = page.split('data-testid="queue"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr data-job="([^"]+)"(.*?)</tr>', table, re.DOTALL)
    return dict(rows)


def _codes(row: str) -> list[str]:
    return re.findall(r'<li data-code="([^"]+)"', row)


async def _submit(c: httpx.AsyncClient, cid: str, job: dict[str, object]) -> list[dict[str, str]]:
    r = await c.post(f"/v1/clusters/{cid}/jobs", json=job)
    assert r.status_code == 201, r.text
    warnings: list[dict[str, str]] = r.json()["warnings"]
    return warnings


async def test_queue_shows_each_jobs_warnings_with_code_field_and_message(
    ui: httpx.AsyncClient,
) -> None:
    assert (await ui.put("/v1/clusters/c1", json={"resources": ["cpu", "gpu"]})).status_code == 201
    nodes = {"nodes": [{"id": "n1", "capacity": {"cpu": 8}}]}
    assert (await ui.put("/v1/clusters/c1/nodes", json=nodes)).status_code == 200
    huge = await _submit(ui, "c1", {"id": "huge", "per_task": {"cpu": 20}, "walltime_s": 60})
    gang = await _submit(
        ui, "c1", {"id": "gang", "tasks": 3, "per_task": {"cpu": 4}, "walltime_s": 60}
    )
    fits = await _submit(ui, "c1", {"id": "fits", "per_task": {"cpu": 2}, "walltime_s": 60})
    assert [w["code"] for w in huge] == ["task_exceeds_every_node"]
    assert [w["code"] for w in gang] == ["gang_exceeds_cluster"]
    assert fits == []

    page = (await ui.get("/ui/clusters/c1")).text
    rows = _queue_rows(page)
    assert set(rows) == {"huge", "gang", "fits"}
    assert _codes(rows["huge"]) == ["task_exceeds_every_node"]
    assert _codes(rows["gang"]) == ["gang_exceeds_cluster"]
    assert _codes(rows["fits"]) == []
    # the API's message and field, as the API words them
    assert html.escape(huge[0]["message"], quote=True) in rows["huge"]
    assert 'data-field="per_task.cpu"' in rows["huge"]
    assert 'data-field="tasks"' in rows["gang"]
    assert 'class="warned"' in rows["huge"]
    assert 'class="warned"' not in rows["fits"]
    notice = page.split('data-testid="queue-warnings"', 1)[1].split("</p>", 1)[0]
    assert "2 jobs cannot fit on any current node" in notice


async def test_warnings_follow_the_nodes_and_a_cluster_without_nodes_says_so(
    ui: httpx.AsyncClient,
) -> None:
    assert (await ui.put("/v1/clusters/c2", json={"resources": ["cpu"]})).status_code == 201
    await _submit(ui, "c2", {"id": "early", "per_task": {"cpu": 20}, "walltime_s": 60})
    rows = _queue_rows((await ui.get("/ui/clusters/c2")).text)
    assert _codes(rows["early"]) == ["no_nodes"]

    small = {"nodes": [{"id": "n1", "capacity": {"cpu": 8}}]}
    assert (await ui.put("/v1/clusters/c2/nodes", json=small)).status_code == 200
    rows = _queue_rows((await ui.get("/ui/clusters/c2")).text)
    assert _codes(rows["early"]) == ["task_exceeds_every_node"]

    # a larger node arrives (even drained: it may come back): the warning is gone
    big = {"nodes": [{"id": "n2", "capacity": {"cpu": 32}, "state": "drain"}]}
    assert (await ui.put("/v1/clusters/c2/nodes", json=big)).status_code == 200
    page = (await ui.get("/ui/clusters/c2")).text
    assert _codes(_queue_rows(page)["early"]) == []
    assert 'data-testid="queue-warnings"' not in page
