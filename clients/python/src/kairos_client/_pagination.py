"""Cursor pages (``{"items": [...], "next_cursor": str | null}``) fetching the next page on demand.

Iterating a page iterates every item of every following page::

    for job in client.jobs.list("c1", state="pending"):   # all pending jobs, page by page
        ...

    async for job in client.jobs.list("c1"):               # AsyncClient: same, asynchronously
        ...

    page = client.jobs.list("c1", limit=50)                # or drive the pages yourself
    while page.has_next_page():
        page = page.get_next_page()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")


class SyncCursorPage(Generic[_T]):
    """One page of results; ``iter(page)`` walks this page and every later one."""

    items: list[_T]
    next_cursor: str | None

    def __init__(
        self,
        *,
        items: list[_T],
        next_cursor: str | None,
        fetch: Callable[[str | None], SyncCursorPage[_T]],
    ) -> None:
        self.items = items
        self.next_cursor = next_cursor
        self._fetch = fetch

    def has_next_page(self) -> bool:
        return self.next_cursor is not None

    def get_next_page(self) -> SyncCursorPage[_T]:
        if self.next_cursor is None:
            raise RuntimeError("this is the last page; check has_next_page() first")
        return self._fetch(self.next_cursor)

    def iter_pages(self) -> Iterator[SyncCursorPage[_T]]:
        page = self
        yield page
        while page.has_next_page():
            page = page.get_next_page()
            yield page

    def __iter__(self) -> Iterator[_T]:
        for page in self.iter_pages():
            yield from page.items

    def __repr__(self) -> str:
        return f"SyncCursorPage(items={self.items!r}, next_cursor={self.next_cursor!r})"


class AsyncCursorPage(Generic[_T]):
    """One page of results; ``async for`` walks this page and every later one."""

    items: list[_T]
    next_cursor: str | None

    def __init__(
        self,
        *,
        items: list[_T],
        next_cursor: str | None,
        fetch: Callable[[str | None], Awaitable[AsyncCursorPage[_T]]],
    ) -> None:
        self.items = items
        self.next_cursor = next_cursor
        self._fetch = fetch

    def has_next_page(self) -> bool:
        return self.next_cursor is not None

    async def get_next_page(self) -> AsyncCursorPage[_T]:
        if self.next_cursor is None:
            raise RuntimeError("this is the last page; check has_next_page() first")
        return await self._fetch(self.next_cursor)

    async def iter_pages(self) -> AsyncIterator[AsyncCursorPage[_T]]:
        page = self
        yield page
        while page.has_next_page():
            page = await page.get_next_page()
            yield page

    async def __aiter__(self) -> AsyncIterator[_T]:
        async for page in self.iter_pages():
            for item in page.items:
                yield item

    def __repr__(self) -> str:
        return f"AsyncCursorPage(items={self.items!r}, next_cursor={self.next_cursor!r})"


class AsyncPaginator(Generic[_T]):
    """What ``AsyncClient.<resource>.list(...)`` returns: ``await`` it for the first page, or
    ``async for`` over it for every item of every page."""

    def __init__(self, first_page: Callable[[], Awaitable[AsyncCursorPage[_T]]]) -> None:
        self._first_page = first_page

    def __await__(self) -> Generator[Any, None, AsyncCursorPage[_T]]:
        return self._get().__await__()

    async def _get(self) -> AsyncCursorPage[_T]:
        return await self._first_page()

    async def __aiter__(self) -> AsyncIterator[_T]:
        page = await self._first_page()
        async for item in page:
            yield item
