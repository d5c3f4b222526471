"""The dashboard's paging, decision page and model descriptions in Chromium (issue 24, item 8),
with screenshots in ``test-artifacts/``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.browser.conftest import Server, _serve

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


@pytest.fixture(scope="module")
def paged_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two rows per table, so a handful of jobs needs paging."""
    yield from _serve(tmp_path_factory.mktemp("serve-paged"), {"KAIROS_UI_ROWS": "2"})


def _cluster(url: str) -> tuple[str, dict[str, object]]:
    cid = f"pg-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=url, timeout=60) as c:
        body = {"resources": ["cpu"], "policy": "hpc-kernel", "shadow_policy": "sjf"}
        assert c.put(f"/v1/clusters/{cid}", json=body).status_code == 201
        nodes = [
            {"id": "n1", "capacity": {"cpu": 16}},
            {"id": "n2", "capacity": {"cpu": 16}, "state": "drain"},
        ]
        assert c.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes}).status_code == 200
        for i in range(6):
            job = {"id": f"job-{i}", "per_task": {"cpu": 6}, "walltime_s": 600 + 60 * i}
            assert c.post(f"/v1/clusters/{cid}/jobs", json=job).status_code == 201
        decision = c.post(f"/v1/clusters/{cid}/schedule", json={"explain": True}).json()
    return cid, decision


def test_tables_page_and_decisions_open_their_page(paged_server, page, artifacts):
    cid, decision = _cluster(paged_server.url)
    page.goto(f"{paged_server.url}/ui/clusters/{cid}")
    page.wait_for_selector("[data-testid=cluster-title]")
    queue = page.locator("[data-testid=queue] tr[data-job]")
    first = queue.all_inner_texts()
    assert len(first) == 2
    assert ISO_UTC.search(first[0])
    page.screenshot(path=str(artifacts / "ui-cluster-paged.png"), full_page=True)
    charts = page.locator("[data-testid=charts] svg")
    assert charts.count() == 3
    assert "learned policy (last 10): 100%" in (charts.nth(2).text_content() or "")

    page.locator("[data-testid=pager-queue] a[rel=next]").click()
    page.wait_for_selector("[data-testid=pager-queue] a[rel=prev]")
    second = page.locator("[data-testid=queue] tr[data-job]").all_inner_texts()
    assert len(second) == 2
    assert set(second).isdisjoint(first)
    assert "page 2" in page.locator("[data-testid=pager-queue]").inner_text()
    page.locator("[data-testid=pager-queue] a[rel=prev]").click()
    page.wait_for_selector("[data-testid=cluster-title]")
    assert page.locator("[data-testid=queue] tr[data-job]").all_inner_texts() == first

    page.locator(f"[data-testid=decisions] a[href='/ui/decisions/{decision['id']}']").click()
    page.wait_for_selector("[data-testid=decision-title]")
    assert page.locator("[data-testid=decision-title]").inner_text().startswith(decision["id"])
    assert page.locator("[data-testid=input-nodes]").inner_text() == "2 (1 drain, 1 up)"
    assert page.locator("[data-testid=input-pending]").inner_text() == "6"
    assert "hpc-kernel@" in page.locator("[data-testid=decision-policy]").inner_text()
    assert "primary" in page.locator("[data-testid=decision-fallback]").inner_text()
    assert page.locator("[data-testid=decision-shadow]").inner_text().startswith("sjf:")
    rows = page.locator("[data-testid=decision-jobs] tr[data-job]")
    assert rows.count() == 6
    reasons = page.locator("[data-testid=decision-jobs] td.reason").all_inner_texts()
    assert all(reasons), reasons
    assert any(r.startswith("started on n1") for r in reasons)
    assert any("does not fit" in r for r in reasons)
    assert ISO_UTC.search(page.locator("[data-testid=decision-time]").inner_text())
    foreign = [u for u in page.requested if not u.startswith((paged_server.url, "data:"))]
    assert not foreign, foreign
    page.screenshot(path=str(artifacts / "ui-decision.png"), full_page=True)


def test_models_say_what_they_are(paged_server, page, artifacts):
    page.goto(f"{paged_server.url}/ui")
    table = page.locator("[data-testid=policies]")
    table.wait_for()
    rows = table.locator("tbody tr")
    about = {
        rows.nth(i).locator("td").first.inner_text(): rows.nth(i)
        .locator("[data-testid=about]")
        .inner_text()
        for i in range(rows.count())
    }
    assert "KTH-SP2" in about["hpc-kernel-kth-sp2"]
    assert all(text.strip() for text in about.values()), about
    table.screenshot(path=str(artifacts / "ui-policies.png"))


def test_charts_drawn_from_the_decision_log(paged_server, page, artifacts):
    cid = f"ch-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=paged_server.url, timeout=60) as c:
        body = {"resources": ["cpu"], "policy": "hpc-kernel"}
        assert c.put(f"/v1/clusters/{cid}", json=body).status_code == 201
        nodes = [{"id": "n1", "capacity": {"cpu": 16}}]
        assert c.put(f"/v1/clusters/{cid}/nodes", json={"nodes": nodes}).status_code == 200
        running: list[str] = []
        for i in range(8):
            for k in range(i % 3 + 1):
                job = {"id": f"j{i}-{k}", "per_task": {"cpu": 4 + 2 * k}, "walltime_s": 600}
                assert c.post(f"/v1/clusters/{cid}/jobs", json=job).status_code == 201
            decision = c.post(f"/v1/clusters/{cid}/schedule", json={}).json()
            running += [a["job_id"] for a in decision["allocations"]]
            if running and i % 2:
                done = running.pop(0)
                r = c.post(f"/v1/clusters/{cid}/jobs/{done}/events", json={"type": "finished"})
                assert r.status_code == 200, r.text
    page.goto(f"{paged_server.url}/ui/clusters/{cid}")
    charts = page.locator("[data-testid=charts] svg")
    charts.first.wait_for()
    assert charts.count() == 3
    for i in range(3):
        assert charts.nth(i).locator("circle").count() == 8  # one dot per decision
    page.locator("[data-testid=charts]").screenshot(path=str(artifacts / "ui-charts.png"))
