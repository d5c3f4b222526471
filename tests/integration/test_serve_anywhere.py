"""``kairos serve`` started from any directory decides with the shipped learned policy (issue 24,
item 1; ADR 0089): the models travel with the package, start-up names what it loaded, and a
default policy that names no loaded model is a loud warning and a degraded ``/readyz``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from tests.serving import kairos_serve

NOW = 1_700_000_000.0


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without any ``KAIROS_*`` setting, and a fresh SQLite file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.pop("PYTHONPATH", None)  # nothing may find the checkout but the installed package
    env["KAIROS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'kairos.db'}"
    env.update(extra)
    return env


def _empty_dir(tmp_path: Path) -> Path:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    return cwd


def _decide_body() -> dict[str, Any]:
    return {
        "now": NOW,
        "nodes": [{"id": "n1", "capacity": {"cpu": 8}}, {"id": "n2", "capacity": {"cpu": 8}}],
        "pending": [
            {
                "id": f"j{i}",
                "per_task": {"cpu": 1 + i % 4},
                "walltime_s": 60.0 * (1 + i % 5),
                "submit_time": NOW - 100 + i,
            }
            for i in range(6)
        ],
    }


def test_serve_from_an_empty_directory_decides_with_the_onnx_policy(tmp_path: Path) -> None:
    cwd = _empty_dir(tmp_path)
    log = tmp_path / "serve.log"
    with kairos_serve(_env(tmp_path), log, cwd=cwd) as url:
        answer = httpx.post(f"{url}/v1/decide", json=_decide_body(), timeout=30)
        ready = httpx.get(f"{url}/readyz", timeout=10)
    assert answer.status_code == 200, answer.text
    decision = answer.json()
    assert decision["policy"]["kind"] == "onnx"
    assert decision["policy"]["name"] == "hpc-kernel"
    assert decision["fallback"] == {"used": False, "reason": None}
    assert decision["allocations"]
    assert ready.status_code == 200
    assert (ready.json()["policies"], ready.json()["missing_policies"]) == ("ok", [])
    text = log.read_text()
    assert "policies loaded from" in text
    assert "hpc-kernel@3" in text
    assert "hpc-kernel-none@1" in text
    assert "DEFAULT POLICY MISSING" not in text
    assert list(cwd.iterdir()) == []  # nothing written where it was started


def test_a_missing_default_policy_is_a_warning_and_a_degraded_readyz(tmp_path: Path) -> None:
    """Without the package's models (``KAIROS_SHIPPED_MODELS=false``) and with an empty
    ``KAIROS_MODELS_DIR`` the defaults name nothing: start-up says so for each, and ``/readyz``
    lists them while decisions are still served (by the fallback)."""
    cwd = _empty_dir(tmp_path)
    log = tmp_path / "serve.log"
    env = _env(tmp_path, KAIROS_SHIPPED_MODELS="false", KAIROS_MODELS_DIR=str(tmp_path / "none"))
    with kairos_serve(env, log, cwd=cwd) as url:
        ready = httpx.get(f"{url}/readyz", timeout=10)
        answer = httpx.post(f"{url}/v1/decide", json=_decide_body(), timeout=30)
    assert ready.status_code == 200  # the fallback still decides
    body = ready.json()
    assert (body["status"], body["policies"]) == ("degraded", "degraded")
    assert body["missing_policies"] == [
        "KAIROS_DEFAULT_POLICY=hpc-kernel",
        "KAIROS_DEFAULT_POLICY_NO_BACKFILL=hpc-kernel-none",
    ]
    assert answer.json()["fallback"] == {"used": True, "reason": "model_missing"}
    text = log.read_text()
    assert "none (no models)" in text
    assert "DEFAULT POLICY MISSING: KAIROS_DEFAULT_POLICY=hpc-kernel" in text
    assert "DEFAULT POLICY MISSING: KAIROS_DEFAULT_POLICY_NO_BACKFILL=hpc-kernel-none" in text
