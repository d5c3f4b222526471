from __future__ import annotations

from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params
from kairos_client._resource import AsyncAPIResource, SyncAPIResource
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout
from kairos_client.types.audit import AuditEvent

__all__ = ["AsyncAudit", "Audit"]


class Audit(SyncAPIResource):
    """``client.audit``: the tenant's audit log."""

    def list(
        self,
        *,
        action: str | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> SyncCursorPage[AuditEvent]:
        """The tenant's audit events, newest first (only ``action``'s if given); iterate the
        result for all pages."""
        return self._client.get_page(
            AuditEvent, "/v1/audit", params=list_params(limit, action=action), timeout=timeout
        )


class AsyncAudit(AsyncAPIResource):
    """``client.audit`` of :class:`~kairos_client.AsyncClient`."""

    def list(
        self,
        *,
        action: str | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> AsyncPaginator[AuditEvent]:
        """The tenant's audit events: ``await`` for the first page, ``async for`` for all."""
        params = list_params(limit, action=action)
        return AsyncPaginator(
            lambda: self._client.get_page(AuditEvent, "/v1/audit", params=params, timeout=timeout)
        )
