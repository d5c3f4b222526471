"""Fixtures for the pipeline tests (the process harness lives in ``harness.py``)."""

from tests.integration.batching.harness import (  # noqa: F401 - pytest fixtures
    models_dir,
    pg_url,
    redis_server,
    service,
)
