"""Fixtures for the pipeline tests (the process harness lives in ``harness.py``); ``pg_url`` is
the session's migrated throwaway Postgres database from ``tests/conftest.py``."""

from tests.integration.batching.harness import (  # noqa: F401 - pytest fixtures
    models_dir,
    redis_server,
    service,
)
