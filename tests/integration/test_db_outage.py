"""Fault test (issue 23, finding 6): this module's own PostgreSQL server is stopped and started
again under a bounded load on a real Kairos server. No 500 at any time; only 503
``backend_unavailable`` (with ``Retry-After``) while it is down, besides ``/v1/decide``'s
unstored decisions; recovery without restarting Kairos; every acknowledged write readable
afterwards; the background tasks still running.

The server is started with ``initdb``/``pg_ctl`` on a free loopback port in a temporary
directory (as the ``postgres`` user when the tests run as root: ``initdb`` refuses root), so
stopping it disturbs nothing else.
"""

from __future__ import annotations

import asyncio
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.db.engine import backend_unavailable, make_engine
from app.db.migrate import upgrade_to_head
from app.db.session import Database
from app.main import create_app
from app.settings import Settings
from tests.serving import free_port, serve_in_thread

CLIENTS = 4
#: acknowledged job submissions each client makes before the stop, and again after the start
ACKS_PER_PHASE = 3
OUTAGE_S = 3.0
PHASE_TIMEOUT_S = 60.0
BACKGROUND_TASKS = ("decision-writer", "kairos-idempotency-janitor", "kairos-models-watch")


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class OwnPostgres:
    """A PostgreSQL server of this module's own, on ``port``, with its data in ``root``."""

    def __init__(self, bin_dir: Path, root: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.port = port
        self.data = root / "data"
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, tool: str, *args: str) -> None:
        command = [*self._as_postgres, str(self.bin_dir / tool), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        command = [*self._as_postgres, str(self.bin_dir / "pg_ctl"), "-D", str(self.data)]
        return subprocess.run([*command, "status"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnPostgres]:
    bin_dir = _pg_bin()
    if bin_dir is None or (os.geteuid() == 0 and shutil.which("runuser") is None):
        pytest.skip("needs PostgreSQL's server binaries (initdb, pg_ctl)")
    root = Path(tempfile.mkdtemp(prefix="kairos-own-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    pg = OwnPostgres(bin_dir, root, free_port())
    try:
        pg.init()
        pg.start()
        asyncio.run(_migrate(pg.url))
        yield pg
    finally:
        if pg.running():
            pg.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


@dataclass(frozen=True, slots=True)
class Call:
    started: float
    ended: float
    method: str
    path: str
    status: int | None  # None: no response (a transport error)
    code: str | None
    retry_after: str | None
    error: str | None = None


@dataclass
class LoadClient:
    """Submits jobs (same ``Idempotency-Key`` on every retry of one job), reads them back,
    creates clusters and asks ``/v1/decide``; retries a 503 until it is acknowledged."""

    url: str
    name: str
    stop: threading.Event
    calls: list[Call] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)  # acknowledged (2xx)
    clusters: list[str] = field(default_factory=list)  # acknowledged, besides its own
    decisions: list[tuple[str, bool, float]] = field(default_factory=list)  # id, stored, when

    def _call(self, client: httpx.Client, method: str, path: str, **kw: Any) -> Call:
        started = time.monotonic()
        try:
            response = client.request(method, path, **kw)
        except httpx.TransportError as exc:
            call = Call(started, time.monotonic(), method, path, None, None, None, repr(exc))
        else:
            code = None
            if response.status_code >= 400:
                code = response.json().get("error", {}).get("code")
            call = Call(
                started,
                time.monotonic(),
                method,
                path,
                response.status_code,
                code,
                response.headers.get("retry-after"),
            )
            if response.is_success and path == "/v1/decide":
                self.decisions.append(
                    (response.json()["id"], response.json().get("stored"), started)
                )
        self.calls.append(call)
        return call

    def _until_acknowledged(self, client: httpx.Client, method: str, path: str, **kw: Any) -> bool:
        while not self.stop.is_set():
            call = self._call(client, method, path, **kw)
            if call.status is not None and 200 <= call.status < 300:
                return True
            if call.status != 503:
                return False  # the assertions report it
            self.stop.wait(0.1)
        return False

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            cluster = {"resources": ["cpu"]}
            if not self._until_acknowledged(
                client, "PUT", f"/v1/clusters/{self.name}", json=cluster
            ):
                return
            node = {"capacity": {"cpu": 10_000}}
            path = f"/v1/clusters/{self.name}/nodes/n1"
            if not self._until_acknowledged(client, "PUT", path, json=node):
                return
            for n in itertools.count():
                if self.stop.is_set():
                    return
                job = {"id": f"j{n}", "per_task": {"cpu": 1}, "walltime_s": 60}
                headers = {"Idempotency-Key": f"{self.name}-j{n}"}
                jobs = f"/v1/clusters/{self.name}/jobs"
                if self._until_acknowledged(client, "POST", jobs, json=job, headers=headers):
                    self.jobs.append(job["id"])
                    self._call(client, "GET", f"{jobs}/{job['id']}")
                if n % 3 == 0:
                    other = f"{self.name}-x{n}"
                    if self._until_acknowledged(
                        client, "PUT", f"/v1/clusters/{other}", json=cluster
                    ):
                        self.clusters.append(other)
                self._call(client, "GET", "/v1/clusters", params={"limit": 5})

    def decide(self) -> None:
        """The other role: ``/v1/decide`` calls (each with its own ``Idempotency-Key``)."""
        with httpx.Client(base_url=self.url, timeout=30) as client:
            for n in itertools.count():
                if self.stop.wait(0.02):
                    return
                decide = {
                    "now": 1000.0,
                    "nodes": [{"id": "n1", "capacity": {"cpu": 4}}],
                    "pending": [{"id": f"p{n}", "per_task": {"cpu": 1}, "walltime_s": 60}],
                    "policy": "fcfs",
                }
                headers = {"Idempotency-Key": f"{self.name}-d{n}"}
                self._call(client, "POST", "/v1/decide", json=decide, headers=headers)

    def acknowledged_since(self, moment: float) -> int:
        return sum(
            1
            for c in self.calls
            if c.started >= moment
            and c.method == "POST"
            and c.status in (200, 201)
            and "/jobs" in c.path
        )


def _app(own_pg: OwnPostgres) -> FastAPI:
    settings = Settings(
        DATABASE_URL=own_pg.url,
        DEFAULT_DEADLINE_MS=5_000,
        IDEMPOTENCY_PURGE_INTERVAL_S=0.5,  # the purge runs during the outage too
        DB_POOL_SIZE=4,
    )
    app = create_app(settings)

    @app.get("/test/tasks")
    async def tasks() -> list[str]:
        return sorted(t.get_name() for t in asyncio.all_tasks() if not t.done())

    return app


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.05)


def test_postgres_stopped_and_restarted_under_load(own_pg: OwnPostgres) -> None:
    if not own_pg.running():
        own_pg.start()
    stop = threading.Event()
    with serve_in_thread(_app(own_pg)) as url, httpx.Client(base_url=url, timeout=30) as ops:
        clients = [LoadClient(url, f"outage-{i}", stop) for i in range(CLIENTS)]
        decider = LoadClient(url, "outage-decide", stop)
        threads = [threading.Thread(target=c.run, name=c.name) for c in clients]
        threads.append(threading.Thread(target=decider.decide, name=decider.name))
        for t in threads:
            t.start()
        try:
            _wait_for(lambda: all(len(c.jobs) >= ACKS_PER_PHASE for c in clients), "load ran")
            assert ops.get("/readyz").status_code == 200

            stopping = time.monotonic()
            own_pg.stop()
            stopped = time.monotonic()
            while time.monotonic() < stopped + OUTAGE_S:
                time.sleep(0.2)
            ready_down = ops.get("/readyz")
            starting = time.monotonic()
            own_pg.start()
            started = time.monotonic()

            _wait_for(
                lambda: all(c.acknowledged_since(started) >= ACKS_PER_PHASE for c in clients),
                "every client's writes were acknowledged again",
            )
            ready_up = ops.get("/readyz")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=PHASE_TIMEOUT_S)
        assert not any(t.is_alive() for t in threads)

        calls = [call for c in [*clients, decider] for call in c.calls]
        # the server always answered, never with a 5xx other than 503 backend_unavailable
        assert [c for c in calls if c.status is None] == []
        assert {c.status for c in calls} <= {200, 201, 503}, {c.status for c in calls}
        unavailable = [c for c in calls if c.status == 503]
        assert unavailable, "the outage was not noticed"
        assert {c.code for c in unavailable} == {"backend_unavailable"}
        assert all(c.retry_after is not None and int(c.retry_after) >= 1 for c in unavailable)
        # 503 only for requests in flight between the stop's start and the database accepting
        # connections again
        assert [c for c in unavailable if c.ended < stopping or c.started >= started] == []
        # while it was down, every call that needs it answered 503; /v1/decide still decided
        during = [c for c in calls if c.started >= stopped and c.ended <= starting]
        assert during
        assert all(c.status == 503 for c in during if c.path != "/v1/decide")
        assert all(c.status == 200 for c in during if c.path == "/v1/decide")
        decided_during = [d for d in decider.decisions if stopped <= d[2] < starting]
        assert decided_during
        assert not any(stored for _, stored, _ in decided_during)

        assert ready_down.status_code == 503
        assert ready_down.json()["database"] == "down"
        assert ready_up.status_code == 200
        assert ready_up.json()["database"] == "ok"
        # the background tasks survived the outage
        live = set(ops.get("/test/tasks").json())
        assert set(BACKGROUND_TASKS) <= live, live

        # nothing acknowledged was lost
        for c in clients:
            listed = ops.get(f"/v1/clusters/{c.name}/jobs", params={"limit": 500}).json()
            assert set(c.jobs) <= {job["id"] for job in listed["items"]}
            for cluster in c.clusters:
                assert ops.get(f"/v1/clusters/{cluster}").status_code == 200
        for decision_id, stored, _ in decider.decisions:
            if stored:
                assert ops.get(f"/v1/decisions/{decision_id}").status_code == 200
        # the decision writer stores again
        assert any(stored for _, stored, when in decider.decisions if when >= started)


async def test_a_connection_killed_mid_transaction_is_discarded(own_pg: OwnPostgres) -> None:
    if not own_pg.running():
        own_pg.start()
    database = Database(make_engine(own_pg.url, pool_size=1, max_overflow=0))
    pid = -1

    async def killed_midway() -> None:
        nonlocal pid
        async with database.transaction(write=True) as session:
            pid = (await session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            await _terminate(own_pg.url, pid)
            await session.execute(text("SELECT 1"))

    try:
        with pytest.raises(DBAPIError) as killed:
            await killed_midway()
        assert backend_unavailable(killed.value)
        # the one pooled connection was replaced: the next transactions run on a new backend
        for _ in range(3):
            async with database.transaction(write=False) as session:
                now = (await session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            assert now != pid
        assert await database.ping()
    finally:
        await database.dispose()


async def _terminate(url: str, pid: int) -> None:
    """Kill backend ``pid`` from another connection, as a server restart or an operator would."""
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            alive = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")
            for _ in range(200):  # until it is gone (bounded)
                gone = (await conn.execute(alive, {"pid": pid})).scalar_one() == 0
                await conn.commit()  # the next look takes a new statistics snapshot
                if gone:
                    break
                await asyncio.sleep(0.05)
    finally:
        await engine.dispose()


async def test_the_start_waits_for_a_database_that_comes_up_late(own_pg: OwnPostgres) -> None:
    """The schema check at start is retried while the database refuses connections, for up to
    ``DB_STARTUP_WAIT_S``: a Kairos started before its database serves once it is up (as in
    a compose or Kubernetes start where both come up together); with a wait of 0 the start
    fails at the first refused connection, with the connection's own error."""
    if own_pg.running():
        own_pg.stop()
    try:
        quick = create_app(Settings(DATABASE_URL=own_pg.url, DB_STARTUP_WAIT_S=0.0))
        began = time.monotonic()
        with pytest.raises(ConnectionRefusedError):
            async with quick.router.lifespan_context(quick):
                pass
        assert time.monotonic() - began < 5.0

        app = create_app(Settings(DATABASE_URL=own_pg.url, DB_STARTUP_WAIT_S=60.0))
        loop = asyncio.get_running_loop()
        starter = loop.run_in_executor(None, lambda: (time.sleep(1.5), own_pg.start()))
        began = time.monotonic()
        async with app.router.lifespan_context(app):
            waited = time.monotonic() - began
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://kairos.test") as c:
                assert (await c.get("/readyz")).json()["database"] == "ok"
        await starter
        assert waited >= 1.0, "the start waited for the database"
    finally:
        if not own_pg.running():
            own_pg.start()


def test_only_an_unavailable_database_is_waited_for() -> None:
    """A statement the database refuses (not an outage) is raised at once, not retried."""
    from app.db.engine import while_unavailable

    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not a connection problem")

    with pytest.raises(ValueError, match="not a connection problem"):
        asyncio.run(while_unavailable(refused, 30.0))
    assert calls == 1

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise TimeoutError
        return "ok"

    calls = 0
    assert asyncio.run(while_unavailable(flaky, 30.0, first_delay_s=0.01)) == "ok"
    assert calls == 4
