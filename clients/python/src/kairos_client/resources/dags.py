from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from kairos_client._base_client import RequestOptions
from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params, plain
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout, strip_not_given
from kairos_client.types.dag import Dag, DagState, StageSpecParam

__all__ = ["AsyncDags", "Dags"]


def _submit(
    cluster_id: str,
    *,
    id: str,
    stages: Iterable[StageSpecParam],
    submit_time: float | NotGiven,
    priority: int | NotGiven,
    user: str | NotGiven,
    queue: str | NotGiven,
    labels: Mapping[str, str] | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = strip_not_given(
        {
            "id": id,
            "stages": [plain(s) for s in stages],
            "submit_time": submit_time,
            "priority": priority,
            "user": user,
            "queue": queue,
            "labels": labels,
        }
    )
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/dags", cluster_id),
        json=plain(body),
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


def _one(
    method: Literal["GET", "DELETE"], cluster_id: str, dag_id: str, timeout: Timeout | NotGiven
) -> RequestOptions:
    return RequestOptions(
        method, path("/v1/clusters/{}/dags/{}", cluster_id, dag_id), timeout=timeout
    )


class Dags(SyncAPIResource):
    """``client.dags``: DAG jobs of dag clusters; each stage is also a job
    ``{dag_id}:{stage_id}`` whose progress ``client.jobs.send_event`` reports
    (``task_finished`` with ``count``, ``released`` with ``slots``)."""

    def submit(
        self,
        cluster_id: str,
        *,
        id: str,
        stages: Iterable[StageSpecParam],
        submit_time: float | NotGiven = NOT_GIVEN,
        priority: int | NotGiven = NOT_GIVEN,
        user: str | NotGiven = NOT_GIVEN,
        queue: str | NotGiven = NOT_GIVEN,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Dag:
        """Submit a DAG; the same id and body again returns it, another body raises
        :class:`~kairos_client.ConflictError`."""
        options = _submit(
            cluster_id,
            id=id,
            stages=stages,
            submit_time=submit_time,
            priority=priority,
            user=user,
            queue=queue,
            labels=labels,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Dag, self._client.request(options))

    def retrieve(
        self, cluster_id: str, dag_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Dag:
        """One DAG with its stages' progress."""
        options = _one("GET", cluster_id, dag_id, timeout)
        return self._client.parse_model(Dag, self._client.request(options))

    def cancel(
        self, cluster_id: str, dag_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> None:
        """Cancel a DAG (its slots are freed)."""
        self._client.request(_one("DELETE", cluster_id, dag_id, timeout))

    def list(
        self,
        cluster_id: str,
        *,
        state: DagState | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> SyncCursorPage[Dag]:
        """DAGs of the cluster, optionally of one ``state``; iterate the result for all pages."""
        return self._client.get_page(
            Dag,
            path("/v1/clusters/{}/dags", cluster_id),
            params=list_params(limit, state=state),
            timeout=timeout,
        )


class AsyncDags(AsyncAPIResource):
    """``client.dags`` of :class:`~kairos_client.AsyncClient`."""

    async def submit(
        self,
        cluster_id: str,
        *,
        id: str,
        stages: Iterable[StageSpecParam],
        submit_time: float | NotGiven = NOT_GIVEN,
        priority: int | NotGiven = NOT_GIVEN,
        user: str | NotGiven = NOT_GIVEN,
        queue: str | NotGiven = NOT_GIVEN,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Dag:
        """Submit a DAG (see :meth:`Dags.submit`)."""
        options = _submit(
            cluster_id,
            id=id,
            stages=stages,
            submit_time=submit_time,
            priority=priority,
            user=user,
            queue=queue,
            labels=labels,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Dag, await self._client.request(options))

    async def retrieve(
        self, cluster_id: str, dag_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Dag:
        """One DAG with its stages' progress."""
        options = _one("GET", cluster_id, dag_id, timeout)
        return self._client.parse_model(Dag, await self._client.request(options))

    async def cancel(
        self, cluster_id: str, dag_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> None:
        """Cancel a DAG (its slots are freed)."""
        await self._client.request(_one("DELETE", cluster_id, dag_id, timeout))

    def list(
        self,
        cluster_id: str,
        *,
        state: DagState | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> AsyncPaginator[Dag]:
        """DAGs of the cluster: ``await`` for the first page, ``async for`` for all."""
        dag_path = path("/v1/clusters/{}/dags", cluster_id)
        params = list_params(limit, state=state)
        return AsyncPaginator(
            lambda: self._client.get_page(Dag, dag_path, params=params, timeout=timeout)
        )
