"""``kairos migrate`` and the ``KAIROS_*`` settings the commands read (issue 2, deliverable 2)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main as app_main
from app.db.engine import make_engine
from app.db.migrate import current_revisions, head_revision
from app.settings import Settings, get_settings


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.startswith("KAIROS_"):
            monkeypatch.delenv(name)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_defaults(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.chdir(tmp_path)  # no .env file of the developer's
    s = Settings()
    assert (s.HOST, s.PORT) == ("127.0.0.1", 8000)
    assert s.DATABASE_URL == "sqlite:///./kairos.db"  # a SQLite file in the working folder
    assert (s.REDIS_URL, s.API_KEYS) == (None, None)
    assert s.api_key_tenants() == {}


def test_environment_is_read(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("KAIROS_HOST", "0.0.0.0")
    clean_env.setenv("KAIROS_PORT", "9123")
    clean_env.setenv("KAIROS_DATABASE_URL", "postgresql://u@db:5432/k")
    clean_env.setenv("KAIROS_REDIS_URL", "redis://r:6379/0")
    clean_env.setenv("KAIROS_LOG_LEVEL", "debug")
    clean_env.setenv("KAIROS_API_KEYS", "acme:key-a, globex:key-g")
    s = Settings()
    assert (s.HOST, s.PORT, s.LOG_LEVEL) == ("0.0.0.0", 9123, "debug")
    assert (s.DATABASE_URL, s.REDIS_URL) == ("postgresql://u@db:5432/k", "redis://r:6379/0")
    assert s.api_key_tenants() == {"key-a": "acme", "key-g": "globex"}


@pytest.mark.parametrize("keys", ["key-without-tenant", "acme:", ":key"])
def test_malformed_api_keys_are_refused(keys: str) -> None:
    with pytest.raises(ValueError, match="tenant:key"):
        Settings(API_KEYS=keys).api_key_tenants()


def test_migrate_command_brings_an_empty_database_to_head(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "fresh.db"
    clean_env.setenv("KAIROS_DATABASE_URL", f"sqlite:///{db}")
    assert app_main(["migrate"]) == 0
    assert app_main(["migrate"]) == 0  # again: nothing to do

    async def revisions() -> set[str]:
        engine = make_engine(f"sqlite:///{db}")
        try:
            return await current_revisions(engine)
        finally:
            await engine.dispose()

    assert asyncio.run(revisions()) == {head_revision()}
    assert app_main(["nope"]) == 2
