"""Headless Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright for Python, against a
``kairos serve`` subprocess on a free port (embedded SQLite, so no other backend is needed).

Playwright's own browser download is never used (no ``playwright install``): the system
Chromium is launched with a fresh profile directory per test. ``make browser-deps`` installs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.serving import kairos_serve

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path(os.environ.get("KAIROS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass(frozen=True)
class Server:
    url: str
    log: Path


def _serve(workdir: Path, extra_env: dict[str, str]) -> Iterator[Server]:
    log_path = workdir / "serve.log"
    env = {
        **os.environ,
        "KAIROS_DATABASE_URL": f"sqlite:///{workdir / 'kairos.db'}",
        "KAIROS_LOG_LEVEL": "info",  # the access log too: tests read it for leaked keys
        # a deadline no decision misses however busy the host (a missed one decides with the
        # fallback alone, without the shadow policy the dashboard tests look for)
        "KAIROS_DEFAULT_DEADLINE_MS": "600000",
        **extra_env,
    }
    for name in ("KAIROS_REDIS_URL", "KAIROS_API_KEYS"):
        if name not in extra_env:
            env.pop(name, None)
    with kairos_serve(env, log_path) as url:
        yield Server(url=url, log=log_path)


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny evaluation report: one SVG plot the dashboard should show."""
    root = tmp_path_factory.mktemp("results")
    (root / "bounded_slowdown.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="320" height="160">'
        '<rect x="20" y="60" width="60" height="90" fill="#3456d1"/>'
        '<rect x="120" y="30" width="60" height="120" fill="#d68a00"/>'
        '<rect x="220" y="90" width="60" height="60" fill="#1f9d55"/>'
        '<text x="20" y="20">bounded slowdown by policy</text></svg>'
    )
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, report_dir: Path) -> Iterator[Server]:
    """Auth off (the embedded default)."""
    yield from _serve(tmp_path_factory.mktemp("serve"), {"KAIROS_REPORTS_DIR": str(report_dir)})


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(tmp_path_factory.mktemp("serve-keys"), {"KAIROS_API_KEYS": "acme:sk-acme-ui"})


@pytest.fixture(scope="module")
def playwright_api():
    """Module-scoped: Playwright's sync API keeps an event loop running in this thread while it
    is open, so it must be closed before any asyncio test in another module starts."""
    missing = None
    try:
        from playwright import sync_api
    except ImportError:
        missing = "playwright is not installed (it is in the dev extra)"
    if not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (make browser-deps installs Debian's chromium)"
    if missing:
        # `make test` installs both, so in CI a missing browser is a failure, not a skip.
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    with sync_api.sync_playwright() as p:
        yield p


@pytest.fixture
def page(playwright_api, tmp_path: Path):
    """A page in a fresh Chromium profile; every request it makes is recorded."""
    context = playwright_api.chromium.launch_persistent_context(
        str(tmp_path / "profile"),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 1000},
    )
    try:
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(20_000)
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.requested = requested  # type: ignore[attr-defined]
        yield page
    finally:
        context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
