from __future__ import annotations

from typing import Literal

from kairos_client._base_client import RequestOptions
from kairos_client._pagination import AsyncPaginator, SyncCursorPage
from kairos_client._params import list_params
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout, strip_not_given
from kairos_client.types.tune import Tune, TunePromotion

__all__ = ["AsyncTunes", "Tunes"]


def _tune(
    cluster_id: str,
    *,
    backfill: Literal["easy", "none"] | NotGiven,
    time_budget_s: float | NotGiven,
    seed: int | NotGiven,
    window_length: int | NotGiven,
    max_history: int | NotGiven,
    min_history: int | NotGiven,
    from_policy: str | NotGiven,
    auto_promote: bool | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    body = strip_not_given(
        {
            "backfill": backfill,
            "time_budget_s": time_budget_s,
            "seed": seed,
            "window_length": window_length,
            "max_history": max_history,
            "min_history": min_history,
            "from_policy": from_policy,
            "auto_promote": auto_promote,
        }
    )
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/tune", cluster_id),
        json=body,
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


def _promote(
    cluster_id: str,
    tune_id: str,
    *,
    force: bool | NotGiven,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    return RequestOptions(
        "POST",
        path("/v1/clusters/{}/tunes/{}/promote", cluster_id, tune_id),
        json=strip_not_given({"force": force}),
        timeout=timeout,
        idempotency_key=idempotency_key,
    )


def _history(
    cluster_id: str, *, since: float | NotGiven, limit: int | NotGiven, timeout: Timeout | NotGiven
) -> RequestOptions:
    params: dict[str, str | int | float | bool] = dict(list_params(limit))
    if not isinstance(since, NotGiven):
        params["since"] = since
    return RequestOptions(
        "GET", path("/v1/clusters/{}/history", cluster_id), params=params, timeout=timeout
    )


class Tunes(SyncAPIResource):
    """``client.tunes``: tune a cluster's policy from its own history, follow it, promote it."""

    def tune(
        self,
        cluster_id: str,
        *,
        backfill: Literal["easy", "none"] | NotGiven = NOT_GIVEN,
        time_budget_s: float | NotGiven = NOT_GIVEN,
        seed: int | NotGiven = NOT_GIVEN,
        window_length: int | NotGiven = NOT_GIVEN,
        max_history: int | NotGiven = NOT_GIVEN,
        min_history: int | NotGiven = NOT_GIVEN,
        from_policy: str | NotGiven = NOT_GIVEN,
        auto_promote: bool | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Tune:
        """Start a tune in the background (``POST /v1/clusters/{id}/tune``); follow it with
        :meth:`get_tune`. Its result runs as the cluster's shadow policy until promoted."""
        options = _tune(
            cluster_id,
            backfill=backfill,
            time_budget_s=time_budget_s,
            seed=seed,
            window_length=window_length,
            max_history=max_history,
            min_history=min_history,
            from_policy=from_policy,
            auto_promote=auto_promote,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Tune, self._client.request(options))

    def get_tune(
        self, cluster_id: str, tune_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Tune:
        """A tune's state, progress and (once it succeeded) result."""
        options = RequestOptions(
            "GET", path("/v1/clusters/{}/tunes/{}", cluster_id, tune_id), timeout=timeout
        )
        return self._client.parse_model(Tune, self._client.request(options))

    def list_tunes(
        self,
        cluster_id: str,
        *,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> SyncCursorPage[Tune]:
        """The cluster's tunes, newest first; iterate the result for all pages."""
        return self._client.get_page(
            Tune,
            path("/v1/clusters/{}/tunes", cluster_id),
            params=list_params(limit),
            timeout=timeout,
        )

    def promote(
        self,
        cluster_id: str,
        tune_id: str,
        *,
        force: bool | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> TunePromotion:
        """Make the tune's result the cluster's primary policy; a refusal (the guard, a tune
        not finished) raises :class:`~kairos_client.ConflictError` with the reason."""
        options = _promote(
            cluster_id, tune_id, force=force, timeout=timeout, idempotency_key=idempotency_key
        )
        return self._client.parse_model(TunePromotion, self._client.request(options))

    def history(
        self,
        cluster_id: str,
        *,
        since: float | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> str:
        """The cluster's finished jobs as SWF text (what ``kairos tune --trace`` reads)."""
        options = _history(cluster_id, since=since, limit=limit, timeout=timeout)
        return self._client.request(options).text


class AsyncTunes(AsyncAPIResource):
    """``client.tunes`` of :class:`~kairos_client.AsyncClient`."""

    async def tune(
        self,
        cluster_id: str,
        *,
        backfill: Literal["easy", "none"] | NotGiven = NOT_GIVEN,
        time_budget_s: float | NotGiven = NOT_GIVEN,
        seed: int | NotGiven = NOT_GIVEN,
        window_length: int | NotGiven = NOT_GIVEN,
        max_history: int | NotGiven = NOT_GIVEN,
        min_history: int | NotGiven = NOT_GIVEN,
        from_policy: str | NotGiven = NOT_GIVEN,
        auto_promote: bool | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Tune:
        """Start a tune in the background; follow it with :meth:`get_tune`."""
        options = _tune(
            cluster_id,
            backfill=backfill,
            time_budget_s=time_budget_s,
            seed=seed,
            window_length=window_length,
            max_history=max_history,
            min_history=min_history,
            from_policy=from_policy,
            auto_promote=auto_promote,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )
        return self._client.parse_model(Tune, await self._client.request(options))

    async def get_tune(
        self, cluster_id: str, tune_id: str, *, timeout: Timeout | NotGiven = NOT_GIVEN
    ) -> Tune:
        """A tune's state, progress and (once it succeeded) result."""
        options = RequestOptions(
            "GET", path("/v1/clusters/{}/tunes/{}", cluster_id, tune_id), timeout=timeout
        )
        return self._client.parse_model(Tune, await self._client.request(options))

    def list_tunes(
        self,
        cluster_id: str,
        *,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> AsyncPaginator[Tune]:
        """The cluster's tunes: ``await`` for the first page, ``async for`` for all."""
        params = list_params(limit)
        where = path("/v1/clusters/{}/tunes", cluster_id)
        return AsyncPaginator(
            lambda: self._client.get_page(Tune, where, params=params, timeout=timeout)
        )

    async def promote(
        self,
        cluster_id: str,
        tune_id: str,
        *,
        force: bool | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> TunePromotion:
        """Make the tune's result the cluster's primary policy, or raise the refusal."""
        options = _promote(
            cluster_id, tune_id, force=force, timeout=timeout, idempotency_key=idempotency_key
        )
        return self._client.parse_model(TunePromotion, await self._client.request(options))

    async def history(
        self,
        cluster_id: str,
        *,
        since: float | NotGiven = NOT_GIVEN,
        limit: int | NotGiven = NOT_GIVEN,
        timeout: Timeout | NotGiven = NOT_GIVEN,
    ) -> str:
        """The cluster's finished jobs as SWF text."""
        options = _history(cluster_id, since=since, limit=limit, timeout=timeout)
        return (await self._client.request(options)).text
