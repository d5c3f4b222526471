"""Smoke test: the parts of benchmarks/decide.py that run in the benchmark's own process (the
figures themselves come from ``python -m benchmarks.decide``)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks import decide as bench


def test_the_work_floor_is_measured_on_the_benchmark_snapshots(tmp_path: Path) -> None:
    models, policy = bench.model_dir(tmp_path)
    for name in (policy, "f1"):
        cost = bench.decision_cost_ms(models, name, rounds=1)
        assert math.isfinite(cost)
        assert cost > 0.0


def test_the_snapshot_is_the_one_the_issue_names() -> None:
    body = bench.snapshot("f1")
    assert len(body["nodes"]) == 16
    assert len(body["pending"]) == 64


def test_cores_are_read_per_process_from_proc() -> None:
    own = bench._cpu_seconds(os.getpid())
    if own is None:
        pytest.skip("no /proc on this system")
    assert own > 0.0
    assert bench._cores([1.0], [2.0], 2.0) == "0.50"
    assert bench._cores([1.0, 0.0, None], [2.0, 0.5, None], 2.0) == "0.50 / 0.25+?"


def test_cpu_per_request_sums_every_server_process() -> None:
    assert bench._cpu_ms_per_request([1.0, 2.0], [1.5, 2.25], 250) == pytest.approx(3.0)
    assert bench._cpu_ms_per_request([1.0, None], [1.5, 2.0], 250) is None
    assert bench._cpu_ms_per_request([1.0], [1.5], 0) is None


def test_cpu_per_request_is_compared_with_the_ceiling() -> None:
    def cell(cpu_ms: float | None) -> bench.Result:
        return bench.Result(rps=1.0, p50_ms=1.0, p99_ms=1.0, fallback=0.0, errors=0, cpu_ms=cpu_ms)

    results = {
        ("ceiling", 1): cell(0.4),
        ("ceiling", 8): cell(0.5),
        ("ceiling", 32): cell(0.6),
        ("embedded", 1): cell(4.0),
        ("embedded", 8): cell(2.5),
        ("embedded", 32): cell(None),
    }
    lines = bench.cpu_lines(results)
    assert lines[0].split()[:2] == ["ceiling", "0.50"]
    # the medians: 3.25 ms against 0.50 ms
    assert lines[1].split()[:2] == ["embedded", "3.25"]
    assert "(6.5 x ceiling)" in lines[1]
    assert bench.cpu_lines({("embedded", 1): cell(1.0)}) == []


def test_cores_count_child_processes() -> None:
    """A server that serves from child processes (uvicorn workers) is measured whole."""
    if bench._cpu_seconds(os.getpid()) is None:
        pytest.skip("no /proc on this system")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\n"
            "time.sleep(30)",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            own = bench._own_cpu_seconds(os.getpid()) or 0.0
            tree = bench._cpu_seconds(os.getpid()) or 0.0
            if tree - own >= 0.3:
                break
            time.sleep(0.05)
        assert tree - own >= 0.3
    finally:
        child.kill()
        child.wait()


def test_refused_requests_are_a_share_and_stay_out_of_the_latencies() -> None:
    r = bench.Result.of([0.010, 0.020, 0.030], elapsed=1.0, fallbacks=0, errors=0, refused=1)
    assert r.rps == 3.0
    assert r.answered == 3
    assert r.refused == 0.25
    assert r.p99_ms < 30.0 + 1e-9


def test_the_targets_are_judged_from_the_measured_cells() -> None:
    def cell(rps: float, p99: float = 10.0, fallback: float = 0.0) -> bench.Result:
        return bench.Result(rps=rps, p50_ms=1.0, p99_ms=p99, fallback=fallback, errors=0)

    results = {
        ("ceiling", 8): cell(1000.0),
        ("ceiling", 32): cell(1000.0, p99=40.0),
        ("embedded", 8): cell(850.0),
        ("embedded", 32): cell(300.0, p99=30.0),
        ("redis-1w", 8): cell(200.0),
        ("redis-2w", 8): cell(250.0),
        # overload: 1 worker answers more, but mostly with the fallback
        ("redis-1w", 32): cell(300.0, fallback=0.9),
        ("redis-2w", 32): cell(290.0, fallback=0.5),
    }
    lines = bench.verdicts(results)
    assert lines[0].startswith("met: embedded >= 0.8 x ceiling (best 0.85")
    assert lines[1].startswith("NOT met: embedded p99 < 25 ms at 32 clients (30.0 ms")
    assert "40.0 ms" in lines[1]
    # 1 worker served the most req/s (mostly fallbacks), 2 workers the most model answers
    assert lines[2] == (
        "NOT met: redis-2w > redis-1w, peak throughput 290 vs 300 req/s, 250 vs 200 model/s "
        "(more req/s at 1 of 2 client counts, more model/s at 2 of 2)"
    )
    assert results[("redis-2w", 32)].model_rps == 145.0
    results[("redis-1w-dl", 8)] = cell(200.0)
    results[("redis-2w-dl", 8)] = cell(150.0)
    results[("redis-1w-dl", 32)] = cell(250.0)
    results[("redis-2w-dl", 32)] = cell(260.0)
    assert bench.verdicts(results)[3] == (
        "met: redis-2w-dl > redis-1w-dl, peak throughput 260 vs 250 req/s, 260 vs 250 model/s "
        "(more req/s at 1 of 2 client counts, more model/s at 1 of 2)"
    )
    assert bench.verdicts({("ceiling", 1): cell(1.0)}) == []
    results[("no-decision", 8)] = cell(250.0)
    results[("no-decision", 32)] = cell(300.0)
    assert bench.verdicts(results)[0] == (
        "met: embedded >= 0.8 x ceiling (best 0.85 over 8,32 clients; with no decision at all: "
        "0.30)"
    )


def test_the_no_decision_cell_serves_and_stores_empty_decisions(tmp_path: Path) -> None:
    """The whole service, with every decision replaced by an empty one: answered and stored as
    a real one would be, and nothing decided."""
    models, policy = bench.model_dir(tmp_path)
    server = bench.start(bench.NO_DECISION, tmp_path, models, None, 0)
    try:
        body = bench.snapshot(policy)
        answer = httpx.post(f"{server.url}/v1/decide", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        decision = answer.json()
        assert decision["allocations"] == []
        assert decision["reservations"] == []
        assert decision["queue_length"] == len(body["pending"])
        assert decision["fallback"]["used"] is False
        stored = httpx.get(f"{server.url}/v1/decisions/{decision['id']}", timeout=30)
        assert stored.status_code == 200, stored.text
        assert len(stored.json()["input"]["pending"]) == len(body["pending"])
    finally:
        server.stop()


def test_admit_names_limit_cells() -> None:
    assert bench.admission_configs("16, 64") == [
        ("admit-16", None, 0, {"KAIROS_MAX_DECISIONS_IN_FLIGHT": "16"}),
        ("admit-64", None, 0, {"KAIROS_MAX_DECISIONS_IN_FLIGHT": "64"}),
    ]
    assert bench.admission_configs("") == []
    with pytest.raises(SystemExit, match="'deadline' is not a positive integer"):
        bench.admission_configs("deadline")


class _ScriptedServer:
    """A minimal keep-alive HTTP/1.1 server answering requests from a script, in turn: what the
    closed-loop load generator sees from a server, without one (its bodies are checked)."""

    def __init__(self, script: list[tuple[int, dict[str, str], bytes]]) -> None:
        self.script = script
        self.served = 0
        self.connections = 0
        self.bodies: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.bodies.append(await reader.readexactly(length))
                status, headers, body = self.script[self.served % len(self.script)]
                self.served += 1
                extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
                    + body
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def test_closed_loop_clients_keep_one_connection_each_and_count_every_answer() -> None:
    fallback = json.dumps({"fallback": {"used": True}}).encode()
    learned = json.dumps({"fallback": {"used": False}}).encode()
    script = [
        (200, {}, learned),
        (200, {}, fallback),
        (429, {"Retry-After": "0"}, b"{}"),
        (500, {}, b"{}"),
    ]
    server = _ScriptedServer(script)

    async def run() -> bench.Result:
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            return await bench.load(f"http://127.0.0.1:{port}", 3, 0.3, "f1")
        finally:
            listener.close()

    result = asyncio.run(run())
    assert server.connections == 3  # one keep-alive connection per client, opened once
    # every answer after the three warm-up requests is counted, by what the script sent
    sent = [server.script[i % len(server.script)] for i in range(3, server.served)]
    assert len(sent) >= 8  # the script went round at least twice
    assert result.refused_count == sum(1 for status, _, _ in sent if status == 429)
    assert result.answered == len(sent) - result.refused_count
    assert result.errors == sum(1 for status, _, _ in sent if status == 500)
    assert result.fallback_count == sum(1 for _, _, answer in sent if answer == fallback)
    assert result.fallback == result.fallback_count / result.answered
    for body in server.bodies:  # each request is the benchmark's snapshot, whole
        parsed = json.loads(body)
        assert len(parsed["pending"]) == 64
        assert len(parsed["nodes"]) == 16


def test_the_answer_reader_takes_retry_after_and_the_fallback_flag() -> None:
    answer = bench._Answer(429, 2.5, b'{"fallback": {"used": true}}')
    assert answer.fallback_used
    assert not bench._Answer(200, 1.0, b'{"fallback": {"used": false}}').fallback_used
    assert bench._host_port("http://127.0.0.1:8123") == ("127.0.0.1", 8123)


def test_the_cells_of_a_run() -> None:
    def names(*argv: str) -> list[str]:
        parser_args = bench.build_parser().parse_args(list(argv))
        return [name for name, *_ in bench.server_configs(parser_args)]

    assert names() == ["ceiling", "no-decision", "embedded", "redis-1w", "redis-2w"]
    assert names("--skip-redis", "--admit", "16") == [
        "ceiling",
        "no-decision",
        "embedded",
        "admit-16",
    ]


def test_the_redis_cells_api_can_run_in_several_processes() -> None:
    parsed = bench.build_parser().parse_args(["--redis-api-processes", "2"])
    configs = {name: env for name, _, _, env in bench.server_configs(parsed)}
    for name in ("redis-1w", "redis-2w"):
        assert configs[name]["KAIROS_WORKERS"] == "2"
    for name in ("embedded", "no-decision"):
        assert "KAIROS_WORKERS" not in configs[name]
