"""Keep the garbage collector's full passes off the request path (ADR 0053).

A started service holds a large, long-lived heap: the ONNX sessions' Python wrappers, SQLAlchemy's
and pydantic's compiled models, FastAPI's routes, the registry. CPython's oldest-generation
collection walks all of it, and the allocations of a few hundred decisions trigger one, stalling
every request in flight for as long as the walk takes.

:func:`freeze_startup_heap` runs once start-up is done: one collection, then :func:`gc.freeze`
moves every survivor to the permanent generation, which later collections skip. Garbage created
afterwards is collected as before. :func:`thaw` undoes it at shutdown, so a process that builds
and tears down many apps (the test suite) does not keep their heaps forever.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect once, then exempt every surviving object from later collections; returns how
    many objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("gc: %d start-up objects frozen out of later collections", frozen)
    return frozen


def thaw() -> None:
    """Return the frozen objects to the oldest generation (they are collectable again)."""
    gc.unfreeze()
