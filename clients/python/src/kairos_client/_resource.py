"""Base classes of the resource namespaces (``client.clusters``, ``client.jobs``, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from kairos_client._client import AsyncClient, Client


def path(template: str, *ids: str) -> str:
    """Fill ``{}`` slots of ``template`` with URL-quoted ids (``"a/b"`` stays one segment)."""
    for value in ids:
        if not value:
            raise ValueError(f"expected a non-empty id string, got {value!r}")
    return template.format(*(quote(value, safe="") for value in ids))


class SyncAPIResource:
    _client: Client

    def __init__(self, client: Client) -> None:
        self._client = client


class AsyncAPIResource:
    _client: AsyncClient

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
