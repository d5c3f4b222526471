"""The /ui dashboard through ASGI on the embedded SQLite database: pages, auth, tenancy, files."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.schemas.decision import (
    AllocationRead,
    DecisionRead,
    FallbackRead,
    PolicyRefRead,
    ShadowRead,
)
from app.schemas.decision import PlacementRead as DecisionPlacement
from app.settings import Settings
from app.ui import views
from app.ui.auth import COOKIE, new_session_token, session_token
from app.ui.settings import UISettings, get_ui_settings

KEYS = "acme:sk-acme,globex:sk-globex"


async def _client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
            yield c


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    (root / "hpc").mkdir(parents=True)
    (root / "hpc" / "slowdown.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (root / "notes.txt").write_text("not a plot")
    (tmp_path / "secret.png").write_bytes(b"\x89PNG")
    return root


def _app(tmp_path: Path, reports: Path, api_keys: str | None) -> FastAPI:
    app = create_app(
        Settings(DATABASE_URL=f"sqlite:///{tmp_path / 'kairos.db'}", API_KEYS=api_keys)
    )
    app.dependency_overrides[get_ui_settings] = lambda: UISettings(REPORTS_DIR=str(reports))
    return app


@pytest.fixture
async def open_ui(tmp_path: Path, reports: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(_app(tmp_path, reports, None)):
        yield c


@pytest.fixture
async def keyed_ui(tmp_path: Path, reports: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(_app(tmp_path, reports, KEYS)):
        yield c


async def _populate(c: httpx.AsyncClient, cid: str, headers: dict[str, str] | None = None):
    h = headers or {}
    r = await c.put(f"/v1/clusters/{cid}", json={"resources": ["cpu", "gpu"]}, headers=h)
    assert r.status_code == 201, r.text
    nodes = [
        {"id": "n1", "capacity": {"cpu": 8, "gpu": 2}},
        {"id": "n2", "capacity": {"cpu": 8}, "state": "drain"},
    ]
    r = await c.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes}, headers=h)
    assert r.status_code == 200, r.text
    for i in range(3):
        job = {"id": f"job-{i}", "per_task": {"cpu": 3}, "walltime_s": 60}
        r = await c.post(f"/v1/clusters/{cid}/jobs", json=job, headers=h)
        assert r.status_code == 201, r.text
    r = await c.post(f"/v1/clusters/{cid}/schedule", json={}, headers=h)
    assert r.status_code == 200, r.text
    return r.json()


class TestPages:
    async def test_overview_lists_clusters_with_utilisation(self, open_ui: httpx.AsyncClient):
        await _populate(open_ui, "alpha")
        r = await open_ui.get("/ui")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")
        assert 'data-cluster="alpha"' in r.text
        assert "75%" in r.text  # cpu: 6 of the 8 on the one up node
        assert 'href="/ui/static/dashboard.css"' in r.text
        assert "http://" not in r.text.replace("http://www.w3.org", "")  # no external assets
        assert 'data-testid="policies"' in r.text

    async def test_cluster_page(self, open_ui: httpx.AsyncClient):
        decision = await _populate(open_ui, "alpha")
        r = await open_ui.get("/ui/clusters/alpha")
        assert r.status_code == 200
        assert 'data-node="n1"' in r.text
        assert "state-drain" in r.text
        assert r.text.count("data-job=") == 3  # 2 running + 1 queued
        assert f'data-decision="{decision["id"]}"' in r.text
        assert decision["policy"]["name"] in r.text

    async def test_shadow_agreement_shown(self, open_ui: httpx.AsyncClient):
        body = {"resources": ["cpu"], "policy": "fcfs", "shadow_policy": "sjf"}
        assert (await open_ui.put("/v1/clusters/sh", json=body)).status_code == 201
        nodes = {"nodes": [{"id": "n1", "capacity": {"cpu": 4}}]}
        assert (await open_ui.put("/v1/clusters/sh/nodes", json=nodes)).status_code == 200
        for job_id, walltime in (("long", 500), ("short", 5)):
            job = {"id": job_id, "per_task": {"cpu": 4}, "walltime_s": walltime}
            assert (await open_ui.post("/v1/clusters/sh/jobs", json=job)).status_code == 201
        assert (await open_ui.post("/v1/clusters/sh/schedule", json={})).status_code == 200
        report = (await open_ui.get("/v1/clusters/sh/shadow-report")).json()
        assert report["compared"] == 1
        overview = (await open_ui.get("/ui")).text
        assert 'data-testid="shadow-report"' in overview
        assert "shadow sjf" in overview
        page = (await open_ui.get("/ui/clusters/sh")).text
        assert page.count('data-testid="shadow-report"') == 1
        rate = report["agreement_rate"]
        assert f"{100 * rate:.0f}%" in page

    async def test_unknown_cluster_is_an_html_404(self, open_ui: httpx.AsyncClient):
        r = await open_ui.get("/ui/clusters/nope")
        assert r.status_code == 404
        assert "text/html" in r.headers["content-type"]

    async def test_html_is_escaped(self, open_ui: httpx.AsyncClient):
        body = {"resources": ["cpu"], "name": "<script>alert(1)</script>"}
        assert (await open_ui.put("/v1/clusters/x1", json=body)).status_code == 201
        r = await open_ui.get("/ui")
        assert "<script>alert(1)</script>" not in r.text
        assert "&lt;script&gt;" in r.text

    async def test_report_plots_listed_and_served(self, open_ui: httpx.AsyncClient):
        r = await open_ui.get("/ui")
        assert "/ui/reports/hpc/slowdown.svg" in r.text
        assert "notes.txt" not in r.text
        plot = await open_ui.get("/ui/reports/hpc/slowdown.svg")
        assert plot.status_code == 200
        assert plot.headers["content-type"].startswith("image/svg")

    @pytest.mark.parametrize(
        "path",
        [
            "/ui/reports/%2e%2e/secret.png",
            "/ui/reports/hpc/..%2F..%2Fsecret.png",
            "/ui/reports/notes.txt",
        ],
    )
    async def test_report_paths_cannot_escape(self, open_ui: httpx.AsyncClient, path: str):
        assert (await open_ui.get(path)).status_code == 404

    async def test_only_known_static_files(self, open_ui: httpx.AsyncClient):
        assert (await open_ui.get("/ui/static/dashboard.css")).status_code == 200
        assert (await open_ui.get("/ui/static/router.py")).status_code == 404

    async def test_not_in_openapi(self, open_ui: httpx.AsyncClient):
        spec = (await open_ui.get("/openapi.json")).json()
        assert not [p for p in spec["paths"] if p.startswith("/ui")]


class TestAuth:
    async def test_no_key_redirects_to_login(self, keyed_ui: httpx.AsyncClient):
        r = await keyed_ui.get("/ui/clusters/a")
        assert r.status_code == 303
        assert r.headers["location"] == "/ui/login?next=%2Fui%2Fclusters%2Fa"
        form = await keyed_ui.get("/ui/login")
        assert form.status_code == 200
        assert 'name="key"' in form.text
        assert 'method="post"' in form.text

    async def test_bad_key_is_401(self, keyed_ui: httpx.AsyncClient):
        r = await keyed_ui.get("/ui", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        assert "not valid" in r.text
        r = await keyed_ui.post("/ui/login", data={"key": "nope", "next": "/ui"})
        assert r.status_code == 401
        assert "set-cookie" not in r.headers

    @pytest.mark.parametrize(
        "address",
        [
            "/ui?key=sk-acme&refresh=30",
            "/ui/clusters/a?refresh=30&key=sk-acme",
            "/ui/login?key=sk-acme&next=/ui",
            "/ui/reports/hpc/slowdown.svg?api_key=sk-acme",
            "/ui?token=sk-acme",
        ],
    )
    async def test_a_key_in_the_address_is_refused_and_never_used(
        self, keyed_ui: httpx.AsyncClient, address: str
    ):
        r = await keyed_ui.get(address)
        assert r.status_code == 400
        assert "set-cookie" not in r.headers
        assert "sk-acme" not in r.text
        assert 'data-testid="login-link"' in r.text
        assert "/ui/login?next=" in r.text
        assert (await keyed_ui.get("/ui")).status_code == 303  # still logged out

    async def test_the_refusal_points_back_to_the_page_without_the_key(
        self, keyed_ui: httpx.AsyncClient
    ):
        r = await keyed_ui.get("/ui/clusters/a?key=sk-acme&refresh=30")
        assert 'href="/ui/login?next=%2Fui%2Fclusters%2Fa%3Frefresh%3D30"' in r.text

    async def test_a_key_in_the_address_is_refused_without_auth_too(
        self, open_ui: httpx.AsyncClient
    ):
        assert (await open_ui.get("/ui?key=anything")).status_code == 400

    async def test_login_form_sets_a_session_cookie_not_the_key(self, keyed_ui: httpx.AsyncClient):
        r = await keyed_ui.post("/ui/login", data={"key": "sk-acme", "next": "/ui?refresh=30"})
        assert r.status_code == 303
        assert r.headers["location"] == "/ui?refresh=30"
        cookie = r.headers.get_list("set-cookie")[0]
        assert cookie.startswith(f"{COOKIE}=")
        assert "sk-acme" not in "".join(r.headers.get_list("set-cookie"))
        assert "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        assert "Path=/ui" in cookie
        assert "Secure" not in cookie  # plain http here
        page = await keyed_ui.get("/ui")  # the client keeps the cookie
        assert page.status_code == 200
        assert "acme" in page.text
        token = keyed_ui.cookies[COOKIE]
        api = await keyed_ui.get("/v1/clusters", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 401  # the session token is no API key

    async def test_the_session_cookie_is_secure_over_https(self, tmp_path: Path, reports: Path):
        app = _app(tmp_path, reports, KEYS)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="https://kairos.test") as c:
                r = await c.post("/ui/login", data={"key": "sk-acme"})
                assert "Secure" in r.headers.get_list("set-cookie")[0]

    async def test_a_session_is_valid_on_every_replica_with_the_same_keys(
        self, keyed_ui: httpx.AsyncClient, tmp_path: Path, reports: Path
    ):
        await keyed_ui.post("/ui/login", data={"key": "sk-globex"})
        cookie = {"Cookie": f"{COOKIE}={keyed_ui.cookies[COOKIE]}"}
        (tmp_path / "replica").mkdir()
        (tmp_path / "other").mkdir()
        async for replica in _client(_app(tmp_path / "replica", reports, KEYS)):
            page = await replica.get("/ui", headers=cookie)
            assert page.status_code == 200
            assert "globex" in page.text
        async for other in _client(_app(tmp_path / "other", reports, "globex:sk-rotated")):
            assert (await other.get("/ui", headers=cookie)).status_code == 303

    async def test_login_refuses_open_redirects_and_logout_ends_the_session(
        self, keyed_ui: httpx.AsyncClient
    ):
        r = await keyed_ui.post("/ui/login", data={"key": "sk-globex", "next": "https://evil"})
        assert r.status_code == 303
        assert r.headers["location"] == "/ui"
        assert (await keyed_ui.get("/ui")).status_code == 200
        out = await keyed_ui.post("/ui/logout")
        assert out.status_code == 303
        assert all("Max-Age=0" in c for c in out.headers.get_list("set-cookie"))
        assert (await keyed_ui.get("/ui")).status_code == 303

    async def test_a_tampered_or_expired_session_is_refused(self, keyed_ui: httpx.AsyncClient):
        now = time.time()
        forged = session_token("sk-guess", int(now) + 60)
        expired = session_token("sk-acme", int(now) - 1)
        for token in (forged, expired, new_session_token("sk-acme", now)[:-1], "9" * 40, ""):
            r = await keyed_ui.get("/ui", headers={"Cookie": f"{COOKIE}={token}"})
            assert r.status_code == 303, token

    async def test_each_tenant_sees_only_its_clusters(self, keyed_ui: httpx.AsyncClient):
        await _populate(keyed_ui, "acme-c", {"Authorization": "Bearer sk-acme"})
        await _populate(keyed_ui, "globex-c", {"Authorization": "Bearer sk-globex"})
        acme = await keyed_ui.get("/ui", headers={"Authorization": "Bearer sk-acme"})
        assert 'data-cluster="acme-c"' in acme.text
        assert "globex-c" not in acme.text
        other = await keyed_ui.get(
            "/ui/clusters/globex-c", headers={"Authorization": "Bearer sk-acme"}
        )
        assert other.status_code == 404

    async def test_reports_need_a_key_too(self, keyed_ui: httpx.AsyncClient):
        assert (await keyed_ui.get("/ui/reports/hpc/slowdown.svg")).status_code == 303


def _decision(primary: list[str], shadow: list[str] | None) -> DecisionRead:
    def alloc(ids: list[str]) -> list[AllocationRead]:
        return [
            AllocationRead(job_id=i, placements=[DecisionPlacement(node_id="n", tasks=1)])
            for i in ids
        ]

    return DecisionRead(
        id="d",
        request_id="r",
        cluster_id="c",
        created_at=0.0,
        policy=PolicyRefRead(name="f1", version="1", kind="heuristic"),
        fallback=FallbackRead(used=False, reason=None),
        allocations=alloc(primary),
        reservations=[],
        queue_length=0,
        latency_ms=0.1,
        dry_run=False,
        shadow=None if shadow is None else ShadowRead(policy="ppo@1", allocations=alloc(shadow)),
    )


class TestViews:
    def test_shadow_agreement(self):
        rows = views.shadow_agreement(
            [
                _decision(["a", "b"], ["a", "b"]),
                _decision(["a", "b"], ["a"]),
                _decision([], []),
                _decision(["x"], None),
            ]
        )
        (row,) = rows
        assert (row.policy, row.decisions, row.identical) == ("ppo@1", 3, 2)
        assert row.mean_jaccard == pytest.approx((1 + 0.5 + 1) / 3)
        assert row.identical_percent == pytest.approx(200 / 3)

    def test_usage(self):
        (cpu, gpu) = views.usage({"cpu": 8, "gpu": 2, "mem": 0}, {"cpu": 6}, ["cpu", "gpu"])
        assert (cpu.percent, cpu.level) == (75.0, "mid")
        assert (gpu.percent, gpu.level) == (0.0, "low")
        assert views.Usage("x", 5, 0).percent == 0.0
        assert views.Usage("x", 9.5, 10).level == "high"
