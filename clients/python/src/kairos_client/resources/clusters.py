from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypeAlias

from kairos_client._base_client import RequestOptions
from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params, plain
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout, strip_not_given
from kairos_client.types.cluster import Cluster
from kairos_client.types.dag import DagSettingsParam, RoundTriggerParam
from kairos_client.types.decision import Decision
from kairos_client.types.gpu import GpuSettingsParam
from kairos_client.types.shadow import ShadowReport

__all__ = ["AsyncClusters", "Clusters"]

PlacementName: TypeAlias = Literal["first_fit", "best_fit", "tetris"]


def _upsert(
    cluster_id: str,
    *,
    resources: Sequence[str],
    name: str | NotGiven | None,
    policy: str | NotGiven | None,
    fallback: str | NotGiven | None,
    backfill: Literal["easy", "none"] | NotGiven,
    placement: PlacementName | NotGiven,
    shadow_policy: str | NotGiven | None,
    labels: Mapping[str, str] | NotGiven,
    timeout: Timeout | NotGiven,
    domain: Literal["hpc", "gpu", "dag"] | NotGiven = NOT_GIVEN,
    gpu: GpuSettingsParam | NotGiven = NOT_GIVEN,
    dag: DagSettingsParam | NotGiven = NOT_GIVEN,
) -> RequestOptions:
    body = strip_not_given(
        {
            "domain": domain,
            "gpu": plain(gpu),
            "dag": plain(dag),
            "resources": list(resources),
            "name": name,
            "policy": policy,
            "fallback": fallback,
            "backfill": backfill,
            "placement": placement,
            "shadow_policy": shadow_policy,
            "labels": plain(labels),
        }
    )
    return RequestOptions("PUT", path("/v1/clusters/{}", cluster_id), json=body, timeout=timeout)


def _schedule(
    cluster_id: str,
    *,
    dry_run: bool | NotGiven,
    now: float | NotGiven,
    policy: str | NotGiven,
    explain: bool | NotGiven,
    deadline_ms: float | NotGiven,
    trigger: RoundTriggerParam | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = strip_not_given(
        {
            "dry_run": dry_run,
            "now": now,
            "policy": policy,
            "explain": explain,
            "deadline_ms": deadline_ms,
            "trigger": plain(trigger),
        }
    )
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/schedule", cluster_id),
        json=body,
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


class Clusters(SyncAPIResource):
    """``client.clusters``: create/update, read, list and delete clusters; run scheduling."""

    def upsert(
        self,
        cluster_id: str,
        *,
        resources: Sequence[str],
        name: str | NotGiven | None = NOT_GIVEN,
        policy: str | NotGiven | None = NOT_GIVEN,
        fallback: str | NotGiven | None = NOT_GIVEN,
        backfill: Literal["easy", "none"] | NotGiven = NOT_GIVEN,
        placement: PlacementName | NotGiven = NOT_GIVEN,
        shadow_policy: str | NotGiven | None = NOT_GIVEN,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        domain: Literal["hpc", "gpu", "dag"] | NotGiven = NOT_GIVEN,
        gpu: GpuSettingsParam | NotGiven = NOT_GIVEN,
        dag: DagSettingsParam | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> Cluster:
        """Create the cluster, or replace its configuration (``PUT /v1/clusters/{id}``).

        ``policy`` is ``"<name>[@version]"`` of a learned or heuristic policy; ``fallback`` the
        heuristic used when the policy cannot answer in time; ``shadow_policy`` one whose
        choices are recorded next to each decision but never applied. ``domain`` (``hpc`` by
        default, fixed at creation) chooses the rules; a ``gpu`` cluster takes ``gpu`` settings
        (restart cost, 2D-LAS thresholds, placement), a ``dag`` cluster ``dag`` settings (the
        executor slot, the weighted-fair alpha).
        """
        options = _upsert(
            cluster_id,
            resources=resources,
            name=name,
            policy=policy,
            fallback=fallback,
            backfill=backfill,
            placement=placement,
            shadow_policy=shadow_policy,
            labels=labels,
            timeout=timeout,
            domain=domain,
            gpu=gpu,
            dag=dag,
        )
        return self._client.parse_model(Cluster, self._client.request(options))

    def retrieve(self, cluster_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> Cluster:
        """One cluster with its totals (capacity, allocated, free, pending/running counts)."""
        options = RequestOptions("GET", path("/v1/clusters/{}", cluster_id), timeout=timeout)
        return self._client.parse_model(Cluster, self._client.request(options))

    def list(
        self, *, limit: int | NotGiven = NOT_GIVEN, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> SyncCursorPage[Cluster]:
        """Every cluster of this tenant; iterate the result to walk all pages."""
        return self._client.get_page(
            Cluster, "/v1/clusters", params=list_params(limit), timeout=timeout
        )

    def shadow_report(
        self, cluster_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> ShadowReport:
        """How often the cluster's shadow policy agreed with the deciding one (same jobs)."""
        options = RequestOptions(
            "GET", path("/v1/clusters/{}/shadow-report", cluster_id), timeout=timeout
        )
        return self._client.parse_model(ShadowReport, self._client.request(options))

    def delete(self, cluster_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> None:
        """Delete the cluster with its nodes and jobs."""
        self._client.request(
            RequestOptions("DELETE", path("/v1/clusters/{}", cluster_id), timeout=timeout)
        )

    def schedule(
        self,
        cluster_id: str,
        *,
        dry_run: bool | NotGiven = NOT_GIVEN,
        now: float | NotGiven = NOT_GIVEN,
        policy: str | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        trigger: RoundTriggerParam | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Run one scheduling cycle. Unless ``dry_run``, the allocations are applied (jobs become
        ``running``, node capacity is taken) atomically with storing the decision.
        ``deadline_ms`` bounds the primary policy; past it the fallback decides. ``trigger``
        (dag clusters): the event that caused the round."""
        options = _schedule(
            cluster_id,
            dry_run=dry_run,
            now=now,
            policy=policy,
            explain=explain,
            deadline_ms=deadline_ms,
            trigger=trigger,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Decision, self._client.request(options))


class AsyncClusters(AsyncAPIResource):
    """``client.clusters`` of :class:`~kairos_client.AsyncClient`."""

    async def upsert(
        self,
        cluster_id: str,
        *,
        resources: Sequence[str],
        name: str | NotGiven | None = NOT_GIVEN,
        policy: str | NotGiven | None = NOT_GIVEN,
        fallback: str | NotGiven | None = NOT_GIVEN,
        backfill: Literal["easy", "none"] | NotGiven = NOT_GIVEN,
        placement: PlacementName | NotGiven = NOT_GIVEN,
        shadow_policy: str | NotGiven | None = NOT_GIVEN,
        labels: Mapping[str, str] | NotGiven = NOT_GIVEN,
        domain: Literal["hpc", "gpu", "dag"] | NotGiven = NOT_GIVEN,
        gpu: GpuSettingsParam | NotGiven = NOT_GIVEN,
        dag: DagSettingsParam | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> Cluster:
        """Create the cluster, or replace its configuration (``PUT /v1/clusters/{id}``)."""
        options = _upsert(
            cluster_id,
            resources=resources,
            name=name,
            policy=policy,
            fallback=fallback,
            backfill=backfill,
            placement=placement,
            shadow_policy=shadow_policy,
            labels=labels,
            timeout=timeout,
            domain=domain,
            gpu=gpu,
            dag=dag,
        )
        return self._client.parse_model(Cluster, await self._client.request(options))

    async def retrieve(
        self, cluster_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Cluster:
        """One cluster with its totals (capacity, allocated, free, pending/running counts)."""
        options = RequestOptions("GET", path("/v1/clusters/{}", cluster_id), timeout=timeout)
        return self._client.parse_model(Cluster, await self._client.request(options))

    def list(
        self, *, limit: int | NotGiven = NOT_GIVEN, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> AsyncPaginator[Cluster]:
        """Every cluster of this tenant: ``await`` for the first page, ``async for`` for all."""
        return AsyncPaginator(
            lambda: self._client.get_page(
                Cluster, "/v1/clusters", params=list_params(limit), timeout=timeout
            )
        )

    async def shadow_report(
        self, cluster_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> ShadowReport:
        """How often the cluster's shadow policy agreed with the deciding one (same jobs)."""
        options = RequestOptions(
            "GET", path("/v1/clusters/{}/shadow-report", cluster_id), timeout=timeout
        )
        return self._client.parse_model(ShadowReport, await self._client.request(options))

    async def delete(self, cluster_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> None:
        """Delete the cluster with its nodes and jobs."""
        await self._client.request(
            RequestOptions("DELETE", path("/v1/clusters/{}", cluster_id), timeout=timeout)
        )

    async def schedule(
        self,
        cluster_id: str,
        *,
        dry_run: bool | NotGiven = NOT_GIVEN,
        now: float | NotGiven = NOT_GIVEN,
        policy: str | NotGiven = NOT_GIVEN,
        explain: bool | NotGiven = NOT_GIVEN,
        deadline_ms: float | NotGiven = NOT_GIVEN,
        trigger: RoundTriggerParam | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Decision:
        """Run one scheduling cycle (see :meth:`Clusters.schedule`)."""
        options = _schedule(
            cluster_id,
            dry_run=dry_run,
            now=now,
            policy=policy,
            explain=explain,
            deadline_ms=deadline_ms,
            trigger=trigger,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Decision, await self._client.request(options))
