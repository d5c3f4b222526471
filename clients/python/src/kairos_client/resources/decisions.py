from __future__ import annotations

from kairos_client._base_client import RequestOptions
from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout
from kairos_client.types.decision import Decision, DecisionDetail

__all__ = ["AsyncDecisions", "Decisions"]


class Decisions(SyncAPIResource):
    """``client.decisions``: the decision log."""

    def retrieve(
        self, decision_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> DecisionDetail:
        """One decision with its input snapshot."""
        options = RequestOptions("GET", path("/v1/decisions/{}", decision_id), timeout=timeout)
        return self._client.parse_model(DecisionDetail, self._client.request(options))

    def list(
        self,
        cluster_id: str,
        *,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> SyncCursorPage[Decision]:
        """The cluster's decisions, newest first; iterate the result for all pages."""
        return self._client.get_page(
            Decision,
            path("/v1/clusters/{}/decisions", cluster_id),
            params=list_params(limit),
            timeout=timeout,
        )


class AsyncDecisions(AsyncAPIResource):
    """``client.decisions`` of :class:`~kairos_client.AsyncClient`."""

    async def retrieve(
        self, decision_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> DecisionDetail:
        """One decision with its input snapshot."""
        options = RequestOptions("GET", path("/v1/decisions/{}", decision_id), timeout=timeout)
        return self._client.parse_model(DecisionDetail, await self._client.request(options))

    def list(
        self,
        cluster_id: str,
        *,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> AsyncPaginator[Decision]:
        """The cluster's decisions: ``await`` for the first page, ``async for`` for all."""
        decision_path = path("/v1/clusters/{}/decisions", cluster_id)
        params = list_params(limit)
        return AsyncPaginator(
            lambda: self._client.get_page(Decision, decision_path, params=params, timeout=timeout)
        )
