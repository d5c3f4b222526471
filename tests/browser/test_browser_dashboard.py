"""``/ui`` in a real browser: a cluster created through the SDK shows up, with screenshots."""

from __future__ import annotations

import uuid

from kairos_client import Client

KEY = "sk-acme-ui"  # keyed_server's key for tenant acme


def _make_cluster(url: str, api_key: str | None = None) -> str:
    cluster_id = f"ui-{uuid.uuid4().hex[:8]}"
    with Client(base_url=url, api_key=api_key) as client:
        client.clusters.upsert(
            cluster_id,
            resources=["cpu", "gpu"],
            name="Browser test cluster",
            shadow_policy="sjf",  # a candidate compared beside every decision, never applied
        )
        client.nodes.upsert_many(
            cluster_id,
            [
                {"id": "gpu-1", "capacity": {"cpu": 32, "gpu": 4}},
                {"id": "gpu-2", "capacity": {"cpu": 32, "gpu": 4}},
                {"id": "cpu-1", "capacity": {"cpu": 64}, "state": "drain"},
            ],
        )
        client.jobs.submit(
            cluster_id, id="train-1", per_task={"cpu": 8, "gpu": 2}, tasks=2, walltime_s=3600
        )
        client.jobs.submit(cluster_id, id="etl-1", per_task={"cpu": 16}, walltime_s=600)
        client.jobs.submit(cluster_id, id="huge-1", per_task={"cpu": 60}, walltime_s=60)
        client.clusters.schedule(cluster_id)
    return cluster_id


def test_dashboard_shows_a_new_cluster(server, page, artifacts):
    cluster_id = _make_cluster(server.url)
    page.goto(f"{server.url}/ui")
    row = page.locator(f"tr[data-cluster='{cluster_id}']")
    row.wait_for()
    assert "Browser test cluster" in row.inner_text()
    assert row.locator(".bar .fill").count() >= 2  # cpu and gpu utilisation bars
    shadow = page.locator("[data-testid=shadow-report]").first
    assert "sjf" in shadow.inner_text()
    assert page.locator("[data-testid=report-plots] img").count() == 1
    assert page.eval_on_selector(
        "[data-testid=report-plots] img", "img => img.complete && img.naturalWidth > 0"
    )
    page.screenshot(path=str(artifacts / "ui-overview.png"), full_page=True)

    row.locator("a").first.click()
    page.wait_for_selector("[data-testid=cluster-title]")
    assert page.locator("[data-testid=nodes] tr[data-node]").count() == 3
    assert page.locator("[data-testid=running] tr[data-job]").count() == 2
    assert page.locator("[data-testid=queue] tr[data-job='huge-1']").count() == 1
    decisions = page.locator("[data-testid=decisions] tr[data-decision]")
    assert decisions.count() == 1
    assert "primary" in decisions.first.inner_text() or "fallback" in decisions.first.inner_text()
    foreign = [u for u in page.requested if not u.startswith((server.url, "data:"))]
    assert not foreign, foreign
    page.screenshot(path=str(artifacts / "ui-cluster.png"), full_page=True)


def test_dashboard_login_with_a_key(keyed_server, page, artifacts):
    cluster_id = _make_cluster(keyed_server.url, api_key=KEY)
    page.goto(f"{keyed_server.url}/ui/clusters/{cluster_id}")
    page.wait_for_selector("input[name=key]")
    assert page.get_attribute("form", "method") == "post"
    page.fill("input[name=key]", "wrong")
    page.click("button[type=submit]")
    page.wait_for_selector("[role=alert]")
    page.fill("input[name=key]", KEY)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=cluster-title]")  # back on the page first asked for
    assert "acme" in page.locator("[data-testid=tenant]").inner_text()
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "kairos_ui_session"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert KEY not in cookie["value"]
    page.goto(f"{keyed_server.url}/ui")
    page.locator(f"tr[data-cluster='{cluster_id}']").wait_for()
    page.screenshot(path=str(artifacts / "ui-logged-in.png"), full_page=True)

    page.click("text=Log out")
    page.wait_for_selector("input[name=key]")
    assert not [c for c in page.context.cookies() if c["name"] == "kairos_ui_session"]
    page.goto(f"{keyed_server.url}/ui")
    page.wait_for_selector("input[name=key]")  # logged out: the form again
    assert not [u for u in page.requested if KEY in u]
    assert KEY not in keyed_server.log.read_text()


def test_a_key_in_the_address_is_refused_and_points_to_the_form(keyed_server, page, artifacts):
    response = page.goto(f"{keyed_server.url}/ui?key={KEY}&refresh=30")
    assert response is not None
    assert response.status == 400
    assert "does not accept an API key in a URL" in page.locator("[role=alert]").inner_text()
    assert not page.context.cookies()
    page.screenshot(path=str(artifacts / "ui-key-in-url.png"), full_page=True)
    page.click("[data-testid=login-link]")
    page.wait_for_selector("input[name=key]")
    page.fill("input[name=key]", KEY)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=tenant]")
    assert page.url == f"{keyed_server.url}/ui?refresh=30"  # the address, without the key
    assert KEY not in keyed_server.log.read_text()
