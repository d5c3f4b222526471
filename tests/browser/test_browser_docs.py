"""``/docs`` (Swagger UI) in a real browser: works offline and "Try it out" reaches the API."""

from __future__ import annotations

import httpx


def _operations(url: str) -> list[tuple[str, str]]:
    spec = httpx.get(f"{url}/openapi.json", timeout=10).json()
    return [
        (method, path)
        for path, ops in spec["paths"].items()
        for method in ops
        if method in {"get", "put", "post", "delete", "patch"}
    ]


def test_docs_render_every_operation_offline(server, page, artifacts):
    operations = _operations(server.url)
    assert len(operations) >= 20
    page.goto(f"{server.url}/docs")
    page.wait_for_selector(".opblock")
    page.wait_for_function(
        "n => document.querySelectorAll('.opblock').length >= n", arg=len(operations)
    )
    rendered = page.eval_on_selector_all(
        ".opblock",
        """blocks => blocks.map(b => [
            b.querySelector('.opblock-summary-method').textContent.trim().toLowerCase(),
            b.querySelector('.opblock-summary-path').getAttribute('data-path'),
        ])""",
    )
    assert sorted(map(tuple, rendered)) == sorted(operations)
    # Every operation shows its summary next to the path.
    summaries = page.eval_on_selector_all(
        ".opblock .opblock-summary-description", "els => els.map(e => e.textContent.trim())"
    )
    assert len(summaries) == len(operations)
    assert all(summaries), "an operation has no summary"
    # Nothing was fetched from anywhere but the service itself (no CDN).
    foreign = [u for u in page.requested if not u.startswith((server.url, "data:", "blob:"))]
    assert not foreign, foreign
    page.screenshot(path=str(artifacts / "docs.png"), full_page=True)


def test_try_it_out_on_get_policies_shows_200(server, page, artifacts):
    page.goto(f"{server.url}/docs")
    block = page.locator(
        ".opblock.opblock-get:has(.opblock-summary-path[data-path='/v1/policies'])"
    )
    block.locator(".opblock-summary").first.click()
    block.locator("button.try-out__btn").click()
    block.locator("button.execute").click()
    status = block.locator(".live-responses-table .response .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip().startswith("200")
    body = block.locator(".live-responses-table .response-col_description pre").first.inner_text()
    assert '"kind"' in body
    block.screenshot(path=str(artifacts / "docs-try-it-out.png"))
