"""MicroBatcher: batches by size and by time, handles off the loop, isolates failures."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from app.batching.batcher import (
    BatchControl,
    BatcherClosedError,
    BatchTimeoutError,
    LoopHandover,
    MicroBatcher,
)


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[int] = set()

    def __call__(self, items: Sequence[int], _control: BatchControl[int]) -> list[int]:
        self.threads.add(threading.get_ident())
        self.batches.append(list(items))
        if any(i < 0 for i in items):
            raise ValueError("negative")
        return [i * 10 for i in items]


async def test_concurrent_submits_share_batches_and_run_off_the_loop() -> None:
    recorder = Recorder()
    seen: list[int] = []
    batcher: MicroBatcher[int, int] = MicroBatcher(
        recorder, max_batch=8, max_wait_ms=20, on_batch=lambda size, _s: seen.append(size)
    )
    batcher.start()
    try:
        results = await asyncio.gather(*(batcher.submit(i) for i in range(20)))
    finally:
        await batcher.stop()
    assert results == [i * 10 for i in range(20)]
    assert max(len(b) for b in recorder.batches) == 8
    assert len(recorder.batches) == 3  # 8 + 8 + 4
    assert sorted(x for b in recorder.batches for x in b) == list(range(20))
    assert seen == [len(b) for b in recorder.batches]
    assert threading.get_ident() not in recorder.threads


async def test_a_lone_request_waits_at_most_max_wait() -> None:
    recorder = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(recorder, max_batch=64, max_wait_ms=30)
    batcher.start()
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        assert await batcher.submit(1) == 10
        elapsed = loop.time() - started
    finally:
        await batcher.stop()
    assert 0.025 <= elapsed < 0.5
    assert recorder.batches == [[1]]


async def test_a_failing_batch_fails_its_waiters_only_and_the_batcher_goes_on() -> None:
    recorder = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(recorder, max_batch=2, max_wait_ms=50)
    batcher.start()
    try:
        bad = await asyncio.gather(batcher.submit(-1), batcher.submit(2), return_exceptions=True)
        assert all(isinstance(r, ValueError) for r in bad)
        assert await batcher.submit(3) == 30
    finally:
        await batcher.stop()
    with pytest.raises(BatcherClosedError):
        await batcher.submit(4)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        MicroBatcher(Recorder(), max_batch=0, max_wait_ms=1)
    with pytest.raises(ValueError, match="max_wait_ms"):
        MicroBatcher(Recorder(), max_batch=1, max_wait_ms=-1)


async def test_adaptive_wait_spares_a_lone_caller_and_waits_under_load() -> None:
    recorder = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        recorder, max_batch=64, max_wait_ms=200, adaptive_wait=True
    )
    batcher.start()
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        assert await batcher.submit(1) == 10
        assert await batcher.submit(2) == 20
        lone = loop.time() - started
        # concurrent callers: the first batch takes what is queued, and from then on (the last
        # batch held several) a batch waits for late-comers
        first = await asyncio.gather(*(batcher.submit(i) for i in range(3, 6)))
        assert first == [30, 40, 50]

        async def late(i: int, delay: float) -> int:
            await asyncio.sleep(delay)
            return await batcher.submit(i)

        late_results = await asyncio.gather(late(6, 0.0), late(7, 0.05))
        assert list(late_results) == [60, 70]
    finally:
        await batcher.stop()
    assert lone < 0.15  # two lone requests, far less than one max_wait each
    assert recorder.batches[:3] == [[1], [2], [3, 4, 5]]
    assert recorder.batches[3] == [6, 7]  # the batch waited for the late-comer


@pytest.mark.parametrize("own_executor", [False, True], ids=["default", "own-executor"])
async def test_a_handler_answers_each_item_as_it_goes_and_sees_who_gave_up(
    own_executor: bool,
) -> None:
    """ADR 0071: ``deliver`` answers an item before its batch ends; ``wanted`` turns false for
    a caller that stopped waiting. With an executor of its own the batcher gets the handler's
    return value through the same hand-over as the early answers."""
    release_last = threading.Event()
    first_delivered = threading.Event()
    seen_wanted: list[bool] = []

    def handler(items: Sequence[int], control: BatchControl[int]) -> list[int]:
        control.deliver(0, items[0] * 10)
        first_delivered.set()
        release_last.wait(5)  # the loop runs on while this thread holds the batch
        seen_wanted.extend(control.wanted(i) for i in range(len(items)))
        return [-1, items[1] * 10, items[2] * 10]  # item 0's entry is ignored: delivered

    executor = ThreadPoolExecutor(1) if own_executor else None
    batcher: MicroBatcher[int, int] = MicroBatcher(
        handler, max_batch=3, max_wait_ms=200, executor=executor
    )
    batcher.start()
    try:
        first = asyncio.ensure_future(batcher.submit(1))
        second = asyncio.ensure_future(batcher.submit(2))
        third = asyncio.ensure_future(batcher.submit(3))
        assert await asyncio.wait_for(first, 5) == 10  # while the batch is still running
        assert not second.done()
        second.cancel()  # this caller gives up
        await asyncio.sleep(0.01)
        release_last.set()
        assert await asyncio.wait_for(third, 5) == 30
    finally:
        release_last.set()
        await batcher.stop()
        if executor is not None:
            executor.shutdown()
    assert first_delivered.is_set()
    assert seen_wanted == [False, False, True]  # answered, gave up, still waiting


async def test_the_return_value_comes_back_with_the_last_early_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``LoopHandover.run_in``: results put by the function reach ``on_loop`` before its return
    value reaches the caller, and when both are ready before the loop runs they cost one
    wake-up, not one for the results and one for the return value."""
    loop = asyncio.get_running_loop()
    wakeups: list[object] = []
    real = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        wakeups.append(callback)
        return real(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    seen: list[tuple[int, str]] = []
    order: list[str] = []

    def on_loop(ready: list[tuple[int, str]]) -> None:
        order.append("results")
        seen.extend(ready)

    handover: LoopHandover[str] = LoopHandover(loop, on_loop)

    def work() -> str:
        handover.put(0, "a")
        handover.put(1, "b")
        return "done"

    with ThreadPoolExecutor(1) as executor:
        task = asyncio.ensure_future(handover.run_in(executor, work))
        await asyncio.sleep(0)  # the task submits ``work``
        # block the loop until ``work`` has returned (the executor runs items in order)
        executor.submit(lambda: None).result(5)
        assert await task == "done"
        order.append("returned")
    assert seen == [(0, "a"), (1, "b")]
    assert order == ["results", "returned"]
    assert len(wakeups) == 1


async def test_a_handover_run_passes_errors_context_and_cancellation() -> None:
    loop = asyncio.get_running_loop()
    handover: LoopHandover[int] = LoopHandover(loop, lambda ready: None)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller's")

    def boom() -> int:
        raise ValueError(var.get())

    with ThreadPoolExecutor(1) as executor:
        with pytest.raises(ValueError, match="caller's"):
            await handover.run_in(executor, boom)
        # a work item cancelled before it runs (its executor shut down) ends the wait
        release = threading.Event()
        executor.submit(release.wait, 5)  # the only thread is busy
        waiting = asyncio.ensure_future(handover.run_in(executor, lambda: 1))
        await asyncio.sleep(0)
        executor.shutdown(wait=False, cancel_futures=True)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, 5)


async def test_stop_returns_even_if_a_collector_loses_its_cancellation() -> None:
    """Python 3.11's ``wait_for`` returns the item instead of raising when a cancel lands as
    the item arrives: the collector must then stop on the batcher's own flag."""
    batcher: MicroBatcher[int, int] = MicroBatcher(Recorder(), max_batch=4, max_wait_ms=5)
    lost = False
    collect = batcher._collect

    async def losing(queue: Any) -> list[Any]:
        nonlocal lost
        if lost:
            return await collect(queue)
        try:
            return await collect(queue)
        except asyncio.CancelledError:
            lost = True
            return []  # the cancellation is gone, as in the race

    batcher._collect = losing  # type: ignore[method-assign]
    batcher.start()
    await asyncio.sleep(0.01)  # the collector waits for a first item
    (collector,) = batcher._tasks
    batcher._closed = True  # what stop() does, then it cancels and awaits the collectors
    collector.cancel()
    done, _ = await asyncio.wait({collector}, timeout=5)
    assert lost
    assert done, "the collector went on waiting for items after its cancellation was lost"
    await batcher.stop()


class _Held:
    """A handler whose first batch waits for :meth:`release`; it records every batch."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.entered = threading.Event()
        self._released = threading.Event()

    def __call__(self, items: Sequence[int], _control: BatchControl[int]) -> list[int]:
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.entered.set()
            self._released.wait(10)
        return [i * 10 for i in items]

    def release(self) -> None:
        self._released.set()


async def _until(predicate: Any, what: str) -> None:
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_requests_queued_while_a_batch_runs_form_one_batch_by_the_counters() -> None:
    """Everything queued when the handler is free again goes into the next batch: the
    batcher's own counters say so (two batches, eight items, a mean of four)."""
    held = _Held()
    batcher: MicroBatcher[int, int] = MicroBatcher(held, max_batch=32, max_wait_ms=0)
    batcher.start()
    try:
        first = asyncio.ensure_future(batcher.submit(0))
        await _until(held.entered.is_set, "the first batch")
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in range(1, 8)]
        await _until(lambda: batcher.depth == 7, "seven queued requests")
        held.release()
        assert await asyncio.gather(first, *rest) == [i * 10 for i in range(8)]
    finally:
        held.release()
        await batcher.stop()
    assert held.batches == [[0], list(range(1, 8))]
    assert (batcher.batches, batcher.items) == (2, 8)
    assert batcher.mean_batch == 4.0


async def test_a_wait_bounded_in_the_queue_ends_there_and_costs_no_work() -> None:
    held = _Held()
    batcher: MicroBatcher[int, int] = MicroBatcher(held, max_batch=32, max_wait_ms=0)
    batcher.start()
    try:
        first = asyncio.ensure_future(batcher.submit(0))
        await _until(held.entered.is_set, "the first batch")
        with pytest.raises(BatchTimeoutError) as raised:
            await batcher.submit(1, queue_timeout_s=0.02)
        assert raised.value.stage == "queue"
        assert batcher.expired_in_queue == 1
        held.release()
        assert await first == 0
        assert await batcher.submit(2, queue_timeout_s=5.0) == 20
    finally:
        held.release()
        await batcher.stop()
    assert held.batches == [[0], [2]]  # the expired item never reached the handler


@pytest.mark.parametrize("progressing", [True, False], ids=["progressing", "silent"])
async def test_the_run_bound_counts_the_handlers_silence_not_its_work(progressing: bool) -> None:
    """A handler that keeps asking ``wanted`` keeps its callers past ``run_timeout_s``; one
    that goes silent for longer releases them with a ``run`` timeout."""

    def handler(items: Sequence[int], control: BatchControl[int]) -> list[int]:
        for _ in range(30):  # three times the bound in all
            if progressing:
                control.wanted(0)
            threading.Event().wait(0.02)
        return [i * 10 for i in items]

    batcher: MicroBatcher[int, int] = MicroBatcher(handler, max_batch=4, max_wait_ms=0)
    batcher.start()
    try:
        if progressing:
            assert await batcher.submit(1, run_timeout_s=0.2) == 10
        else:
            with pytest.raises(BatchTimeoutError) as raised:
                await batcher.submit(1, run_timeout_s=0.2)
            assert raised.value.stage == "run"
    finally:
        await batcher.stop()


async def test_a_batch_carries_its_start_on_the_batchers_clock_and_the_cost_per_item() -> None:
    seen: list[tuple[float, float]] = []

    def handler(items: Sequence[int], control: BatchControl[int]) -> list[int]:
        seen.append((control.started_at, control.item_seconds))
        return list(items)

    batcher: MicroBatcher[int, int] = MicroBatcher(
        handler, max_batch=4, max_wait_ms=0, clock=lambda: 1234.5
    )
    batcher.start()
    try:
        await batcher.submit(1)
        await batcher.submit(2)
    finally:
        await batcher.stop()
    assert [started for started, _ in seen] == [1234.5, 1234.5]
    assert seen[0][1] == 0.0  # nothing measured before the first batch
    assert seen[1][1] > 0.0
    assert batcher.item_seconds > 0.0


@pytest.mark.parametrize("queue_bound", [5.0, 0.1], ids=["within-queue-bound", "past-it"])
async def test_a_batch_waiting_for_its_thread_is_still_queued(queue_bound: float) -> None:
    """Dispatched to a busy executor, a batch's handler has not started: its callers' run
    bound does not count yet (the batch has not been silent, it has not begun), the queue
    bound still does."""
    busy = threading.Event()
    executor = ThreadPoolExecutor(1)
    executor.submit(busy.wait, 10)  # the only thread is taken
    recorder = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        recorder, max_batch=4, max_wait_ms=0, executor=executor
    )
    batcher.start()
    try:
        waiting = asyncio.ensure_future(
            batcher.submit(1, queue_timeout_s=queue_bound, run_timeout_s=0.02)
        )
        await _until(lambda: batcher.batches == 1, "the batch to be dispatched")
        await asyncio.sleep(0.3)  # many run bounds; within the first queue bound only
        if queue_bound > 1.0:
            assert not waiting.done()
            busy.set()
            assert await asyncio.wait_for(waiting, 5) == 10
        else:
            with pytest.raises(BatchTimeoutError) as raised:
                await waiting
            assert raised.value.stage == "queue"
    finally:
        busy.set()
        await batcher.stop()
        executor.shutdown()


class _Item:
    """An item a weak reference can watch."""

    def __init__(self, value: int) -> None:
        self.value = value


def _early(items: Sequence[_Item], control: BatchControl[_Item]) -> list[_Item]:
    answers = [_Item(item.value * 10) for item in items]
    for i, answer in enumerate(answers):
        control.deliver(i, answer)
    return answers


@pytest.mark.parametrize("executor", [False, True])
async def test_an_answered_request_is_freed_without_a_garbage_collection(executor: bool) -> None:
    """With both wait bounds armed and early answers, nothing the batcher keeps refers back to
    a request once it is answered: its item and its answer are freed by reference counting,
    not by a later (full) garbage collection."""
    pool = ThreadPoolExecutor(1) if executor else None
    batcher: MicroBatcher[_Item, _Item] = MicroBatcher(
        _early, max_batch=8, max_wait_ms=5, executor=pool
    )
    batcher.start()
    gc.collect()
    gc.disable()
    try:
        items = [_Item(i) for i in range(6)]
        watched = [weakref.ref(item) for item in items]
        answers = await asyncio.gather(
            *(batcher.submit(item, queue_timeout_s=5.0, run_timeout_s=5.0) for item in items)
        )
        assert [a.value for a in answers] == [i * 10 for i in range(6)]
        answered = [weakref.ref(a) for a in answers]
        del items, answers
        refs = watched + answered
        # The batch's task may need more loop steps than one to finish on a loaded host; with
        # the collector disabled, waiting longer can never free an object held by a cycle.
        for _ in range(2000):
            if all(w() is None for w in refs):
                break
            await asyncio.sleep(0.001)
        assert [w() for w in watched] == [None] * 6
        assert [w() for w in answered] == [None] * 6
    finally:
        gc.enable()
        await batcher.stop()
        if pool is not None:
            pool.shutdown()
