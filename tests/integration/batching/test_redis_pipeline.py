"""The Redis pipeline end to end: ``kairos serve`` (Postgres, Redis) and ``kairos worker``
subprocesses, with our own redis-server on a free port."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from typing import Any

import httpx
import psycopg2
import pytest
import redis

from tests.integration.batching.harness import RedisServer, Service, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def snapshot(
    seed: int, jobs: int = 12, nodes: int = 4, deadline_ms: float = 20_000
) -> dict[str, Any]:
    return {
        "now": 100_000.0,
        "nodes": [{"id": f"n{k}", "capacity": {"cpu": 16}} for k in range(nodes)],
        "pending": [
            {
                "id": f"s{seed}-j{i}",
                "per_task": {"cpu": 1 + (i * 7 + seed) % 12},
                "walltime_s": 60.0 * (1 + (i * 13 + seed) % 40),
                "submit_time": 90_000.0 + i,
            }
            for i in range(jobs)
        ],
        "policy": "hpc-test",
        "deadline_ms": deadline_ms,
    }


async def fire(
    base_url: str, n_requests: int, clients: int, *, jobs: int = 12, offset: int = 0
) -> list[dict[str, Any]]:
    """``n_requests`` /v1/decide calls from ``clients`` concurrent clients; every body."""
    todo: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n_requests):
        todo.put_nowait(offset + i)
    answers: list[dict[str, Any]] = []

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            while not todo.empty():
                seed = todo.get_nowait()
                response = await http.post("/v1/decide", json=snapshot(seed, jobs=jobs))
                assert response.status_code == 200, response.text
                answers.append(response.json())

    await asyncio.gather(*(client() for _ in range(clients)))
    return answers


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def stored_request_ids(pg_url: str, ids: list[str]) -> list[str]:
    """The stored decisions' request ids among ``ids`` (one entry per stored row)."""
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT request_id FROM decisions WHERE request_id = ANY(%s)", (ids,))
        return [row[0] for row in cur.fetchall()]


def readyz(base_url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{base_url}/readyz", timeout=5).json()
    return body


def test_two_workers_400_concurrent_decisions(
    service: Service, redis_server: RedisServer, pg_url: str
) -> None:
    service.start_worker("w1")
    service.start_worker("w2")
    service.start_api()
    wait_until(lambda: readyz(service.base_url)["queue"] == "ok", 30, "workers alive")
    started = time.perf_counter()
    answers = asyncio.run(fire(service.base_url, 400, 32))
    elapsed = time.perf_counter() - started
    assert len(answers) == 400
    assert all(a["policy"]["kind"] == "onnx" for a in answers)
    assert all(a["fallback"] == {"used": False, "reason": None} for a in answers)
    assert all(a["allocations"] for a in answers)
    ids = [a["request_id"] for a in answers]
    assert len(set(ids)) == 400
    stored = stored_request_ids(pg_url, ids)
    assert sorted(stored) == sorted(ids)  # each decision stored exactly once
    text = httpx.get(f"{service.base_url}/metrics").text
    count = metric(text, "kairos_batch_size_count")
    mean = metric(text, "kairos_batch_size_sum") / count
    assert mean > 1.0, f"mean batch size {mean}"
    client = redis.Redis(port=redis_server.port)
    assert client.keys("kairos:reply:*") == []  # no reply left behind: none answered twice
    delivered = len(client.keys("kairos:done:*"))
    assert delivered == 400, f"{400 - delivered} decided in-process: {service.log('api')[-2000:]}"
    assert client.xlen("kairos:requests") == 0
    client.close()
    print(  # noqa: T201 - the figures for the report (pytest -s)
        f"\n400 decisions / 32 clients / 2 workers: {elapsed:.2f}s, {400 / elapsed:.0f}/s, "
        f"mean batch {mean:.2f} over {count:.0f} batches"
    )


@pytest.mark.slow
def test_redis_killed_mid_flight_then_back(
    service: Service, redis_server: RedisServer, pg_url: str
) -> None:
    service.start_worker("w1")
    service.start_worker("w2")
    service.start_api()
    wait_until(lambda: readyz(service.base_url)["queue"] == "ok", 30, "workers alive")

    async def scenario() -> list[dict[str, Any]]:
        traffic = asyncio.create_task(fire(service.base_url, 240, 16))
        await asyncio.sleep(0.6)
        redis_server.kill()  # requests are in flight: some XADDed, some waiting on BLPOP
        return await traffic

    answers = asyncio.run(scenario())
    assert len(answers) == 240  # every request got a decision
    assert all(a["allocations"] for a in answers)
    wait_until(lambda: readyz(service.base_url)["queue"] == "degraded", 5, "queue degraded")
    body = readyz(service.base_url)
    assert body["status"] == "degraded"
    # while Redis is down the API decides in-process, with the model itself
    during = asyncio.run(fire(service.base_url, 20, 4, offset=1000))
    assert all(a["policy"]["kind"] == "onnx" for a in during)
    assert all(not a["fallback"]["used"] for a in during)

    redis_server.start()  # same port, empty server: the workers must recreate the group
    wait_until(lambda: readyz(service.base_url)["queue"] == "ok", 10, "queue ok again")
    client = redis.Redis(port=redis_server.port)
    wait_until(lambda: client.xinfo_groups("kairos:requests"), 10, "workers recreate the group")
    after = asyncio.run(fire(service.base_url, 40, 8, offset=2000))
    assert all(not a["fallback"]["used"] for a in after)
    delivered = {k.decode().split(":", 2)[2] for k in client.keys("kairos:done:*")}
    assert {a["request_id"] for a in after} <= delivered  # answered by the workers again
    client.close()
    ids = [a["request_id"] for a in answers + during + after]
    assert sorted(stored_request_ids(pg_url, ids)) == sorted(ids)


@pytest.mark.slow
def test_sigkilled_worker_pending_entries_are_reclaimed(
    service: Service, redis_server: RedisServer, pg_url: str
) -> None:
    victim = service.start_worker("victim")
    service.start_api()
    wait_until(lambda: readyz(service.base_url)["queue"] == "ok", 30, "victim alive")
    client = redis.Redis(port=redis_server.port)

    def victim_holds_entries() -> bool:
        info = client.xpending("kairos:requests", "kairos:workers")
        return int(info["pending"]) > 0

    async def scenario() -> list[dict[str, Any]]:
        # big snapshots: the victim is still deciding its batch when it is killed
        traffic = asyncio.create_task(fire(service.base_url, 12, 12, jobs=400))
        await asyncio.to_thread(wait_until, victim_holds_entries, 20, "victim reads a batch", 0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait(5)
        service.start_worker("rescuer")
        return await traffic

    answers = asyncio.run(scenario())
    assert len(answers) == 12
    assert all(not a["fallback"]["used"] for a in answers)
    assert all(a["policy"]["kind"] == "onnx" for a in answers)
    wait_until(lambda: "reclaimed" in service.log("rescuer"), 5, "rescuer log")
    assert client.xpending("kairos:requests", "kairos:workers")["pending"] == 0
    assert client.keys("kairos:reply:*") == []  # nothing delivered twice
    ids = [a["request_id"] for a in answers]
    assert sorted(stored_request_ids(pg_url, ids)) == sorted(ids)
    client.close()


@pytest.mark.slow
def test_no_worker_or_a_hung_redis_is_not_an_outage(
    service: Service, redis_server: RedisServer, pg_url: str
) -> None:
    service.start_api()
    # no worker yet: the queue is degraded and requests are decided in-process at once
    wait_until(lambda: readyz(service.base_url)["queue"] == "degraded", 10, "no worker")
    alone = httpx.post(f"{service.base_url}/v1/decide", json=snapshot(0), timeout=30).json()
    assert alone["fallback"]["used"] is False
    assert alone["policy"]["kind"] == "onnx"
    service.start_worker("w1")
    wait_until(lambda: readyz(service.base_url)["queue"] == "ok", 30, "worker alive")
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    try:
        body = snapshot(1, deadline_ms=200)
        started = time.perf_counter()
        answer = httpx.post(f"{service.base_url}/v1/decide", json=body, timeout=30).json()
        elapsed = time.perf_counter() - started
        assert answer["fallback"] == {"used": True, "reason": "deadline_exceeded"}
        assert elapsed < 5.0
        # slow pings (not refusals) degrade the queue after a few seconds; then in-process
        wait_until(lambda: readyz(service.base_url)["queue"] == "degraded", 15, "degraded")
        served = httpx.post(f"{service.base_url}/v1/decide", json=snapshot(2), timeout=30).json()
        assert served["fallback"]["used"] is False
        assert served["policy"]["kind"] == "onnx"
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: readyz(service.base_url)["queue"] == "ok", 10, "queue ok again")
