"""``Client`` and ``AsyncClient``: the twin entry points of the SDK."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from types import TracebackType
from typing import Literal, Self

import httpx

from kairos_client._base_client import (
    DEFAULT_MAX_RETRIES,
    INITIAL_RETRY_DELAY_S,
    MAX_RETRY_DELAY_S,
    AsyncAPIClient,
    RequestOptions,
    SyncAPIClient,
)
from kairos_client._exceptions import ServiceUnavailableError
from kairos_client._params import plain
from kairos_client._types import (
    NOT_GIVEN,
    Headers,
    NotGiven,
    Timeout,
    as_object,
    strip_not_given,
)
from kairos_client.resources import (
    AsyncAudit,
    AsyncClusters,
    AsyncDags,
    AsyncDecisions,
    AsyncJobs,
    AsyncNodes,
    AsyncPolicies,
    AsyncTunes,
    Audit,
    Clusters,
    Dags,
    Decisions,
    Jobs,
    Nodes,
    Policies,
    Tunes,
)
from kairos_client.types.dag import DagStateParam, RoundTriggerParam
from kairos_client.types.decision import Decision
from kairos_client.types.gpu import GpuJobParam, GpuNodeParam, GpuSettingsParam
from kairos_client.types.params import JobSpecParam, RunningJobParam, SnapshotNodeParam

__all__ = ["AsyncClient", "Client"]


def _decide_options(
    *,
    now: float,
    nodes: Sequence[SnapshotNodeParam],
    pending: Sequence[JobSpecParam],
    running: Sequence[RunningJobParam],
    finished: Sequence[str],
    policy: str | NotGiven,
    fallback: str | NotGiven,
    backfill: Literal["easy", "none"] | NotGiven,
    placement: Literal["first_fit", "best_fit", "tetris"] | NotGiven,
    explain: bool | NotGiven,
    deadline_ms: float | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = strip_not_given(
        {
            "now": now,
            "nodes": plain(list(nodes)),
            "running": plain(list(running)),
            "pending": plain(list(pending)),
            "finished": list(finished) if finished else NOT_GIVEN,
            "policy": policy,
            "fallback": fallback,
            "backfill": backfill,
            "placement": placement,
            "explain": explain,
            "deadline_ms": deadline_ms,
        }
    )
    return RequestOptions(
        "POST", "/v1/decide", json=body, timeout=timeout, idempotency_key=idempotency_key
    )


def _decide_gpu_options(
    *,
    now: float,
    nodes: Sequence[GpuNodeParam],
    jobs: Sequence[GpuJobParam],
    policy: str | NotGiven,
    fallback: str | NotGiven,
    gpu: GpuSettingsParam | NotGiven,
    explain: bool | NotGiven,
    deadline_ms: float | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = strip_not_given(
        {
            "domain": "gpu",
            "now": now,
            "nodes": plain(list(nodes)),
            "jobs": plain(list(jobs)),
            "policy": policy,
            "fallback": fallback,
            "gpu": plain(gpu),
            "explain": explain,
            "deadline_ms": deadline_ms,
        }
    )
    return RequestOptions(
        "POST", "/v1/decide", json=body, timeout=timeout, idempotency_key=idempotency_key
    )


def _decide_dag_options(
    *,
    now: float,
    nodes: Sequence[SnapshotNodeParam],
    dags: Sequence[DagStateParam],
    executor_capacity: Mapping[str, float] | NotGiven,
    trigger: RoundTriggerParam | NotGiven,
    policy: str | NotGiven,
    fallback: str | NotGiven,
    weighted_fair_alpha: float | NotGiven,
    explain: bool | NotGiven,
    deadline_ms: float | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = strip_not_given(
        {
            "domain": "dag",
            "now": now,
            "nodes": plain(list(nodes)),
            "dags": plain(list(dags)),
            "executor_capacity": plain(executor_capacity),
            "trigger": plain(trigger),
            "policy": policy,
            "fallback": fallback,
            "weighted_fair_alpha": weighted_fair_alpha,
            "explain": explain,
            "deadline_ms": deadline_ms,
        }
    )
    return RequestOptions(
        "POST", "/v1/decide", json=body, timeout=timeout, idempotency_key=idempotency_key
    )


class Client(SyncAPIClient):
    """Synchronous Kairos client.

    >>> from kairos_client import Client
    >>> client = Client()  # KAIROS_BASE_URL / KAIROS_API_KEY from the environment
    >>> client.clusters.upsert("c1", resources=["cpu"])  # doctest: +SKIP

    Args:
        api_key: sent as ``Authorization: Bearer``; defaults to ``$KAIROS_API_KEY``.
        base_url: defaults to ``$KAIROS_BASE_URL``, then ``http://127.0.0.1:8000``.
        timeout: per attempt, seconds or an ``httpx.Timeout`` (default 5 s, 2 s to connect).
        max_retries: extra attempts after connection errors, timeouts, 408, 429 and 5xx.
        jitter_seed: seeds the backoff jitter (``None``: OS entropy, so clients do not retry in
            lock-step; pass a number for reproducible delays in tests).
        transport: an ``httpx.BaseTransport`` (e.g. ``httpx.MockTransport``) to send through.
        http_client: a configured ``httpx.Client`` to use instead (not closed by ``close()``).
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        max_retries: int = DEFAULT_MAX_RETRIES,
        default_headers: Headers | None = None,
        jitter_seed: int | None = None,
        initial_retry_delay_s: float = INITIAL_RETRY_DELAY_S,
        max_retry_delay_s: float = MAX_RETRY_DELAY_S,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            jitter_seed=jitter_seed,
            initial_retry_delay_s=initial_retry_delay_s,
            max_retry_delay_s=max_retry_delay_s,
            transport=transport,
            http_client=http_client,
        )

    @cached_property
    def clusters(self) -> Clusters:
        return Clusters(self)

    @cached_property
    def nodes(self) -> Nodes:
        return Nodes(self)

    @cached_property
    def jobs(self) -> Jobs:
        return Jobs(self)

    @cached_property
    def dags(self) -> Dags:
        return Dags(self)

    @cached_property
    def decisions(self) -> Decisions:
        return Decisions(self)

    @cached_property
    def policies(self) -> Policies:
        return Policies(self)

    @cached_property
    def audit(self) -> Audit:
        return Audit(self)

    @cached_property
    def tunes(self) -> Tunes:
        return Tunes(self)

    def with_options(
        self,
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        max_retries: int | NotGiven = NOT_GIVEN,
        api_key: str | NotGiven = NOT_GIVEN,
    ) -> Client:
        """A client sharing this one's connection pool with some settings changed, e.g.
        ``client.with_options(max_retries=0).clusters.schedule("c1")``."""
        copy = Client(
            api_key=self.api_key if isinstance(api_key, NotGiven) else api_key,
            base_url=self.base_url,
            timeout=self.timeout if isinstance(timeout, NotGiven) else timeout,
            max_retries=self.max_retries if isinstance(max_retries, NotGiven) else max_retries,
            default_headers=self._default_headers,
            jitter_seed=self._jitter_seed,
            initial_retry_delay_s=self.initial_retry_delay_s,
            max_retry_delay_s=self.max_retry_delay_s,
            http_client=self._client,
        )
        copy._rng = self._rng
        return copy

    def decide(
        self,
        *,
        now: float,
        nodes: Sequence[SnapshotNodeParam],
        pending: Sequence[JobSpecParam],
        running: Sequence[RunningJobParam] = (),
        finished: Sequence[str] = (),
        policy: str | NotGiven = NOT_GIVEN,
        fallback: str | NotGiven = NOT_GIVEN,
        backfill: Literal["easy", "none"] | NotGiven = NOT_GIVEN,
        placement: Literal["first_fit", "best_fit", "tetris"] | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Stateless decision over a snapshot (``POST /v1/decide``): nothing in any cluster
        changes, the decision is stored in the log. ``finished`` lists ids of finished jobs
        that pending jobs may depend on."""
        options = _decide_options(
            now=now,
            nodes=nodes,
            pending=pending,
            running=running,
            finished=finished,
            policy=policy,
            fallback=fallback,
            backfill=backfill,
            placement=placement,
            explain=explain,
            deadline_ms=deadline_ms,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self.parse_model(Decision, self.request(options))

    def decide_gpu(
        self,
        *,
        now: float,
        nodes: Sequence[GpuNodeParam],
        jobs: Sequence[GpuJobParam] = (),
        policy: str | NotGiven = NOT_GIVEN,
        fallback: str | NotGiven = NOT_GIVEN,
        gpu: GpuSettingsParam | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Stateless decision over a GPU snapshot (``POST /v1/decide`` with ``domain: "gpu"``):
        GPU nodes and the active jobs with their service so far. The answer's ``allocations``
        start pending jobs, ``resizes`` give running elastic jobs new allocations and
        ``preemptions`` stop running jobs; ``tasks`` count GPUs."""
        options = _decide_gpu_options(
            now=now,
            nodes=nodes,
            jobs=jobs,
            policy=policy,
            fallback=fallback,
            gpu=gpu,
            explain=explain,
            deadline_ms=deadline_ms,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self.parse_model(Decision, self.request(options))

    def decide_dag(
        self,
        *,
        now: float,
        nodes: Sequence[SnapshotNodeParam],
        dags: Sequence[DagStateParam] = (),
        executor_capacity: Mapping[str, float] | NotGiven = NOT_GIVEN,
        trigger: RoundTriggerParam | NotGiven = NOT_GIVEN,
        policy: str | NotGiven = NOT_GIVEN,
        fallback: str | NotGiven = NOT_GIVEN,
        weighted_fair_alpha: float | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Stateless decision over a DAG snapshot (``POST /v1/decide`` with ``domain: "dag"``):
        nodes, the executor slot and DAGs with their stages' progress. Each allocation grants a
        stage ``{dag_id}:{stage_id}`` slots per node (``tasks``) under ``parallelism_limit``;
        reservations commit slots to stages whose parents still run."""
        options = _decide_dag_options(
            now=now,
            nodes=nodes,
            dags=dags,
            executor_capacity=executor_capacity,
            trigger=trigger,
            policy=policy,
            fallback=fallback,
            weighted_fair_alpha=weighted_fair_alpha,
            explain=explain,
            deadline_ms=deadline_ms,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self.parse_model(Decision, self.request(options))

    def health(self, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> Mapping[str, object]:
        """``GET /readyz`` once (no retries): ``{"database", "queue", "policies"}`` each ``ok``,
        ``degraded`` or ``down``. A 503 (not ready) returns its body too; it is an answer."""
        options = RequestOptions("GET", "/readyz", timeout=timeout)
        try:
            body: object = self._json(self.with_options(max_retries=0).request(options))
        except ServiceUnavailableError as exc:
            body = exc.body
        return as_object(body) or {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient(AsyncAPIClient):
    """Asynchronous Kairos client; same arguments and resources as :class:`Client`.

    >>> async with AsyncClient() as client:  # doctest: +SKIP
    ...     decision = await client.clusters.schedule("c1")
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        max_retries: int = DEFAULT_MAX_RETRIES,
        default_headers: Headers | None = None,
        jitter_seed: int | None = None,
        initial_retry_delay_s: float = INITIAL_RETRY_DELAY_S,
        max_retry_delay_s: float = MAX_RETRY_DELAY_S,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            jitter_seed=jitter_seed,
            initial_retry_delay_s=initial_retry_delay_s,
            max_retry_delay_s=max_retry_delay_s,
            transport=transport,
            http_client=http_client,
        )

    @cached_property
    def clusters(self) -> AsyncClusters:
        return AsyncClusters(self)

    @cached_property
    def nodes(self) -> AsyncNodes:
        return AsyncNodes(self)

    @cached_property
    def jobs(self) -> AsyncJobs:
        return AsyncJobs(self)

    @cached_property
    def dags(self) -> AsyncDags:
        return AsyncDags(self)

    @cached_property
    def decisions(self) -> AsyncDecisions:
        return AsyncDecisions(self)

    @cached_property
    def policies(self) -> AsyncPolicies:
        return AsyncPolicies(self)

    @cached_property
    def audit(self) -> AsyncAudit:
        return AsyncAudit(self)

    @cached_property
    def tunes(self) -> AsyncTunes:
        return AsyncTunes(self)

    def with_options(
        self,
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        max_retries: int | NotGiven = NOT_GIVEN,
        api_key: str | NotGiven = NOT_GIVEN,
    ) -> AsyncClient:
        """A client sharing this one's connection pool with some settings changed."""
        copy = AsyncClient(
            api_key=self.api_key if isinstance(api_key, NotGiven) else api_key,
            base_url=self.base_url,
            timeout=self.timeout if isinstance(timeout, NotGiven) else timeout,
            max_retries=self.max_retries if isinstance(max_retries, NotGiven) else max_retries,
            default_headers=self._default_headers,
            jitter_seed=self._jitter_seed,
            initial_retry_delay_s=self.initial_retry_delay_s,
            max_retry_delay_s=self.max_retry_delay_s,
            http_client=self._client,
        )
        copy._rng = self._rng
        return copy

    async def decide(
        self,
        *,
        now: float,
        nodes: Sequence[SnapshotNodeParam],
        pending: Sequence[JobSpecParam],
        running: Sequence[RunningJobParam] = (),
        finished: Sequence[str] = (),
        policy: str | NotGiven = NOT_GIVEN,
        fallback: str | NotGiven = NOT_GIVEN,
        backfill: Literal["easy", "none"] | NotGiven = NOT_GIVEN,
        placement: Literal["first_fit", "best_fit", "tetris"] | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Stateless decision over a snapshot (see :meth:`Client.decide`)."""
        options = _decide_options(
            now=now,
            nodes=nodes,
            pending=pending,
            running=running,
            finished=finished,
            policy=policy,
            fallback=fallback,
            backfill=backfill,
            placement=placement,
            explain=explain,
            deadline_ms=deadline_ms,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self.parse_model(Decision, await self.request(options))

    async def decide_gpu(
        self,
        *,
        now: float,
        nodes: Sequence[GpuNodeParam],
        jobs: Sequence[GpuJobParam] = (),
        policy: str | NotGiven = NOT_GIVEN,
        fallback: str | NotGiven = NOT_GIVEN,
        gpu: GpuSettingsParam | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Stateless decision over a GPU snapshot (see :meth:`Client.decide_gpu`)."""
        options = _decide_gpu_options(
            now=now,
            nodes=nodes,
            jobs=jobs,
            policy=policy,
            fallback=fallback,
            gpu=gpu,
            explain=explain,
            deadline_ms=deadline_ms,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self.parse_model(Decision, await self.request(options))

    async def decide_dag(
        self,
        *,
        now: float,
        nodes: Sequence[SnapshotNodeParam],
        dags: Sequence[DagStateParam] = (),
        executor_capacity: Mapping[str, float] | NotGiven = NOT_GIVEN,
        trigger: RoundTriggerParam | NotGiven = NOT_GIVEN,
        policy: str | NotGiven = NOT_GIVEN,
        fallback: str | NotGiven = NOT_GIVEN,
        weighted_fair_alpha: float | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Stateless decision over a DAG snapshot (see :meth:`Client.decide_dag`)."""
        options = _decide_dag_options(
            now=now,
            nodes=nodes,
            dags=dags,
            executor_capacity=executor_capacity,
            trigger=trigger,
            policy=policy,
            fallback=fallback,
            weighted_fair_alpha=weighted_fair_alpha,
            explain=explain,
            deadline_ms=deadline_ms,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self.parse_model(Decision, await self.request(options))

    async def health(self, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> Mapping[str, object]:
        """``GET /readyz`` once (no retries); a 503 (not ready) returns its body too."""
        options = RequestOptions("GET", "/readyz", timeout=timeout)
        try:
            body: object = self._json(await self.with_options(max_retries=0).request(options))
        except ServiceUnavailableError as exc:
            body = exc.body
        return as_object(body) or {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
