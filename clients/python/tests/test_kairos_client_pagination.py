from __future__ import annotations

import httpx
import pytest
from sdk_fakes import Script, job

from kairos_client import AsyncClient, AsyncCursorPage, Client, SyncCursorPage


def paged(script: Script, total: int, page_size: int) -> None:
    """Serve ``total`` jobs ``page_size`` at a time, checking the cursor the SDK sends back."""

    def handler(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        start = int(cursor) if cursor else 0
        items = [job(f"j{i}") for i in range(start, min(start + page_size, total))]
        nxt = start + page_size
        return httpx.Response(
            200, json={"items": items, "next_cursor": str(nxt) if nxt < total else None}
        )

    pages = max(1, -(-total // page_size))
    script.add(*([handler] * pages))


class TestSyncPagination:
    def test_iterating_walks_every_page(self, client: Client, script: Script):
        paged(script, total=7, page_size=3)
        ids = [j.id for j in client.jobs.list("c1", state="pending", limit=3)]
        assert ids == [f"j{i}" for i in range(7)]
        assert len(script.requests) == 3
        first, second, third = (r.url.params for r in script.requests)
        assert first.get("state") == "pending"
        assert first.get("limit") == "3"
        assert "cursor" not in first
        assert second.get("cursor") == "3"
        assert third.get("cursor") == "6"
        assert third.get("state") == "pending"

    def test_manual_pages(self, client: Client, script: Script):
        paged(script, total=4, page_size=2)
        page = client.jobs.list("c1", limit=2)
        assert isinstance(page, SyncCursorPage)
        assert [j.id for j in page.items] == ["j0", "j1"]
        assert page.has_next_page()
        page = page.get_next_page()
        assert [j.id for j in page.items] == ["j2", "j3"]
        assert not page.has_next_page()
        with pytest.raises(RuntimeError, match="last page"):
            page.get_next_page()

    def test_only_first_page_is_fetched_eagerly(self, client: Client, script: Script):
        paged(script, total=10, page_size=2)
        page = client.jobs.list("c1", limit=2)
        assert len(script.requests) == 1
        assert len(list(page.iter_pages())) == 5

    def test_empty(self, client: Client, script: Script):
        script.add(httpx.Response(200, json={"items": [], "next_cursor": None}))
        assert list(client.clusters.list()) == []

    def test_limit_must_be_positive(self, client: Client):
        with pytest.raises(ValueError, match="limit"):
            client.jobs.list("c1", limit=0)


class TestAsyncPagination:
    async def test_async_for_walks_every_page(self, aclient: AsyncClient, script: Script):
        paged(script, total=5, page_size=2)
        ids = [j.id async for j in aclient.jobs.list("c1", state="pending", limit=2)]
        assert ids == [f"j{i}" for i in range(5)]
        assert [r.url.params.get("cursor") for r in script.requests] == [None, "2", "4"]

    async def test_await_gives_first_page(self, aclient: AsyncClient, script: Script):
        paged(script, total=3, page_size=2)
        page = await aclient.jobs.list("c1", limit=2)
        assert isinstance(page, AsyncCursorPage)
        assert [j.id for j in page.items] == ["j0", "j1"]
        nxt = await page.get_next_page()
        assert [j.id for j in nxt.items] == ["j2"]
        assert not nxt.has_next_page()
        with pytest.raises(RuntimeError, match="last page"):
            await nxt.get_next_page()

    async def test_async_iter_pages(self, aclient: AsyncClient, script: Script):
        paged(script, total=6, page_size=2)
        page = await aclient.jobs.list("c1")
        sizes = [len(p.items) async for p in page.iter_pages()]
        assert sizes == [2, 2, 2]
