"""Contract: the OpenAPI document against the running server (issue 23).

``kairos serve`` runs on a fresh SQLite file with an API key, and schemathesis runs every phase
(examples, coverage, fuzzing, stateful) and every check against its ``/openapi.json``, seeded and
bounded by a number of examples (``tests/contract/schemathesis.toml`` says which checks are
left out where, and why). Any 5xx, any answer the document does not describe, any request the
document calls invalid that the server accepts, fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.factories import job_spec, nodes_body
from tests.serving import kairos_serve

CONFIG = Path(__file__).with_name("schemathesis.toml")
KEY = "st-key"
#: the ids of the document's examples (app/api/v1/params.py), which the examples and coverage
#: phases send: created first, so that those requests reach the service's checks, not a 404
SEED_CLUSTER = "gpu-east"
SEED_JOB = "train-42"

#: a guard against a hung run, above the run's length on a loaded 2-core host (not a speed check)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _st() -> list[str]:
    script = Path(sys.executable).with_name("st")
    return [str(script)] if script.exists() else [sys.executable, "-m", "schemathesis.cli"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    models = tmp_path / "models"  # uploads land here; the shipped models come with the package
    models.mkdir()
    env = {
        **os.environ,
        "KAIROS_DATABASE_URL": f"sqlite:///{tmp_path / 'kairos.db'}",
        "KAIROS_API_KEYS": f"tenant-st:{KEY}",
        "KAIROS_MODELS_DIR": str(models),
        "KAIROS_LOG_LEVEL": "warning",
    }
    env.pop("KAIROS_REDIS_URL", None)
    with kairos_serve(env, tmp_path / "serve.log") as url:
        yield url


def _seed(url: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        cluster = {"resources": ["cpu", "memory_gb", "gpu"], "policy": "f1"}
        assert c.put(f"/v1/clusters/{SEED_CLUSTER}", json=cluster).status_code == 201
        nodes = c.put(f"/v1/clusters/{SEED_CLUSTER}/nodes", json=nodes_body(4, gpu=8))
        assert nodes.status_code == 200, nodes.text
        job = c.post(f"/v1/clusters/{SEED_CLUSTER}/jobs", json=job_spec(SEED_JOB))
        assert job.status_code == 201, job.text


def test_the_server_keeps_to_its_openapi_document(server: str, tmp_path: Path) -> None:
    _seed(server)
    command = [
        *_st(),
        "--config-file",
        str(CONFIG),
        "run",
        f"{server}/openapi.json",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    env = {**os.environ, "KAIROS_SCHEMATHESIS_KEY": KEY}
    # cwd: schemathesis writes nothing into the checkout
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert run.returncode == 0, f"{run.stdout[-20_000:]}\n{run.stderr[-5_000:]}\n{log[-5_000:]}"
    assert "Traceback" not in log, log[-10_000:]
