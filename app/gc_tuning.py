"""Keep the garbage collector's full passes off the request path (ADR 0053).

A started service holds a large, long-lived heap: the ONNX sessions' Python wrappers, SQLAlchemy's
and pydantic's compiled models, FastAPI's routes, the registry. CPython's oldest-generation
collection walks all of it, and the allocations of a few hundred decisions trigger one, stalling
every request in flight for as long as the walk takes.

:func:`freeze_startup_heap` runs once start-up is done: one collection, then :func:`gc.freeze`
moves every survivor to the permanent generation, which later collections skip. Garbage created
afterwards is collected as before. :func:`thaw` undoes it at shutdown, so a process that builds
and tears down many apps (the test suite) does not keep their heaps forever.

:func:`set_young_threshold` spaces the youngest generation's collections: CPython makes a full
pass after every tenth collection of the middle generation, itself after every tenth of the
youngest, so the youngest's threshold sets how many allocations lie between two full passes. A
round at real cluster sizes allocates hundreds of thousands of containers that all stay alive
until it ends; at CPython's default of 700 several full passes walk them (and every other live
object) within one round, and free nothing. Garbage in reference cycles waits longer for its
collection; everything else is freed by reference counting as before.
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


def set_young_threshold(threshold: int) -> tuple[int, int, int]:
    """Collect the youngest generation once allocations exceed deallocations by ``threshold``
    (the older generations' thresholds unchanged; 0 changes nothing); returns the thresholds
    before, for :func:`restore_thresholds`."""
    before: tuple[int, int, int] = gc.get_threshold()
    if threshold > 0:
        gc.set_threshold(threshold, before[1], before[2])
    return before


def restore_thresholds(thresholds: tuple[int, int, int]) -> None:
    """Put back what :func:`set_young_threshold` returned."""
    gc.set_threshold(*thresholds)
