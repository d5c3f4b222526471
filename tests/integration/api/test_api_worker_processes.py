"""``kairos serve`` with two worker processes (``KAIROS_WORKERS=2``, ADR 0080): a scrape of
``/metrics`` reaches one of them and must speak for both."""

from __future__ import annotations

import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.schemas.decision import DECIDE_EXAMPLE
from tests.serving import kairos_serve


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    # a fresh connection per scrape: any of the processes may answer it
    text = httpx.get(f"{url}/metrics", headers={"Connection": "close"}, timeout=10).text
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _decided(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    key = (
        "kairos_http_requests_total",
        (("method", "POST"), ("route", "/v1/decide"), ("status", "200")),
    )
    return samples.get(key, 0.0)


def _pids(metrics_dir: Path, kind: str) -> set[str]:
    """Processes with a ``kind`` file in the shared directory: ``counter`` for those that
    answered a request, ``gauge_livesum`` for those whose live gauges are in the sums."""
    return {
        m.group(1)
        for f in metrics_dir.glob(f"{kind}_*.db")
        if (m := re.fullmatch(rf"{kind}_(\d+)\.db", f.name))
    }


def _decide(url: str) -> int:
    # a new connection per call, so that the processes share them out
    return httpx.post(f"{url}/v1/decide", json=DECIDE_EXAMPLE, timeout=30).status_code


def test_metrics_of_either_worker_process_count_the_requests_of_both(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    (metrics_dir).mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"left by an earlier run")  # removed at start
    env = {
        **os.environ,
        "KAIROS_DATABASE_URL": f"sqlite:///{tmp_path / 'kairos.db'}",
        "KAIROS_WORKERS": "2",
        "KAIROS_METRICS_DIR": str(metrics_dir),
        "KAIROS_LOG_LEVEL": "warning",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with kairos_serve(env, tmp_path / "serve.log", start_timeout_s=120) as url:
        # once both are up, each adds its admission limit (16 by default) to the gauge's sum
        deadline = time.monotonic() + 60
        while _scrape(url).get(("kairos_admission_limit", ())) != 32.0:
            assert time.monotonic() < deadline, "the gauge never summed both processes"
            time.sleep(0.2)
        sent = 0
        with ThreadPoolExecutor(16) as pool:
            while len(_pids(metrics_dir, "counter")) < 2:
                assert sent < 1_000, "one process answered every request"
                statuses = list(pool.map(_decide, [url] * 16))
                assert statuses == [200] * 16
                sent += 16
        before_kill = _pids(metrics_dir, "gauge_livesum")
        assert len(before_kill) == 2
        for _ in range(8):  # whichever process answers, it counts every request
            samples = _scrape(url)
            assert _decided(samples) == sent
            decisions = sum(
                v for (name, _), v in samples.items() if name == "kairos_decisions_total"
            )
            assert decisions == sent
            assert samples[("kairos_decisions_in_flight", ())] == 0.0
        assert not (metrics_dir / "counter_1.db").exists()

        # a worker killed with SIGKILL cannot take its gauges out; uvicorn starts a replacement
        # under a new pid, and the scrape drops the dead one's: the sum is still two processes'
        victim = int(sorted(_pids(metrics_dir, "gauge_livesum"))[0])
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while not (_pids(metrics_dir, "gauge_livesum") - {str(victim)}) - before_kill:
            assert time.monotonic() < deadline, "uvicorn did not replace the killed worker"
            time.sleep(0.2)
        # the replacement's gauges exist from its start, at 0 until its lifespan sets them: wait
        # for its limit; the dead worker's 16 must never be in the sum (48)
        while (limit := _scrape(url)[("kairos_admission_limit", ())]) != 32.0:
            assert limit < 32.0, f"the killed worker's gauge is still summed ({limit})"
            assert time.monotonic() < deadline, "the replacement never set its gauges"
            time.sleep(0.2)
        for _ in range(8):
            samples = _scrape(url)
            assert samples[("kairos_admission_limit", ())] == 32.0
            assert _decided(samples) == sent  # the dead worker's counts stay
        assert str(victim) not in _pids(metrics_dir, "gauge_livesum")
    # at exit each process took its live gauges out of the sums
    assert not list(metrics_dir.glob("gauge_livesum_*.db"))
