from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence

from kairos_client._base_client import RequestOptions
from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params, plain
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Resources, Timeout, strip_not_given
from kairos_client.types.job import Job, JobEventType, JobState
from kairos_client.types.params import JobCreateParam, JobSpecParam

__all__ = ["AsyncJobs", "Jobs"]


def _submit(
    cluster_id: str,
    spec: Mapping[str, object],
    *,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/jobs", cluster_id),
        json=plain(strip_not_given(spec)),
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


def _submit_many(
    cluster_id: str,
    jobs: Iterable[JobCreateParam | JobSpecParam],
    *,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/jobs/batch", cluster_id),
        json={"jobs": [plain(job) for job in jobs]},
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


def _event(
    cluster_id: str,
    job_id: str,
    *,
    type: JobEventType,
    at: float | NotGiven,
    count: int | NotGiven,
    slots: int | NotGiven,
    node_id: str | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = {"type": type, "at": at, "count": count, "slots": slots, "node_id": node_id}
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/jobs/{}/events", cluster_id, job_id),
        json=strip_not_given(body),
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


def _spec(
    *,
    id: str,
    per_task: Resources,
    walltime_s: float | NotGiven,
    tasks: int | NotGiven,
    submit_time: float | NotGiven,
    priority: int | NotGiven,
    user: str | NotGiven,
    queue: str | NotGiven,
    depends_on: Sequence[str] | NotGiven,
    labels: Mapping[str, str] | NotGiven,
    min_tasks: int | NotGiven = NOT_GIVEN,
    max_tasks: int | NotGiven = NOT_GIVEN,
) -> dict[str, object]:
    return {
        "id": id,
        "per_task": per_task,
        "walltime_s": walltime_s,
        "tasks": tasks,
        "submit_time": submit_time,
        "priority": priority,
        "user": user,
        "queue": queue,
        "depends_on": depends_on,
        "labels": labels,
        "min_tasks": min_tasks,
        "max_tasks": max_tasks,
    }


class Jobs(SyncAPIResource):
    """``client.jobs``: submit gang jobs, follow their state, report what happened to them."""

    def submit(
        self,
        cluster_id: str,
        *,
        id: str,
        per_task: Resources,
        walltime_s: float | NotGiven = NOT_GIVEN,
        tasks: int | NotGiven = NOT_GIVEN,
        submit_time: float | NotGiven = NOT_GIVEN,
        priority: int | NotGiven = NOT_GIVEN,
        user: str | NotGiven = NOT_GIVEN,
        queue: str | NotGiven = NOT_GIVEN,
        depends_on: Sequence[str] | NotGiven = NOT_GIVEN,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        min_tasks: int | NotGiven = NOT_GIVEN,
        max_tasks: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Job:
        """Submit a job (``tasks`` copies of ``per_task``, all started together).

        Submitting the same id with the same body again returns the same job; a different body
        raises :class:`~kairos_client.ConflictError`. ``walltime_s`` (the requested run time) is
        required on hpc clusters. On a gpu cluster a job is ``tasks`` GPUs
        (``per_task={"gpu": 1}``), ``min_tasks``/``max_tasks`` make it elastic, and
        ``walltime_s`` is an optional estimate.
        """
        spec = _spec(
            id=id,
            per_task=per_task,
            walltime_s=walltime_s,
            tasks=tasks,
            submit_time=submit_time,
            priority=priority,
            user=user,
            queue=queue,
            depends_on=depends_on,
            labels=labels,
            min_tasks=min_tasks,
            max_tasks=max_tasks,
        )
        options = _submit(cluster_id, spec, timeout=timeout, idempotency_key=idempotency_key)
        return self._client.parse_model(Job, self._client.request(options))

    def submit_many(
        self,
        cluster_id: str,
        jobs: Iterable[JobCreateParam | JobSpecParam],
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> builtins.list[Job]:
        """Submit up to 10,000 jobs at once, all or nothing."""
        options = _submit_many(cluster_id, jobs, timeout=timeout, idempotency_key=idempotency_key)
        return self._client.parse_list(Job, self._client.request(options), key="jobs")

    def retrieve(
        self, cluster_id: str, job_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Job:
        """One job: state, placements, start/end time and the decision that started it."""
        options = RequestOptions(
            "GET", path("/v1/clusters/{}/jobs/{}", cluster_id, job_id), timeout=timeout
        )
        return self._client.parse_model(Job, self._client.request(options))

    def send_event(
        self,
        cluster_id: str,
        job_id: str,
        *,
        type: JobEventType,
        at: float | NotGiven = NOT_GIVEN,
        count: int | NotGiven = NOT_GIVEN,
        slots: int | NotGiven = NOT_GIVEN,
        node_id: str | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Job:
        """Report ``finished``/``failed``/``cancelled``, or ``released`` (back to pending).

        A DAG stage's job takes ``task_finished`` (``count`` tasks, default 1) and
        ``released`` (``slots`` returned unused, default all), optionally on ``node_id``.
        """
        options = _event(
            cluster_id,
            job_id,
            type=type,
            at=at,
            count=count,
            slots=slots,
            node_id=node_id,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Job, self._client.request(options))

    def cancel(
        self, cluster_id: str, job_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> None:
        """Cancel a pending job (``DELETE``)."""
        self._client.request(
            RequestOptions(
                "DELETE", path("/v1/clusters/{}/jobs/{}", cluster_id, job_id), timeout=timeout
            )
        )

    def list(
        self,
        cluster_id: str,
        *,
        state: JobState | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> SyncCursorPage[Job]:
        """Jobs of the cluster, optionally of one ``state``; iterate the result for all pages."""
        return self._client.get_page(
            Job,
            path("/v1/clusters/{}/jobs", cluster_id),
            params=list_params(limit, state=state),
            timeout=timeout,
        )


class AsyncJobs(AsyncAPIResource):
    """``client.jobs`` of :class:`~kairos_client.AsyncClient`."""

    async def submit(
        self,
        cluster_id: str,
        *,
        id: str,
        per_task: Resources,
        walltime_s: float | NotGiven = NOT_GIVEN,
        tasks: int | NotGiven = NOT_GIVEN,
        submit_time: float | NotGiven = NOT_GIVEN,
        priority: int | NotGiven = NOT_GIVEN,
        user: str | NotGiven = NOT_GIVEN,
        queue: str | NotGiven = NOT_GIVEN,
        depends_on: Sequence[str] | NotGiven = NOT_GIVEN,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        min_tasks: int | NotGiven = NOT_GIVEN,
        max_tasks: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Job:
        """Submit a job (see :meth:`Jobs.submit`)."""
        spec = _spec(
            id=id,
            per_task=per_task,
            walltime_s=walltime_s,
            tasks=tasks,
            submit_time=submit_time,
            priority=priority,
            user=user,
            queue=queue,
            depends_on=depends_on,
            labels=labels,
            min_tasks=min_tasks,
            max_tasks=max_tasks,
        )
        options = _submit(cluster_id, spec, timeout=timeout, idempotency_key=idempotency_key)
        return self._client.parse_model(Job, await self._client.request(options))

    async def submit_many(
        self,
        cluster_id: str,
        jobs: Iterable[JobCreateParam | JobSpecParam],
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> builtins.list[Job]:
        """Submit up to 10,000 jobs at once, all or nothing."""
        options = _submit_many(cluster_id, jobs, timeout=timeout, idempotency_key=idempotency_key)
        return self._client.parse_list(Job, await self._client.request(options), key="jobs")

    async def retrieve(
        self, cluster_id: str, job_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Job:
        """One job: state, placements, start/end time and the decision that started it."""
        options = RequestOptions(
            "GET", path("/v1/clusters/{}/jobs/{}", cluster_id, job_id), timeout=timeout
        )
        return self._client.parse_model(Job, await self._client.request(options))

    async def send_event(
        self,
        cluster_id: str,
        job_id: str,
        *,
        type: JobEventType,
        at: float | NotGiven = NOT_GIVEN,
        count: int | NotGiven = NOT_GIVEN,
        slots: int | NotGiven = NOT_GIVEN,
        node_id: str | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Job:
        """Report ``finished``/``failed``/``cancelled``, or ``released`` (back to pending).

        A DAG stage's job takes ``task_finished`` (``count`` tasks, default 1) and
        ``released`` (``slots`` returned unused, default all), optionally on ``node_id``.
        """
        options = _event(
            cluster_id,
            job_id,
            type=type,
            at=at,
            count=count,
            slots=slots,
            node_id=node_id,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Job, await self._client.request(options))

    async def cancel(
        self, cluster_id: str, job_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> None:
        """Cancel a pending job (``DELETE``)."""
        await self._client.request(
            RequestOptions(
                "DELETE", path("/v1/clusters/{}/jobs/{}", cluster_id, job_id), timeout=timeout
            )
        )

    def list(
        self,
        cluster_id: str,
        *,
        state: JobState | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> AsyncPaginator[Job]:
        """Jobs of the cluster: ``await`` for the first page, ``async for`` for all."""
        job_path = path("/v1/clusters/{}/jobs", cluster_id)
        params = list_params(limit, state=state)
        return AsyncPaginator(
            lambda: self._client.get_page(Job, job_path, params=params, timeout=timeout)
        )
