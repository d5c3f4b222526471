"""``kairos serve`` as a subprocess on the embedded default (a SQLite file): the README's curl
walkthrough runs as written, and after a restart the data is still there."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
README_PORT = "127.0.0.1:8000"


@dataclass
class CurlCall:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    data: str | None = None


def walkthrough_commands(readme: Path) -> list[CurlCall]:
    text = readme.read_text()
    section = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    calls = []
    for line in section.splitlines():
        if line.startswith("curl "):
            calls.append(parse_curl(line))
    return calls


def parse_curl(line: str) -> CurlCall:
    args = shlex.split(line)[1:]
    call = CurlCall(method="GET", url="")
    it = iter(args)
    for arg in it:
        if arg in ("-X", "--request"):
            call.method = next(it)
        elif arg in ("-H", "--header"):
            name, _, value = next(it).partition(":")
            call.headers[name.strip()] = value.strip()
        elif arg in ("-d", "--data", "--data-raw"):
            call.data = next(it)
            if call.method == "GET":
                call.method = "POST"
        elif arg in ("-s", "--silent", "-f", "--fail", "-S"):
            continue
        elif arg.startswith("-"):
            raise AssertionError(
                f"the walkthrough uses a curl option this test does not know: {arg}"
            )
        else:
            call.url = arg
    assert call.url, line
    return call


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kairos_command() -> list[str]:
    script = Path(sys.executable).with_name("kairos")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kairos"]


@contextmanager
def serve(db: Path, port: int, log: Path) -> Iterator[str]:
    # the embedded default: no KAIROS_DATABASE_URL, so ./kairos.db in the server's folder
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")},
        "KAIROS_PORT": str(port),
        "KAIROS_HOST": "127.0.0.1",
        "KAIROS_LOG_LEVEL": "warning",
        # the project's code, installed or not (the server runs in the database's folder)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*kairos_command(), "serve"], cwd=db.parent, env=env, stdout=out, stderr=out
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"kairos serve did not come up:\n{log.read_text()}"
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_readme_walkthrough_survives_restart(tmp_path: Path) -> None:
    calls = walkthrough_commands(ROOT / "README.md")
    assert len(calls) >= 6
    db, port, log = tmp_path / "kairos.db", free_port(), tmp_path / "serve.log"
    with serve(db, port, log) as base, httpx.Client(timeout=10) as http:
        answers = []
        for call in calls:
            assert README_PORT in call.url
            url = call.url.replace(README_PORT, base.removeprefix("http://"))
            r = http.request(call.method, url, headers=call.headers, content=call.data)
            assert r.status_code < 300, (call, r.status_code, r.text)
            answers.append(r.json())
        decision = next(a for a in answers if "allocations" in a)
        assert decision["allocations"], decision
        scheduled = {a["job_id"] for a in decision["allocations"]}
        assert (http.get(f"{base}/docs")).status_code == 200
    assert db.exists(), "the embedded default database is ./kairos.db"
    with serve(db, port, log) as base, httpx.Client(timeout=10) as http:
        cluster = http.get(f"{base}/v1/clusters/demo").json()
        assert cluster["running_jobs"] == len(scheduled)
        assert cluster["nodes"] == 3
        log_page = http.get(f"{base}/v1/clusters/demo/decisions").json()
        assert [d["id"] for d in log_page["items"]] == [decision["id"]]
        stored = http.get(f"{base}/v1/decisions/{decision['id']}").json()
        assert stored["allocations"] == decision["allocations"]
        for job_id in scheduled:
            job = http.get(f"{base}/v1/clusters/demo/jobs/{job_id}").json()
            assert job["state"] == "running"
            assert job["decision_id"] == decision["id"]
