"""Processes for the pipeline tests: our own redis-server, a throwaway Postgres database,
``kairos serve`` and ``kairos worker`` subprocesses.  Everything is started per test and killed
by pid at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.fixtures import onnx_models as m

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: object, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():  # type: ignore[operator]
                return
        except Exception:  # not up yet
            pass
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes] | None = None
    #: more configuration directives, e.g. ``["--rename-command", "TIME", ""]``
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--loglevel",
                "warning",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis(port=self.port)
        wait_until(client.ping, 10, "redis-server")
        client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None


@dataclass
class Service:
    """``kairos serve`` plus any number of ``kairos worker`` subprocesses."""

    env: dict[str, str]
    port: int
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("wb") as log:  # the child keeps its own fd
            proc = subprocess.Popen(
                [sys.executable, "-m", "kairos", *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def start_api(self) -> None:
        self._spawn("api", ["serve", "--port", str(self.port)])
        wait_until(
            lambda: httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200,
            60,
            "kairos serve",
        )

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        return self._spawn(name, ["worker", "--name", name])

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(free_port())
    server.start()
    yield server
    server.kill()


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    m.write_model(root, "hpc-test", "1", m.kernel_model(seed=7))
    return root


@pytest.fixture
def service(
    tmp_path: Path, redis_server: RedisServer, pg_url: str, models_dir: Path
) -> Iterator[Service]:
    env = {
        **os.environ,
        "KAIROS_DATABASE_URL": pg_url,
        "KAIROS_REDIS_URL": redis_server.url,
        "KAIROS_MODELS_DIR": str(models_dir),
        "KAIROS_BATCH_MAX_SIZE": "32",
        "KAIROS_BATCH_MAX_WAIT_MS": "5",
        "KAIROS_REDIS_CLAIM_IDLE_MS": "400",
        "KAIROS_LOG_LEVEL": "info",
        "PYTHONUNBUFFERED": "1",
    }
    svc = Service(env=env, port=free_port(), log_dir=tmp_path)
    yield svc
    svc.stop()
