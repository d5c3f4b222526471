from __future__ import annotations

import email.utils

import httpx
import pytest
from sdk_fakes import CLUSTER, DECISION, Script, error, job

from kairos_client import (
    APIConnectionError,
    AsyncClient,
    Client,
    ConflictError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
)
from kairos_client._base_client import parse_retry_after

IDEM = "Idempotency-Key"


class TestRetries:
    def test_connection_error_then_success_reuses_idempotency_key(
        self, client: Client, script: Script, sleeps: list[float]
    ):
        script.add(httpx.ConnectError("reset"), httpx.Response(201, json=job("j1")))
        created = client.jobs.submit("c1", id="j1", per_task={"cpu": 2}, walltime_s=60)
        assert created.id == "j1"
        assert len(script.requests) == 2
        first, second = script.requests
        assert first.headers[IDEM] == second.headers[IDEM]
        assert first.headers[IDEM].startswith("kairos-py-")
        assert first.content == second.content
        assert "Kairos-Retry-Count" not in first.headers
        assert second.headers["Kairos-Retry-Count"] == "1"
        assert len(sleeps) == 1

    def test_each_call_gets_a_fresh_idempotency_key(self, client: Client, script: Script):
        script.add(httpx.Response(200, json=DECISION), httpx.Response(200, json=DECISION))
        client.clusters.schedule("c1")
        client.clusters.schedule("c1")
        keys = {r.headers[IDEM] for r in script.requests}
        assert len(keys) == 2

    def test_explicit_idempotency_key_is_sent(self, client: Client, script: Script):
        script.add(httpx.Response(200, json=DECISION))
        client.clusters.schedule("c1", idempotency_key="mine-1")
        assert script.requests[0].headers[IDEM] == "mine-1"

    def test_put_get_delete_carry_no_idempotency_key(self, client: Client, script: Script):
        script.add(
            httpx.Response(200, json=CLUSTER),
            httpx.Response(200, json=CLUSTER),
            httpx.Response(204),
        )
        client.clusters.upsert("c1", resources=["cpu"])
        client.clusters.retrieve("c1")
        client.clusters.delete("c1")
        assert all(IDEM not in r.headers for r in script.requests)

    @pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
    def test_retryable_status_then_success(
        self, status: int, client: Client, script: Script, sleeps: list[float]
    ):
        script.add(error(status, "transient", "try again"), httpx.Response(200, json=DECISION))
        decision = client.clusters.schedule("c1")
        assert decision.id == "d1"
        assert len(script.requests) == 2
        assert script.requests[0].headers[IDEM] == script.requests[1].headers[IDEM]
        assert len(sleeps) == 1

    @pytest.mark.parametrize(
        ("status", "cls"), [(400, None), (404, NotFoundError), (409, ConflictError), (422, None)]
    )
    def test_client_errors_are_not_retried(
        self, status: int, cls, client: Client, script: Script, sleeps: list[float]
    ):
        script.add(error(status, "nope", "no"))
        with pytest.raises(cls or Exception):
            client.clusters.schedule("c1")
        assert len(script.requests) == 1
        assert sleeps == []

    def test_conflict_while_the_same_key_is_in_progress_is_retried(
        self, client: Client, script: Script, sleeps: list[float]
    ):
        script.add(
            error(
                409,
                "idempotency_key_in_progress",
                "still running",
                headers={"Retry-After": "1"},
            ),
            httpx.Response(200, json=DECISION, headers={"Idempotent-Replayed": "true"}),
        )
        decision = client.clusters.schedule("c1")
        assert decision.id == "d1"
        assert sleeps == [1.0]
        assert script.requests[0].headers[IDEM] == script.requests[1].headers[IDEM]

    def test_gives_up_after_max_retries(self, client: Client, script: Script, sleeps: list[float]):
        script.add(*(error(503, "down", "db down") for _ in range(3)))
        with pytest.raises(InternalServerError) as info:
            client.clusters.retrieve("c1")
        assert info.value.code == "down"
        assert len(script.requests) == 3  # 1 try + max_retries=2
        assert len(sleeps) == 2

    def test_connection_errors_exhausted(self, client: Client, script: Script):
        script.add(*(httpx.ConnectError("refused") for _ in range(3)))
        with pytest.raises(APIConnectionError):
            client.policies.list()
        assert len(script.requests) == 3

    def test_with_options_max_retries_zero(self, client: Client, script: Script):
        script.add(error(503, "down", "db down"))
        with pytest.raises(InternalServerError):
            client.with_options(max_retries=0).clusters.retrieve("c1")
        assert len(script.requests) == 1

    def test_retry_after_seconds_is_honoured(
        self, client: Client, script: Script, sleeps: list[float]
    ):
        script.add(
            error(429, "rate_limited", "slow down", headers={"Retry-After": "3"}),
            httpx.Response(200, json=CLUSTER),
        )
        client.clusters.retrieve("c1")
        assert sleeps == [3.0]

    def test_retry_after_ms_is_honoured(self, client: Client, script: Script, sleeps: list[float]):
        script.add(
            error(503, "busy", "busy", headers={"Retry-After-Ms": "250"}),
            httpx.Response(200, json=CLUSTER),
        )
        client.clusters.retrieve("c1")
        assert sleeps == [0.25]

    def test_absurd_retry_after_falls_back_to_backoff(
        self, client: Client, script: Script, sleeps: list[float]
    ):
        script.add(
            error(429, "rate_limited", "later", headers={"Retry-After": "3600"}),
            httpx.Response(200, json=CLUSTER),
        )
        client.clusters.retrieve("c1")
        assert len(sleeps) == 1
        assert 0.375 <= sleeps[0] <= 0.5

    def test_rate_limit_error_when_retries_exhausted(self, client: Client, script: Script):
        script.add(*(error(429, "rate_limited", "slow", headers={"Retry-After": "0"}),) * 3)
        with pytest.raises(RateLimitError):
            client.clusters.retrieve("c1")

    def test_x_should_retry_header_overrides(self, client: Client, script: Script):
        script.add(error(503, "final", "do not retry", headers={"x-should-retry": "false"}))
        with pytest.raises(InternalServerError):
            client.clusters.retrieve("c1")
        assert len(script.requests) == 1

    def test_backoff_grows_exponentially_with_bounded_jitter(self, script: Script):
        client = Client(
            base_url="http://x",
            transport=httpx.MockTransport(script),
            max_retries=5,
            jitter_seed=1,
            initial_retry_delay_s=0.5,
            max_retry_delay_s=4.0,
        )
        delays = [client._retry_delay(n, None) for n in range(6)]
        caps = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
        for delay, cap in zip(delays, caps, strict=True):
            assert 0.75 * cap <= delay <= cap

    def test_jitter_is_reproducible_with_a_seed(self):
        a = Client(base_url="http://x", jitter_seed=42)
        b = Client(base_url="http://x", jitter_seed=42)
        c = Client(base_url="http://x", jitter_seed=43)
        seq = [a._retry_delay(n, None) for n in range(4)]
        assert seq == [b._retry_delay(n, None) for n in range(4)]
        assert seq != [c._retry_delay(n, None) for n in range(4)]


class TestParseRetryAfter:
    def test_seconds(self):
        assert parse_retry_after(httpx.Headers({"Retry-After": "2"})) == 2.0

    def test_http_date(self):
        date = email.utils.formatdate(1_000_010.0, usegmt=True)
        assert parse_retry_after(httpx.Headers({"Retry-After": date}), now=1_000_000.0) == 10.0

    def test_garbage_and_absent(self):
        assert parse_retry_after(httpx.Headers({"Retry-After": "soon"})) is None
        assert parse_retry_after(httpx.Headers()) is None


class TestAsyncRetries:
    async def test_connection_error_then_success_reuses_idempotency_key(
        self, aclient: AsyncClient, script: Script, sleeps: list[float]
    ):
        script.add(httpx.ReadError("reset"), httpx.Response(200, json=DECISION))
        decision = await aclient.clusters.schedule("c1")
        assert decision.id == "d1"
        first, second = script.requests
        assert first.headers[IDEM] == second.headers[IDEM]
        assert len(sleeps) == 1

    async def test_retry_after_is_honoured(
        self, aclient: AsyncClient, script: Script, sleeps: list[float]
    ):
        script.add(
            error(429, "rate_limited", "slow down", headers={"Retry-After": "1.5"}),
            httpx.Response(201, json=job("j1")),
        )
        await aclient.jobs.submit("c1", id="j1", per_task={"cpu": 1}, walltime_s=5)
        assert sleeps == [1.5]

    async def test_gives_up_after_max_retries(self, aclient: AsyncClient, script: Script):
        script.add(*(error(500, "boom", "boom") for _ in range(3)))
        with pytest.raises(InternalServerError):
            await aclient.clusters.retrieve("c1")
        assert len(script.requests) == 3

    async def test_real_sleep_path(self, script: Script):
        script.add(error(503, "busy", "busy"), httpx.Response(200, json=CLUSTER))
        async with AsyncClient(
            base_url="http://x",
            transport=httpx.MockTransport(script),
            initial_retry_delay_s=0.01,
            jitter_seed=0,
        ) as client:
            assert (await client.clusters.retrieve("c1")).id == "c1"


def test_sync_real_sleep_path(script: Script):
    script.add(httpx.ConnectError("x"), httpx.Response(200, json=CLUSTER))
    with Client(
        base_url="http://x",
        transport=httpx.MockTransport(script),
        initial_retry_delay_s=0.01,
        jitter_seed=0,
    ) as client:
        assert client.clusters.retrieve("c1").id == "c1"
