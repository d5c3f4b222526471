"""The compose stack for real: images built (on a base from Debian's archive where the engine
cannot pull public images), PostgreSQL, Redis, the one-shot migration, the API and two workers
brought up, the README's walkthrough run against it, the decision checked in PostgreSQL and in
the Redis stream's consumer group, a worker killed and the next decision served by the other,
and the stack torn down with its volumes.

Needs a Docker engine and a compose CLI (``docker compose`` or ``docker-compose``). Run as root
on a machine with ``dockerd`` but no engine running, the engine is started for the test and
stopped after it. Base images: ``scripts/build-base-image.sh --auto`` (the debootstrap tarball is
cached under ``KAIROS_BASE_CACHE``; the images stay in the engine between runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_walkthrough import README_PORT, free_port, walkthrough_commands

ROOT = Path(__file__).resolve().parents[2]
API_WORKERS = 2
#: the stack's logs, written before it is torn down
LOGS = ROOT / "test-artifacts" / "compose-stack.log"
WORKERS = 2
#: the stack's logs, written before it is torn down
LOGS = ROOT / "test-artifacts" / "compose-stack.log"

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(2400)]


def _run(
    args: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False
    )


def _engine_answers(docker: str) -> bool:
    return _run([docker, "info"], timeout=30).returncode == 0


@pytest.fixture(scope="module")
def docker() -> Iterator[str]:
    """The docker CLI, with an engine answering it (started here when that is possible)."""
    cli = shutil.which("docker")
    if cli is None:
        pytest.skip("no docker CLI on this machine (Debian: apt-get install docker.io)")
    if _engine_answers(cli):
        yield cli
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        pytest.skip(
            "no Docker engine answers and none can be started here "
            "(needs root and dockerd: apt-get install docker.io; dockerd &)"
        )
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"kairos-e2e-dockerd-{os.getpid()}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([dockerd], stdout=out, stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _engine_answers(cli):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"dockerd did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield cli
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def compose_cli(docker: str) -> list[str]:
    if _run([docker, "compose", "version"], timeout=30).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is None:
        pytest.skip("no compose CLI (docker compose, or apt-get install docker-compose)")
    return [legacy]


@dataclass
class Stack:
    compose: list[str]
    docker: str
    env: dict[str, str]
    base: str

    def __call__(self, *args: str, timeout: float = 300) -> str:
        result = _run([*self.compose, *args], env=self.env, timeout=timeout)
        assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
        return result.stdout

    def redis(self, *args: str) -> str:
        return self("exec", "-T", "redis", "redis-cli", "--raw", *args, timeout=60)

    def sql(self, query: str) -> str:
        user, db = self.env["POSTGRES_USER"], self.env["POSTGRES_DB"]
        return self("exec", "-T", "postgres", "psql", "-U", user, "-d", db, "-tAc", query).strip()

    def containers(self, service: str) -> list[str]:
        return self("ps", "-q", service).split()


def _stream_group(stack: Stack) -> dict[str, str]:
    """XINFO GROUPS of the request stream: the workers' consumer group's fields."""
    lines = stack.redis("XINFO", "GROUPS", "kairos:requests").splitlines()
    fields = dict(zip(lines[::2], lines[1::2], strict=True))
    assert fields.get("name") == "kairos:workers", lines
    return fields


@pytest.fixture(scope="module")
def stack(
    docker: str, compose_cli: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("compose")
    env_file = tmp / ".env"
    shutil.copy(ROOT / ".env.example", env_file)
    base = _run(
        [str(ROOT / "scripts" / "build-base-image.sh"), "--auto", "--env-file", str(env_file)],
        timeout=1500,
    )
    assert base.returncode == 0, base.stderr[-3000:]
    values = dict(
        line.split("=", 1)
        for line in env_file.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    project = f"kairos-e2e-{uuid.uuid4().hex[:8]}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KAIROS_", "COMPOSE_"))},
        **values,
        "COMPOSE_PROJECT_NAME": project,
        "KAIROS_IMAGE": "kairos:e2e",
        "KAIROS_PORT": str(free_port()),
        "KAIROS_API_WORKERS": str(API_WORKERS),
        "KAIROS_WORKER_REPLICAS": str(WORKERS),
        "POSTGRES_PASSWORD": uuid.uuid4().hex,
    }
    compose = [*compose_cli, "--env-file", str(env_file), "-f", str(ROOT / "docker-compose.yml")]
    s = Stack(compose, docker, env, values["KAIROS_BASE_IMAGE"])
    try:
        s("build", "migrate", timeout=1500)
        s("up", "-d", "--no-build", "--scale", f"worker={WORKERS}", timeout=600)
        yield s
    finally:
        # every container's log, for a failure's post-mortem
        LOGS.parent.mkdir(exist_ok=True)
        LOGS.write_text(_run([*compose, "logs", "--no-color"], env=env).stdout)
        _run([*compose, "down", "-v", "--remove-orphans", "--timeout", "10"], env=env, timeout=300)
        # the untagged images earlier builds of kairos:e2e left behind
        _run([docker, "image", "prune", "-f", "--filter", "label=io.kairos.image=service"])


def _wait_until_served_through_the_stream(stack: Stack, base: str) -> None:
    """/readyz is 200 and every API process has seen the workers' heartbeats (from then on its
    decisions go through the Redis stream)."""
    deadline = time.monotonic() + 180
    while True:
        ready = False
        with contextlib.suppress(httpx.TransportError):
            ready = httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        logs = _run([*stack.compose, "logs", "--no-color", "api"], env=stack.env).stdout
        seen = logs.count("decisions go through the stream")
        if ready and seen >= API_WORKERS:
            return
        assert time.monotonic() < deadline, f"the API never used the workers:\n{logs[-3000:]}"
        time.sleep(1)


def test_the_stack_serves_the_walkthrough_from_postgres_redis_and_workers(stack: Stack) -> None:
    assert stack.containers("migrate"), "the migration container ran"
    # the one-shot migration finished before the API started (depends_on ... completed)
    migrated = stack.sql("select count(*) from alembic_version")
    assert migrated == "1", migrated
    workers = stack.containers("worker")
    assert len(workers) == WORKERS
    host = f"127.0.0.1:{stack.env['KAIROS_PORT']}"
    base = f"http://{host}"
    _wait_until_served_through_the_stream(stack, base)
    read_before = int(_stream_group(stack)["entries-read"] or 0)

    calls = walkthrough_commands(ROOT / "README.md")
    answers = []
    with httpx.Client(timeout=30) as http:
        for call in calls:
            url = call.url.replace(README_PORT, host)
            r = http.request(call.method, url, headers=call.headers, content=call.data)
            assert r.status_code < 300, (call, r.status_code, r.text)
            answers.append(r.json())
    decision = next(a for a in answers if "allocations" in a)
    assert decision["allocations"], decision
    # the shipped learned policy decided, not the fallback
    assert decision["policy"]["kind"] == "onnx", decision["policy"]
    assert decision["policy"]["name"] == "hpc-kernel"
    assert decision["fallback"] == {"used": False, "reason": None}

    # stored in PostgreSQL, as answered
    row = stack.sql(
        "select policy_name, policy_kind, fallback_used from decisions "
        f"where id = '{decision['id']}'"
    )
    assert row == "hpc-kernel|onnx|f", row
    started = stack.sql("select count(*) from jobs where state = 'running'")
    assert int(started) == len(decision["allocations"])

    # decided by a worker through the stream: the group read the request, nothing is left over
    group = _stream_group(stack)
    assert int(group["entries-read"]) == read_before + 1, group
    assert group["pending"] == "0", group
    consumers = stack.redis("XINFO", "CONSUMERS", "kairos:requests", "kairos:workers").splitlines()
    names = [consumers[i + 1] for i, v in enumerate(consumers) if v == "name"]
    hostnames = {_hostname(stack, c) for c in workers}
    assert names, consumers
    assert all(name.rsplit("-", 1)[0] in hostnames for name in names), (names, hostnames)

    # a worker dies: the other one serves the next decision
    killed = workers[0]
    assert _run([stack.docker, "kill", killed]).returncode == 0
    with httpx.Client(timeout=30) as http:
        job = {"id": "after-kill", "per_task": {"cpu": 1}, "walltime_s": 60}
        assert http.post(f"{base}/v1/clusters/demo/jobs", json=job).status_code == 201
        r = http.post(f"{base}/v1/clusters/demo/schedule", json={})
        assert r.status_code == 200, r.text
        second = r.json()
    assert second["policy"]["kind"] == "onnx", second
    assert second["fallback"]["used"] is False, second
    assert "after-kill" in {a["job_id"] for a in second["allocations"]}
    assert int(_stream_group(stack)["entries-read"]) == read_before + 2
    assert stack.sql("select count(*) from decisions") == "2"


def _hostname(stack: Stack, container: str) -> str:
    out = _run([stack.docker, "inspect", "-f", "{{.Config.Hostname}}", container])
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_api_image_ran_on_the_chosen_base(stack: Stack) -> None:
    """The kairos image was built FROM the base the script chose (public or local)."""
    out = _run([stack.docker, "image", "inspect", "kairos:e2e", "--format", "{{json .RootFS}}"])
    assert out.returncode == 0, out.stderr
    base = _run([stack.docker, "image", "inspect", stack.base, "--format", "{{json .RootFS}}"])
    assert base.returncode == 0, base.stderr
    layers = json.loads(out.stdout)["Layers"]
    base_layers = json.loads(base.stdout)["Layers"]
    assert layers[: len(base_layers)] == base_layers


def test_the_models_directory_is_shared_and_writable(stack: Stack) -> None:
    """An upload written by the API is on the volume every live worker reads (KAIROS_MODELS_DIR)."""
    probe = "import os, pathlib; p = pathlib.Path(os.environ['KAIROS_MODELS_DIR'], '.probe')"
    stack("exec", "-T", "api", "python", "-c", f"{probe}; p.write_text('x')", timeout=60)
    live = [
        c
        for c in stack.containers("worker")
        if _run([stack.docker, "inspect", "-f", "{{.State.Running}}", c]).stdout.strip() == "true"
    ]
    assert live
    for container in live:
        seen = _run(
            [stack.docker, "exec", container, "python", "-c", f"{probe}; print(p.read_text())"]
        )
        assert (seen.returncode, seen.stdout.strip()) == (0, "x"), seen.stderr
