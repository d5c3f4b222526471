"""Fixtures for the SDK unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from sdk_fakes import BASE_URL, Script

from kairos_client import AsyncClient, Client


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(
    script: Script, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Client]:
    monkeypatch.delenv("KAIROS_API_KEY", raising=False)
    c = Client(
        base_url=BASE_URL,
        api_key="k-test",
        transport=httpx.MockTransport(script),
        jitter_seed=7,
    )
    monkeypatch.setattr(c, "_sleep", sleeps.append)
    with c:
        yield c


@pytest.fixture
async def aclient(
    script: Script, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AsyncClient]:
    monkeypatch.delenv("KAIROS_API_KEY", raising=False)
    c = AsyncClient(
        base_url=BASE_URL,
        api_key="k-test",
        transport=httpx.MockTransport(script),
        jitter_seed=7,
    )

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(c, "_sleep", fake_sleep)
    async with c:
        yield c
