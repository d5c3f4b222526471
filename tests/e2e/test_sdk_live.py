"""The Python SDK against a live ``kairos serve`` subprocess on real PostgreSQL.

One throwaway database and one server per module (auth on, two tenants). Runs the README quick
start sync and async, pagination over several pages, each error class the service can produce,
and retries through an injected transport that loses a response (the service replays it for the
same ``Idempotency-Key``).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import kairos_client
import psycopg2
import pytest
from kairos_client import (
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    ValidationError,
)
from sqlalchemy.engine import make_url

from tests.serving import free_port, kairos_serve

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = os.environ.get("KAIROS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
ACME_KEY = "sk-acme-e2e"
GLOBEX_KEY = "sk-globex-e2e"
MAX_BODY_BYTES = 64 * 1024


def _admin(sql: str) -> None:
    url = make_url(PG_ADMIN_URL)
    conn = psycopg2.connect(
        host=url.host, port=url.port or 5432, user=url.username, dbname=url.database
    )
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    name = f"kairos_sdk_e2e_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _admin(f'CREATE DATABASE "{name}"')
    log_path = tmp_path_factory.mktemp("kairos-serve") / "serve.log"
    env = {
        **os.environ,
        "KAIROS_DATABASE_URL": make_url(PG_ADMIN_URL)
        .set(database=name)
        .render_as_string(hide_password=False),
        "KAIROS_API_KEYS": f"acme:{ACME_KEY},globex:{GLOBEX_KEY}",
        "KAIROS_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "KAIROS_LOG_LEVEL": "warning",
    }
    env.pop("KAIROS_REDIS_URL", None)
    try:
        with kairos_serve(env, log_path) as base_url:
            yield base_url
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def client(server: str) -> Iterator[Client]:
    with Client(base_url=server, api_key=ACME_KEY, jitter_seed=0) as c:
        yield c


@pytest.fixture
def cid() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


NODES: list[kairos_client.types.NodeParam] = [
    {"id": "n1", "capacity": {"cpu": 32, "gpu": 4}},
    {"id": "n2", "capacity": {"cpu": 32, "gpu": 4}},
]


class TestQuickStart:
    """The README quick start, line for line."""

    def test_sync(self, server: str, cid: str):
        with Client(base_url=server, api_key=ACME_KEY) as client:
            client.clusters.upsert(cid, resources=["cpu", "gpu"])
            client.nodes.upsert_many(cid, NODES)
            client.jobs.submit(
                cid, id="train-1", per_task={"cpu": 8, "gpu": 1}, tasks=2, walltime_s=3600
            )
            client.jobs.submit(cid, id="etl-1", per_task={"cpu": 4}, walltime_s=600)

            decision = client.clusters.schedule(cid)
            assert isinstance(decision, kairos_client.Decision)
            assert sorted(decision.allocated_job_ids()) == ["etl-1", "train-1"]
            assert decision.policy.kind in {"heuristic", "onnx"}
            assert decision.fallback.used in {True, False}

            running = list(client.jobs.list(cid, state="running"))
            assert sorted(j.id for j in running) == ["etl-1", "train-1"]
            assert all(j.decision_id == decision.id for j in running)
            train = client.jobs.retrieve(cid, "train-1")
            assert sum(p.tasks for p in train.placements) == 2

            finished = client.jobs.send_event(cid, "etl-1", type="finished")
            assert finished.state == "finished"
            cluster = client.clusters.retrieve(cid)
            assert (cluster.running_jobs, cluster.pending_jobs) == (1, 0)
            assert cluster.allocated["gpu"] == 2
            assert cluster.free["cpu"] == 64 - 16

            report = client.clusters.shadow_report(cid)
            assert (report.decisions, report.shadow_policy) == (1, None)

            logged = client.decisions.retrieve(decision.id)
            assert logged.id == decision.id
            assert logged.input
            assert next(iter(client.decisions.list(cid))).id == decision.id
            assert any(p.kind == "heuristic" for p in client.policies.list())

            snapshot = client.decide(
                now=1_767_225_600.0,
                nodes=[{"id": "a", "capacity": {"cpu": 8}}],
                pending=[{"id": "p1", "per_task": {"cpu": 4}, "walltime_s": 60}],
            )
            assert snapshot.cluster_id is None
            assert snapshot.allocated_job_ids() == ["p1"]

            client.clusters.delete(cid)
            with pytest.raises(NotFoundError):
                client.clusters.retrieve(cid)

    async def test_async(self, server: str, cid: str):
        async with AsyncClient(base_url=server, api_key=ACME_KEY) as client:
            await client.clusters.upsert(cid, resources=["cpu", "gpu"])
            await client.nodes.upsert_many(cid, NODES)
            await client.jobs.submit(
                cid, id="train-1", per_task={"cpu": 8, "gpu": 1}, tasks=2, walltime_s=3600
            )
            await client.jobs.submit(cid, id="etl-1", per_task={"cpu": 4}, walltime_s=600)

            decision = await client.clusters.schedule(cid)
            assert sorted(decision.allocated_job_ids()) == ["etl-1", "train-1"]

            running = [j.id async for j in client.jobs.list(cid, state="running")]
            assert sorted(running) == ["etl-1", "train-1"]
            finished = await client.jobs.send_event(cid, "etl-1", type="finished")
            assert finished.state == "finished"
            cluster = await client.clusters.retrieve(cid)
            assert cluster.running_jobs == 1
            assert (await client.decisions.retrieve(decision.id)).id == decision.id
            assert await client.policies.list()
            snapshot = await client.decide(
                now=1_767_225_600.0,
                nodes=[{"id": "a", "capacity": {"cpu": 8}}],
                pending=[{"id": "p1", "per_task": {"cpu": 4}, "walltime_s": 60}],
            )
            assert snapshot.allocated_job_ids() == ["p1"]


README = ROOT / "clients" / "python" / "README.md"


def _readme_block(heading: str) -> str:
    """The first ```python block after ``## <heading>`` in the SDK README."""
    text = README.read_text()
    section = text[text.index(f"## {heading}\n") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


class TestReadme:
    """The README's code, executed as written (only the URL and key are substituted)."""

    def test_quick_start_block(self, server: str, capsys: pytest.CaptureFixture[str]):
        code = _readme_block("Quick start")
        assert '"http://127.0.0.1:8000"' in code
        code = code.replace('"http://127.0.0.1:8000"', repr(server)).replace(
            '"sk-..."', repr(ACME_KEY)
        )
        exec(compile(code, str(README), "exec"), {})
        out = capsys.readouterr().out.splitlines()
        _name, kind, used, *_reason = out[0].split()
        assert kind in {"heuristic", "onnx"}
        assert used in {"True", "False"}
        assert any(line.startswith("train-1 ") for line in out)
        with Client(base_url=server, api_key=ACME_KEY) as client:
            assert client.jobs.retrieve("gpu-east", "etl-1").state == "finished"

    def test_async_block(self, server: str, monkeypatch: pytest.MonkeyPatch):
        monkeypatch.setenv("KAIROS_BASE_URL", server)
        monkeypatch.setenv("KAIROS_API_KEY", ACME_KEY)
        code = _readme_block("Async")
        exec(compile(code, str(README), "exec"), {})
        with Client(base_url=server, api_key=ACME_KEY) as client:
            assert client.jobs.retrieve("gpu-east", "j1").state == "running"


class TestPagination:
    def test_sync_walks_several_pages(self, client: Client, cid: str):
        client.clusters.upsert(cid, resources=["cpu"])
        ids = [f"j{i:02d}" for i in range(8)]
        client.jobs.submit_many(
            cid, [{"id": i, "per_task": {"cpu": 1}, "walltime_s": 10} for i in ids]
        )
        first = client.jobs.list(cid, state="pending", limit=3)
        assert len(first.items) == 3
        assert first.has_next_page()
        pages = list(first.iter_pages())
        assert [len(p.items) for p in pages] == [3, 3, 2]
        assert sorted(j.id for j in client.jobs.list(cid, state="pending", limit=3)) == ids

    async def test_async_walks_several_pages(self, server: str, cid: str):
        async with AsyncClient(base_url=server, api_key=ACME_KEY) as client:
            await client.clusters.upsert(cid, resources=["cpu"])
            await client.nodes.upsert_many(
                cid, [{"id": f"n{i}", "capacity": {"cpu": 1}} for i in range(5)]
            )
            page = await client.nodes.list(cid, limit=2)
            assert page.has_next_page()
            seen = [n.id async for n in client.nodes.list(cid, limit=2)]
            assert sorted(seen) == [f"n{i}" for i in range(5)]

    def test_cluster_list_pages(self, client: Client):
        made = [f"pg-{uuid.uuid4().hex[:8]}" for _ in range(3)]
        for cluster_id in made:
            client.clusters.upsert(cluster_id, resources=["cpu"])
        listed = [c.id for c in client.clusters.list(limit=1)]
        assert set(made) <= set(listed)
        assert len(listed) == len(set(listed))


class _MangleBody(httpx.BaseTransport):
    """Sends the request with its body replaced by invalid JSON (the SDK never does that)."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = dict(request.headers)
        headers["content-length"] = "9"
        bad = httpx.Request(request.method, request.url, headers=headers, content=b'{"id": 1,')
        return self._inner.handle_request(bad)

    def close(self) -> None:
        self._inner.close()


class TestErrors:
    def test_401_authentication_error(self, server: str):
        with (
            Client(base_url=server, api_key="wrong") as client,
            pytest.raises(AuthenticationError) as info,
        ):
            client.clusters.list()
        assert info.value.status_code == 401
        assert info.value.code

    def test_404_not_found_error(self, client: Client):
        with pytest.raises(NotFoundError) as info:
            client.clusters.retrieve("does-not-exist")
        assert info.value.code
        assert "does-not-exist" in info.value.message

    def test_other_tenants_cluster_is_404(self, server: str, client: Client, cid: str):
        client.clusters.upsert(cid, resources=["cpu"])
        with Client(base_url=server, api_key=GLOBEX_KEY) as other, pytest.raises(NotFoundError):
            other.clusters.retrieve(cid)

    def test_409_conflict_error(self, client: Client, cid: str):
        client.clusters.upsert(cid, resources=["cpu"])
        client.jobs.submit(cid, id="j1", per_task={"cpu": 1}, walltime_s=10)
        again = client.jobs.submit(cid, id="j1", per_task={"cpu": 1}, walltime_s=10)
        assert again.id == "j1"  # same body: the same job
        with pytest.raises(ConflictError) as info:
            client.jobs.submit(cid, id="j1", per_task={"cpu": 2}, walltime_s=10)
        assert info.value.status_code == 409

    def test_422_validation_error_names_the_field(self, client: Client, cid: str):
        client.clusters.upsert(cid, resources=["cpu"])
        with pytest.raises(ValidationError) as info:
            client.jobs.submit(cid, id="bad", per_task={"cpu": 1}, walltime_s=-5)
        assert info.value.status_code == 422
        assert any("walltime_s" in str(d) for d in info.value.details), info.value.details

    def test_422_refused_policy_upload(self, client: Client):
        with pytest.raises(ValidationError) as info:
            client.policies.upload(b"this is not an ONNX model", {"name": "bogus"})
        assert info.value.status_code == 422
        assert info.value.message

    def test_413_payload_too_large_error(self, client: Client, cid: str):
        client.clusters.upsert(cid, resources=["cpu"])
        jobs: list[kairos_client.types.JobSpecParam] = [
            {"id": f"big-{i}", "per_task": {"cpu": 1}, "walltime_s": 10} for i in range(2000)
        ]
        with pytest.raises(PayloadTooLargeError) as info:
            client.jobs.submit_many(cid, jobs)
        assert info.value.status_code == 413

    def test_400_bad_request_error(self, server: str, cid: str):
        with (
            Client(base_url=server, api_key=ACME_KEY, transport=_MangleBody()) as client,
            pytest.raises(BadRequestError) as info,
        ):
            client.clusters.upsert(cid, resources=["cpu"])
        assert info.value.status_code == 400

    def test_connection_error_when_nothing_listens(self):
        with (
            Client(base_url=f"http://127.0.0.1:{free_port()}", max_retries=1) as client,
            pytest.raises(kairos_client.APIConnectionError),
        ):
            client.policies.list()

    def test_timeout_error_when_the_peer_never_answers(self):
        with socket.socket() as silent:  # accepts connections (backlog), never responds
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            port = silent.getsockname()[1]
            with (
                Client(base_url=f"http://127.0.0.1:{port}", timeout=0.2, max_retries=1) as client,
                pytest.raises(kairos_client.APITimeoutError),
            ):
                client.policies.list()


class _LoseFirstResponse(httpx.BaseTransport):
    """Delivers the first request to the server, then drops its response (a network failure
    after the server acted). Later requests pass through."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.seen: list[httpx.Request] = []
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        response = self._inner.handle_request(request)
        if len(self.seen) == 1:
            response.read()
            response.close()
            raise httpx.ReadError("connection reset after the request was processed")
        self.responses.append(response)
        return response

    def close(self) -> None:
        self._inner.close()


class TestRetriesAgainstTheService:
    def test_lost_response_is_retried_with_the_same_key_and_replayed(self, server: str, cid: str):
        with Client(base_url=server, api_key=ACME_KEY) as setup:
            setup.clusters.upsert(cid, resources=["cpu"])
            setup.nodes.upsert_many(cid, [{"id": "n1", "capacity": {"cpu": 4}}])
            setup.jobs.submit(cid, id="j1", per_task={"cpu": 4}, walltime_s=10)
            setup.jobs.submit(cid, id="j2", per_task={"cpu": 4}, walltime_s=10)
        transport = _LoseFirstResponse()
        with Client(
            base_url=server,
            api_key=ACME_KEY,
            transport=transport,
            initial_retry_delay_s=0.05,
            jitter_seed=3,
        ) as client:
            decision = client.clusters.schedule(cid)
            first, second = transport.seen
            assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
            assert transport.responses[0].headers.get("idempotent-replayed") == "true"
            # The schedule ran once: one job started, one decision logged.
            assert decision.allocated_job_ids() == ["j1"]
            assert [d.id for d in client.decisions.list(cid)] == [decision.id]
            assert client.jobs.retrieve(cid, "j2").state == "pending"

    def test_explicit_key_makes_a_repeat_a_replay(self, client: Client, cid: str):
        client.clusters.upsert(cid, resources=["cpu"])
        client.nodes.upsert(cid, "n1", capacity={"cpu": 2})
        client.jobs.submit(cid, id="a", per_task={"cpu": 2}, walltime_s=10)
        client.jobs.submit(cid, id="b", per_task={"cpu": 2}, walltime_s=10)
        key = f"e2e-{uuid.uuid4()}"
        one = client.clusters.schedule(cid, idempotency_key=key)
        two = client.clusters.schedule(cid, idempotency_key=key)
        assert one.id == two.id
        assert client.jobs.retrieve(cid, "b").state == "pending"

    def test_concurrent_duplicates_resolve_to_one_decision(self, server: str, cid: str):
        """Several clients send the same schedule with one key at once: the service runs it once;
        the others are replayed, or told it is in progress (409) and retry until replayed."""
        with Client(base_url=server, api_key=ACME_KEY) as setup:
            setup.clusters.upsert(cid, resources=["cpu"])
            setup.nodes.upsert(cid, "n1", capacity={"cpu": 8})
            setup.jobs.submit_many(
                cid, [{"id": f"j{i}", "per_task": {"cpu": 1}, "walltime_s": 10} for i in range(8)]
            )
        key = f"e2e-concurrent-{uuid.uuid4()}"
        statuses: list[tuple[int, bool]] = []

        def record(response: httpx.Response) -> None:
            statuses.append((response.status_code, "idempotent-replayed" in response.headers))

        def schedule(_: int) -> str:
            http = httpx.Client(timeout=10, event_hooks={"response": [record]})
            with (
                http,
                Client(
                    base_url=server,
                    api_key=ACME_KEY,
                    http_client=http,
                    max_retries=5,
                    initial_retry_delay_s=0.05,
                ) as client,
            ):
                return client.clusters.schedule(cid, idempotency_key=key).id

        with ThreadPoolExecutor(max_workers=4) as pool:
            ids = set(pool.map(schedule, range(4)))
        assert len(ids) == 1
        # Exactly one request ran the round; every other answer was a replay or a 409 in progress.
        assert statuses.count((200, False)) == 1, statuses
        assert all(s in {(200, False), (200, True), (409, False)} for s in statuses), statuses
        with Client(base_url=server, api_key=ACME_KEY) as client:
            assert [d.id for d in client.decisions.list(cid)] == list(ids)
