"""``kairos serve`` as a subprocess on a free loopback port (end-to-end and browser tests)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def kairos_command() -> list[str]:
    script = Path(sys.executable).with_name("kairos")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kairos"]


@contextmanager
def kairos_serve(
    env: Mapping[str, str],
    log_path: Path,
    start_timeout_s: float = 60,
    args: Sequence[str] = (),
    cwd: Path = ROOT,
) -> Iterator[str]:
    """Run ``kairos serve`` with ``env`` (and ``args``, in ``cwd``) until the block ends; yields
    its base URL once ``/healthz`` answers. Fails the test with the server log if it exits or
    does not start."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*kairos_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=cwd,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if process.poll() is not None:
                pytest.fail(f"kairos serve exited {process.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"kairos serve did not start:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def serve_in_thread(app: object, start_timeout_s: float = 60) -> Iterator[str]:
    """Serve the ASGI ``app`` (lifespan included) with a real uvicorn server in a thread on a
    free loopback port until the block ends; yields its base URL once it accepts requests."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    exits: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as exc:  # SystemExit when the lifespan's start-up failed
            exits.append(exc)

    thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not server.started:
            if not thread.is_alive():
                pytest.fail(
                    f"the uvicorn server stopped before it started: {exits!r} (see its log)"
                )
            if time.monotonic() > deadline:
                pytest.fail("the uvicorn server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
