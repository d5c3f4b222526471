"""No API key reaches the log of a real ``kairos serve``: not from a ``?key=`` address (refused),
not from the login form, not from an ``Authorization`` header, with one process or several."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import httpx
import pytest

from tests.serving import kairos_serve


@pytest.mark.parametrize(
    "workers",
    [pytest.param(1, id="one-process"), pytest.param(2, id="two-workers", marks=pytest.mark.slow)],
)
def test_no_secret_reaches_the_server_log(tmp_path: Path, workers: int):
    key = f"sk-{secrets.token_hex(16)}"
    env = {
        **os.environ,
        "KAIROS_DATABASE_URL": f"sqlite:///{tmp_path / 'kairos.db'}",
        "KAIROS_API_KEYS": f"acme:{key}",
        "KAIROS_LOG_LEVEL": "info",  # the access log is on
    }
    env.pop("KAIROS_REDIS_URL", None)
    log = tmp_path / "serve.log"
    with (
        kairos_serve(env, log, args=["--workers", str(workers)]) as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        refused = client.get(f"/ui/clusters/x?key={key}&refresh=5")
        assert refused.status_code == 400
        assert "Log in with the form" in refused.text
        assert client.get(f"/ui/login?next=/ui&api_key={key}").status_code == 400
        assert client.get(f"/v1/clusters?token={key}").status_code == 401

        form = client.post("/ui/login", data={"key": key, "next": "/ui/clusters/x"})
        assert form.status_code == 303
        assert key not in form.headers.get("set-cookie", "")
        page = client.get("/ui/clusters/x")  # the session cookie works: acme has no cluster x
        assert page.status_code == 404
        assert "acme" in page.text
        bearer = client.get("/v1/clusters", headers={"Authorization": f"Bearer {key}"})
        assert bearer.status_code == 200
        assert client.post("/ui/logout").status_code == 303
    text = log.read_text()
    assert key not in text
    # the access log was written, with the requests in it (redacted)
    assert re.search(r'"GET /ui/clusters/x\?key=\[redacted\]&refresh=5 HTTP/1\.1" 400', text), text
    assert '"POST /ui/login HTTP/1.1" 303' in text
