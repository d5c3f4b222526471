"""The dashboard's paging, decision page, times with a zone and model descriptions (issue 24,
item 8), through ASGI on the embedded SQLite database like the rest of the /ui tests."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.schemas.decision import DecisionDetail
from app.settings import Settings
from app.ui import views
from app.ui.router import templates
from app.ui.settings import UISettings, get_ui_settings

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


def _app(tmp_path: Path, rows: int) -> FastAPI:
    app = create_app(Settings(DATABASE_URL=f"sqlite:///{tmp_path / 'kairos.db'}"))
    app.dependency_overrides[get_ui_settings] = lambda: UISettings(
        REPORTS_DIR=str(tmp_path / "none"), UI_ROWS=rows
    )
    return app


async def _client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


@pytest.fixture
async def ui(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(_app(tmp_path, rows=2)):
        yield c


async def _cluster(c: httpx.AsyncClient, cid: str, jobs: int, policy: str = "hpc-kernel") -> None:
    body = {"resources": ["cpu"], "policy": policy, "shadow_policy": "sjf"}
    assert (await c.put(f"/v1/clusters/{cid}", json=body)).status_code == 201
    nodes = [
        {"id": "n1", "capacity": {"cpu": 8}},
        {"id": "n2", "capacity": {"cpu": 8}, "state": "drain"},
    ]
    assert (await c.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes})).status_code == 200
    for i in range(jobs):
        job = {"id": f"job-{i}", "per_task": {"cpu": 5}, "walltime_s": 60 + i}
        assert (await c.post(f"/v1/clusters/{cid}/jobs", json=job)).status_code == 201


def _link(page: str, table: str, rel: str) -> str | None:
    """The previous/next link of one table's pager, or None."""
    if f'data-testid="pager-{table}"' not in page:
        return None
    nav = page.split(f'data-testid="pager-{table}"', 1)[1].split("</nav>", 1)[0]
    found = re.findall(rf'<a rel="{rel}" href="([^"]+)"', nav)
    return html.unescape(found[0]) if found else None


def _queue_jobs(page: str) -> list[str]:
    queue = page.split('data-testid="queue"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'data-job="([^"]+)"', queue)


class TestPaging:
    async def test_the_queue_pages_forward_and_back(self, ui: httpx.AsyncClient) -> None:
        await _cluster(ui, "c1", jobs=5)
        first = (await ui.get("/ui/clusters/c1")).text
        assert _queue_jobs(first) == ["job-0", "job-1"]
        assert _link(first, "queue", "prev") is None
        next_href = _link(first, "queue", "next")
        assert next_href is not None
        second = (await ui.get(next_href)).text
        assert _queue_jobs(second) == ["job-2", "job-3"]
        assert "page 2" in second
        third_href = _link(second, "queue", "next")
        assert third_href is not None
        third = (await ui.get(third_href)).text
        assert _queue_jobs(third) == ["job-4"]
        assert _link(third, "queue", "next") is None
        back = _link(third, "queue", "prev")
        assert back is not None
        assert _queue_jobs((await ui.get(back)).text) == ["job-2", "job-3"]
        back_to_first = _link(second, "queue", "prev")
        assert back_to_first == "/ui/clusters/c1"
        assert _queue_jobs((await ui.get(back_to_first)).text) == ["job-0", "job-1"]

    async def test_decisions_and_clusters_page_too(self, ui: httpx.AsyncClient) -> None:
        for cid in ("a", "b", "c"):
            await _cluster(ui, cid, jobs=0)
        for _ in range(3):
            assert (await ui.post("/v1/clusters/a/schedule", json={})).status_code == 200
        overview = (await ui.get("/ui")).text
        assert re.findall(r'data-cluster="([^"]+)"', overview) == ["a", "b"]
        more = _link(overview, "clusters", "next")
        assert more is not None
        assert re.findall(r'data-cluster="([^"]+)"', (await ui.get(more)).text) == ["c"]
        page = (await ui.get("/ui/clusters/a")).text
        older = _link(page, "decisions", "next")
        assert older is not None
        assert len(re.findall(r"data-decision=", (await ui.get(older)).text)) == 1

    async def test_a_cursor_not_issued_is_an_html_422(self, ui: httpx.AsyncClient) -> None:
        await _cluster(ui, "c1", jobs=1)
        r = await ui.get("/ui/clusters/c1?queue=bogus")
        assert r.status_code == 422
        assert "cursor" in r.text


class TestDecisionPage:
    async def test_ids_link_to_a_page_with_input_reasons_policy_and_shadow(
        self, ui: httpx.AsyncClient
    ) -> None:
        await _cluster(ui, "c1", jobs=3)
        d = (await ui.post("/v1/clusters/c1/schedule", json={"explain": True})).json()
        page = (await ui.get("/ui/clusters/c1")).text
        assert f'href="/ui/decisions/{d["id"]}"' in page
        r = await ui.get(f"/ui/decisions/{d['id']}")
        assert r.status_code == 200
        text = r.text
        assert 'data-testid="input-nodes">2 <span class="muted">(1 drain, 1 up)' in text
        assert 'data-testid="input-pending">3<' in text
        assert 'data-testid="input-running">0<' in text
        assert "hpc-kernel@" in text
        assert "onnx" in text
        assert "primary" in text
        jobs = text.split('data-testid="decision-jobs"', 1)[1].split("</table>", 1)[0]
        assert re.findall(r'data-job="([^"]+)"', jobs) == d["explain"]["order"]
        for job_id, reason in d["explain"]["not_started"].items():
            assert html.escape(reason) in jobs, job_id
        assert "started on n1 (1 task)" in jobs
        assert "sjf: job-0" in text  # the shadow's choice
        assert ISO_UTC.search(text.split('data-testid="decision-time">', 1)[1])

    def test_the_fallback_and_its_reason(self) -> None:
        decision = DecisionDetail.model_validate(
            {
                "id": "dec_1", "request_id": "req_1", "cluster_id": "c1", "created_at": 0.0,
                "policy": {"name": "f1", "version": "1", "kind": "heuristic"},
                "fallback": {"used": True, "reason": "model_missing"},
                "allocations": [{"job_id": "a", "placements": [{"node_id": "n1", "tasks": 1}]}],
                "reservations": [], "queue_length": 2, "latency_ms": 1.0, "dry_run": False,
                "input": {"nodes": [{"id": "n1", "capacity": {"cpu": 4}}],
                          "pending": [{"id": "a"}, {"id": "b", "tasks": 2}], "running": []},
            }
        )  # fmt: skip
        text = (
            templates()
            .get_template("decision.html")
            .render(
                d=decision, brief=views.decision_brief(decision), jobs=views.job_outcomes(decision)
            )
        )
        fallback = text.split('data-testid="decision-fallback">', 1)[1].split("</dd>", 1)[0]
        assert "fallback: model_missing" in fallback
        assert "reason: model_missing" in fallback
        assert "1970-01-01T00:00:00+00:00" in text
        jobs = text.split('data-testid="decision-jobs"', 1)[1].split("</table>", 1)[0]
        assert "started on n1 (1 task)" in jobs
        assert "no explanation stored" in jobs  # b, decided without explain
        assert "shadow" not in jobs

    async def test_an_unknown_decision_is_an_html_404(self, ui: httpx.AsyncClient) -> None:
        r = await ui.get("/ui/decisions/dec_00000000000000000000000000000000")
        assert r.status_code == 404
        assert "text/html" in r.headers["content-type"]


async def test_times_carry_the_utc_offset(ui: httpx.AsyncClient) -> None:
    await _cluster(ui, "c1", jobs=1)
    page = (await ui.get("/ui/clusters/c1")).text
    queue = page.split('data-testid="queue"', 1)[1].split("</table>", 1)[0]
    assert ISO_UTC.search(queue)


async def test_models_say_what_they_are(ui: httpx.AsyncClient) -> None:
    page = (await ui.get("/ui")).text
    rows = re.findall(r"<tr><td>([^<]+)</td>.*?data-testid=\"about\">([^<]*)</td>", page, re.S)
    about = dict(rows)
    assert about["hpc-kernel-kth-sp2"].startswith("learned ranking policy")
    assert "KTH-SP2" in about["hpc-kernel-kth-sp2"]
    assert all(text.strip() for text in about.values()), about


async def test_charts_of_queue_utilisation_and_learned_share(ui: httpx.AsyncClient) -> None:
    await _cluster(ui, "c1", jobs=3)
    for _ in range(2):
        assert (await ui.post("/v1/clusters/c1/schedule", json={})).status_code == 200
    page = (await ui.get("/ui/clusters/c1")).text
    charts = page.split('data-testid="charts">', 1)[1].split("</div>", 1)[0]
    svgs = re.findall(r"<svg .*?</svg>", charts)
    assert [re.search(r'aria-label="([^"]+)"', s).group(1) for s in svgs] == [  # type: ignore[union-attr]
        "queue length",
        "utilisation",
        "learned policy (last 10)",
    ]
    for svg in svgs:
        (points,) = re.findall(r'<polyline points="([^"]*)"', svg)
        assert len(points.split()) == 2  # one point per decision
    assert "queue length: 2<" in svgs[0]  # 3 jobs, one started by the first round
    assert "utilisation: 62%<" in svgs[1]  # 5 of n1's 8 cpu before the second round
    assert "learned policy (last 10): 100%<" in svgs[2]
    assert "http://" not in charts.replace("http://www.w3.org/2000/svg", "")
