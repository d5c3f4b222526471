from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Literal

from kairos_client._base_client import RequestOptions
from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params, plain
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Resources, Timeout, strip_not_given
from kairos_client.types.node import Node
from kairos_client.types.params import NodeParam

__all__ = ["AsyncNodes", "Nodes"]

NodeStateParam = Literal["up", "down", "drain"]


def _upsert(
    cluster_id: str,
    node_id: str,
    *,
    capacity: Resources,
    labels: Mapping[str, str] | NotGiven,
    state: NodeStateParam | NotGiven,
    timeout: Timeout | NotGiven,
) -> RequestOptions:
    body = strip_not_given({"capacity": plain(capacity), "labels": plain(labels), "state": state})
    return RequestOptions(
        "PUT", path("/v1/clusters/{}/nodes/{}", cluster_id, node_id), json=body, timeout=timeout
    )


def _upsert_many(
    cluster_id: str, nodes: Iterable[NodeParam], *, timeout: Timeout | NotGiven
) -> RequestOptions:
    body = {"nodes": [plain(node) for node in nodes]}
    return RequestOptions(
        "PUT", path("/v1/clusters/{}/nodes", cluster_id), json=body, timeout=timeout
    )


class Nodes(SyncAPIResource):
    """``client.nodes``: the machines of a cluster."""

    def upsert(
        self,
        cluster_id: str,
        node_id: str,
        *,
        capacity: Resources,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        state: NodeStateParam | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> Node:
        """Create or replace one node; ``state="drain"`` stops new placements on it."""
        options = _upsert(
            cluster_id, node_id, capacity=capacity, labels=labels, state=state, timeout=timeout
        )
        return self._client.parse_model(Node, self._client.request(options))

    def upsert_many(
        self,
        cluster_id: str,
        nodes: Iterable[NodeParam],
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> builtins.list[Node]:
        """Create or replace many nodes at once: ``[{"id", "capacity", "labels"?, "state"?}]``."""
        options = _upsert_many(cluster_id, nodes, timeout=timeout)
        return self._client.parse_list(Node, self._client.request(options), key="nodes")

    def list(
        self,
        cluster_id: str,
        *,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> SyncCursorPage[Node]:
        """Every node of the cluster; iterate the result to walk all pages."""
        return self._client.get_page(
            Node,
            path("/v1/clusters/{}/nodes", cluster_id),
            params=list_params(limit),
            timeout=timeout,
        )


class AsyncNodes(AsyncAPIResource):
    """``client.nodes`` of :class:`~kairos_client.AsyncClient`."""

    async def upsert(
        self,
        cluster_id: str,
        node_id: str,
        *,
        capacity: Resources,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        state: NodeStateParam | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> Node:
        """Create or replace one node; ``state="drain"`` stops new placements on it."""
        options = _upsert(
            cluster_id, node_id, capacity=capacity, labels=labels, state=state, timeout=timeout
        )
        return self._client.parse_model(Node, await self._client.request(options))

    async def upsert_many(
        self,
        cluster_id: str,
        nodes: Iterable[NodeParam],
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> builtins.list[Node]:
        """Create or replace many nodes in one call."""
        options = _upsert_many(cluster_id, nodes, timeout=timeout)
        return self._client.parse_list(Node, await self._client.request(options), key="nodes")

    def list(
        self,
        cluster_id: str,
        *,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> AsyncPaginator[Node]:
        """Every node of the cluster: ``await`` for the first page, ``async for`` for all."""
        node_path = path("/v1/clusters/{}/nodes", cluster_id)
        params = list_params(limit)
        return AsyncPaginator(
            lambda: self._client.get_page(Node, node_path, params=params, timeout=timeout)
        )
