"""The service freezes its start-up heap out of the garbage collector's full passes (ADR 0068)
while it runs, and gives it back when it stops."""

from __future__ import annotations

import gc

import pytest

from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.startup_heap_freeze


async def test_the_started_service_runs_with_its_start_up_heap_frozen(sqlite_url: str) -> None:
    app = create_app(Settings(DATABASE_URL=sqlite_url))
    assert gc.get_freeze_count() == 0
    async with app.router.lifespan_context(app):
        # the loaded models, routes and compiled schemas are all frozen
        assert gc.get_freeze_count() > 10_000
        garbage: list[object] = []
        garbage.append(garbage)  # a cycle made after start-up is still collected
        del garbage
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


async def test_the_freeze_can_be_turned_off(sqlite_url: str) -> None:
    app = create_app(Settings(DATABASE_URL=sqlite_url, GC_FREEZE=False))
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() == 0


async def test_the_service_spaces_young_collections_while_it_runs(sqlite_url: str) -> None:
    before = gc.get_threshold()
    settings = Settings(DATABASE_URL=sqlite_url, GC_FREEZE=False, GC_GEN0_THRESHOLD=12_345)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == (12_345, before[1], before[2])
    assert gc.get_threshold() == before


async def test_a_zero_young_threshold_keeps_the_interpreters(sqlite_url: str) -> None:
    before = gc.get_threshold()
    app = create_app(Settings(DATABASE_URL=sqlite_url, GC_FREEZE=False, GC_GEN0_THRESHOLD=0))
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == before
    assert gc.get_threshold() == before
