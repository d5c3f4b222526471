"""``MicroBatcher``: collect concurrent requests into batches and handle each batch off the loop.

Plain asyncio, transport-agnostic: the embedded default feeds it from the HTTP routes, the Redis
worker feeds it from the request stream.  A batch closes when it holds ``max_batch`` items or
``max_wait_ms`` has passed since its first item arrived; the handler then runs in a thread
(``asyncio.to_thread`` or a given executor), never on the event loop.

With ``adaptive_wait`` (the service's default, ADR 0045) the wait is only spent under load: when
the previous batch held a single item, a new batch closes as soon as the queue is drained, so a
lone caller never pays ``max_wait_ms``; requests that arrive while a batch is being handled still
queue up and form the next batch (natural batching), and once batches hold several items the
batcher waits again to fill them.

The handler gets the batch's items and a :class:`BatchControl`, and returns one result per item,
in order.  If it raises, every item of that batch gets the exception (handlers that must isolate
items, like :func:`app.policy.selector.decide_many`, catch per item themselves).  Through the
control a handler may answer an item as soon as it is done (``deliver``), before the rest of its
batch, and may skip an item whose caller has given up (``wanted``: its wait timed out or was
cancelled), so an abandoned request costs no work once its batch reaches it (ADR 0071).

A caller may bound its wait in two stages (:meth:`MicroBatcher.submit`): ``queue_timeout_s``
for its batch's handler to start (a batch dispatched to a busy executor is still waiting), then
``run_timeout_s`` from that start. The run bound counts silence,
not work: while the handler keeps making progress on the batch (asks ``wanted`` or
``deliver``s for any of its items) its callers keep waiting, so a large batch is not abandoned
item by item while it is answering them; a handler silent for longer than ``run_timeout_s``
plus the batch's expected work (:attr:`MicroBatcher.item_seconds` times its size) ends its
callers' waits with :class:`BatchTimeoutError`.
Each batch records the clock reading at its start (:attr:`BatchControl.started_at`), for
handlers that give each item a budget counted from that start.
Each batch also carries the batcher's measured cost per item
(:attr:`MicroBatcher.item_seconds`, a moving average over the batches handled) as
:attr:`BatchControl.item_seconds`: a handler whose work grows with its batch (one shared
inference, then one walk per item) can tell how much of the batch's time goes to an item's
batch-mates.

Nothing the batcher keeps refers back to a request once it is answered (no reference cycles
through its timers, its batch's control or the collector): a request's item and answer are freed
by reference counting, not by a later garbage collection.

The batcher counts what it dispatched (:attr:`MicroBatcher.batches`, :attr:`MicroBatcher.items`,
:attr:`MicroBatcher.mean_batch`) and the waits that ended in the queue
(:attr:`MicroBatcher.expired_in_queue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")

BatchObserver = Callable[[int, float], None]

#: weight of the newest batch in :attr:`MicroBatcher.item_seconds`
COST_WEIGHT = 0.2


class BatcherClosedError(RuntimeError):
    """Raised by :meth:`MicroBatcher.submit` once the batcher is stopped."""


WaitStage = Literal["queue", "run"]


class BatchTimeoutError(TimeoutError):
    """A bounded :meth:`MicroBatcher.submit` wait ended: ``stage`` ``queue`` when its batch
    did not start within ``queue_timeout_s``, ``run`` when its batch made no progress for
    ``run_timeout_s``."""

    def __init__(self, stage: WaitStage, seconds: float) -> None:
        what = "its batch did not start" if stage == "queue" else "its batch made no progress"
        super().__init__(f"{what} within {seconds * 1000.0:.0f} ms")
        self.stage: WaitStage = stage
        self.seconds = seconds


@dataclass(slots=True)
class _Pending(Generic[T, R]):
    item: T
    future: asyncio.Future[R]
    run_timeout_s: float | None = None
    queue_timer: asyncio.TimerHandle | None = None
    run_timer: asyncio.TimerHandle | None = None
    #: the control of the batch it was dispatched in
    control: BatchControl[R] | None = None


class LoopHandover(Generic[R]):
    """Results a worker thread hands to the event loop, one loop wake-up per burst.

    :meth:`put` may be called from any thread; ``on_loop`` runs on ``loop`` with every
    ``(index, result)`` put since its previous run. Results put while the loop has not yet run
    the previous hand-over go with it, so a busy loop is woken once per burst, not per result.

    :meth:`run_in` runs the function that puts them in an executor and hands its return value
    over the same way: after the results it put, and in the same wake-up as the last of them
    when the loop has not run yet (``run_in_executor`` would wake the loop once more for the
    return value alone: a batch of one answered early cost two wake-ups).
    """

    __slots__ = ("_done", "_lock", "_loop", "_on_loop", "_ready", "_returned", "_scheduled")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_loop: Callable[[list[tuple[int, R]]], None],
    ) -> None:
        self._loop = loop
        self._on_loop = on_loop
        self._lock = threading.Lock()
        self._ready: list[tuple[int, R]] = []
        self._scheduled = False
        self._done: asyncio.Future[object] | None = None
        self._returned: tuple[object, BaseException | None] | None = None

    def put(self, index: int, result: R) -> None:
        with self._lock:
            self._ready.append((index, result))
            if self._scheduled:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
            returned, self._returned = self._returned, None
            self._scheduled = False
        if ready:
            self._on_loop(ready)
        done = self._done
        if returned is not None and done is not None and not done.done():
            value, error = returned
            if error is None:
                done.set_result(value)
            else:
                done.set_exception(error)

    async def run_in(self, executor: Executor, fn: Callable[[], T]) -> T:
        """``fn()`` in ``executor`` (in a copy of the caller's context, like
        ``asyncio.to_thread``); its results put meanwhile reach ``on_loop`` first."""
        done: asyncio.Future[object] = self._loop.create_future()
        self._done = done
        context = contextvars.copy_context()

        def returned(value: object, error: BaseException | None) -> None:
            with self._lock:
                self._returned = (value, error)
                if self._scheduled:
                    return
                self._scheduled = True
            self._loop.call_soon_threadsafe(self._hand_over)

        def call() -> None:
            try:
                value = context.run(fn)
            except BaseException as exc:  # handed to the awaiting coroutine, as an executor would
                returned(None, exc)
            else:
                returned(value, None)

        work = executor.submit(call)
        # a work item cancelled before it ran (executor shut down) never reports: cancel the wait
        work.add_done_callback(
            lambda f: self._loop.call_soon_threadsafe(done.cancel) if f.cancelled() else None
        )
        return cast(T, await done)


class BatchControl(Generic[R]):
    """What a batch handler may do with its batch's callers while it runs (in its thread)."""

    __slots__ = ("_futures", "_handover", "item_seconds", "progressed_at", "started_at")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[R]],
        started_at: float = 0.0,
        item_seconds: float = 0.0,
    ):
        self._futures = futures
        # a function of the futures, not a bound method: the control and its handover would
        # otherwise refer to each other, keeping the batch's outcomes alive until a collection
        self._handover: LoopHandover[R] = LoopHandover(
            loop, functools.partial(_resolve_ready, futures)
        )
        #: the batcher's clock when the batch started (on the loop, before the handler ran)
        self.started_at = started_at
        #: the batcher's measured handler seconds per item when the batch started
        self.item_seconds = item_seconds
        #: ``time.monotonic()`` of the handler's start or its last call to :meth:`wanted` or
        #: :meth:`deliver` (``None`` while the handler waits for its thread)
        self.progressed_at: float | None = None

    def wanted(self, index: int) -> bool:
        """False once item ``index``'s caller has its answer or gave up (cancelled, timed out).

        Reads the future's state from the handler's thread: a stale ``True`` only costs the
        work the check would have saved. Each call counts as progress of the batch.
        """
        self.progressed_at = time.monotonic()
        return not self._futures[index].done()

    def deliver(self, index: int, result: R) -> None:
        """Answer item ``index`` now; its entry in the handler's returned list is then ignored.

        Handed to the loop through a :class:`LoopHandover` (one wake-up per burst).
        """
        self.progressed_at = time.monotonic()
        self._handover.put(index, result)


BatchHandler = Callable[[Sequence[T], BatchControl[R]], Sequence[R]]


class MicroBatcher(Generic[T, R]):
    """Batch concurrent :meth:`submit` calls; ``on_batch(size, seconds)`` observes each batch."""

    def __init__(
        self,
        handler: BatchHandler[T, R],
        *,
        max_batch: int,
        max_wait_ms: float,
        executor: Executor | None = None,
        on_batch: BatchObserver | None = None,
        concurrency: int = 1,
        adaptive_wait: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._handler = handler
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self._executor = executor
        self._on_batch = on_batch
        self._concurrency = concurrency
        self.adaptive_wait = adaptive_wait
        #: read at each batch's start (:attr:`BatchControl.started_at`)
        self.clock = clock
        #: handler seconds per item, averaged over the batches handled (0 before the first)
        self.item_seconds = 0.0
        #: batches dispatched to the handler, and the items they held
        self.batches = 0
        self.items = 0
        #: bounded waits that ended before their batch started
        self.expired_in_queue = 0
        self._last_size = 0
        self._queue: asyncio.Queue[_Pending[T, R]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    @property
    def depth(self) -> int:
        """Requests waiting for a batch (not counting the ones being handled)."""
        return 0 if self._queue is None else self._queue.qsize()

    @property
    def mean_batch(self) -> float:
        """Items per dispatched batch so far (0 before the first)."""
        return self.items / self.batches if self.batches else 0.0

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not self._closed

    def start(self) -> None:
        """Start the collector tasks on the running loop (idempotent)."""
        if self._tasks:
            return
        self._closed = False
        self._queue = asyncio.Queue()
        self._tasks = [
            asyncio.create_task(self._run(), name=f"micro-batcher-{i}")
            for i in range(self._concurrency)
        ]

    async def stop(self) -> None:
        """Stop collecting; requests still queued get :class:`BatcherClosedError`."""
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._queue is not None:
            while not self._queue.empty():
                pending = self._queue.get_nowait()
                if not pending.future.done():
                    pending.future.set_exception(BatcherClosedError("batcher stopped"))

    async def submit(
        self,
        item: T,
        *,
        queue_timeout_s: float | None = None,
        run_timeout_s: float | None = None,
    ) -> R:
        """Queue ``item`` and wait for its result.

        ``queue_timeout_s`` bounds the wait for its batch to start, ``run_timeout_s`` the
        handler's silence once it has (see the module docstring); past either the wait ends
        with :class:`BatchTimeoutError` and the handler sees the item as no longer wanted.
        """
        if self._closed or self._queue is None:
            raise BatcherClosedError("batcher is not running")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        pending = _Pending(item, future, run_timeout_s)
        if queue_timeout_s is not None:
            pending.queue_timer = loop.call_later(
                max(0.0, queue_timeout_s), self._expire_queued, pending, queue_timeout_s
            )
        self._queue.put_nowait(pending)
        try:
            return await future
        finally:
            for timer in (pending.queue_timer, pending.run_timer):
                if timer is not None:
                    timer.cancel()
            # a timer's handle holds the pending item: without these references the request
            # and its answer are freed as soon as nobody uses them, not by a later collection
            pending.queue_timer = pending.run_timer = None

    def _expire_queued(self, pending: _Pending[T, R], seconds: float) -> None:
        """The queue bound holds until the handler of the item's batch has started (a batch
        dispatched to a busy executor is still waiting)."""
        control = pending.control
        if pending.future.done() or (control is not None and control.progressed_at is not None):
            return
        self.expired_in_queue += 1
        pending.future.set_exception(BatchTimeoutError("queue", seconds))

    def _arm_run_timer(
        self, pending: _Pending[T, R], control: BatchControl[R], seconds: float
    ) -> None:
        """Expire ``pending`` once its batch's handler, started, has been silent for
        ``seconds``; checked every ``seconds`` before it starts, re-armed while it progresses."""
        pending.run_timer = asyncio.get_running_loop().call_later(
            seconds, self._check_run, pending, control, seconds
        )

    def _check_run(self, pending: _Pending[T, R], control: BatchControl[R], seconds: float) -> None:
        if pending.future.done():
            return
        now = time.monotonic()
        progressed = control.progressed_at
        due = now + seconds if progressed is None else progressed + seconds
        if now < due:
            pending.run_timer = asyncio.get_running_loop().call_later(
                due - now, self._check_run, pending, control, seconds
            )
        else:
            pending.future.set_exception(BatchTimeoutError("run", seconds))

    async def _collect(self, queue: asyncio.Queue[_Pending[T, R]]) -> list[_Pending[T, R]]:
        batch = [await queue.get()]
        closes_at = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch:
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            if len(batch) >= self.max_batch:
                break
            if self.adaptive_wait and self._last_size <= 1 and len(batch) == 1:
                break  # no sign of concurrent callers: do not make a lone one wait
            remaining = closes_at - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(queue.get(), remaining))
            except TimeoutError:
                break
        self._last_size = len(batch)
        return batch

    def _start_handler(self, items: list[T], control: BatchControl[R]) -> Sequence[R]:
        control.progressed_at = time.monotonic()
        return self._handler(items, control)

    async def _handle(self, live: list[_Pending[T, R]]) -> None:
        items = [p.item for p in live]
        loop = asyncio.get_running_loop()
        control: BatchControl[R] = BatchControl(
            loop, [p.future for p in live], self.clock(), self.item_seconds
        )
        self.batches += 1
        self.items += len(live)
        for pending in live:
            pending.control = control
            if pending.run_timeout_s is not None:
                # the handler may be silent for the item's bound plus the batch's expected work
                seconds = pending.run_timeout_s + self.item_seconds * len(live)
                self._arm_run_timer(pending, control, seconds)
        started = time.perf_counter()
        try:
            handler = functools.partial(self._start_handler, items, control)
            if self._executor is None:
                results = await loop.run_in_executor(None, handler)
            else:  # the return value comes back with the last early answer: one wake-up
                results = await control._handover.run_in(self._executor, handler)
            if len(results) != len(items):
                raise RuntimeError(
                    f"batch handler returned {len(results)} results for {len(items)} items"
                )
        except asyncio.CancelledError:
            _fail(live, BatcherClosedError("batcher stopped"))
            raise
        except Exception as exc:  # delivered to every waiter of the batch
            _fail(live, exc)
            return
        finally:
            seconds = time.perf_counter() - started
            per_item = seconds / len(items)
            self.item_seconds = (
                per_item
                if self.item_seconds <= 0.0
                else (1.0 - COST_WEIGHT) * self.item_seconds + COST_WEIGHT * per_item
            )
            if self._on_batch is not None:
                self._on_batch(len(items), seconds)
        for pending, result in zip(live, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)

    async def _run(self) -> None:
        assert self._queue is not None
        queue = self._queue
        # the flag, not only the cancellation, ends the loop: on Python 3.11 a cancel that lands
        # as ``wait_for(queue.get())`` gets its item is lost (the item is returned instead), and
        # stop() would then wait for this task forever
        while not self._closed:
            await self._dispatch(await self._collect(queue))

    async def _dispatch(self, batch: list[_Pending[T, R]]) -> None:
        """Handle ``batch``'s live items; returns holding none of them (the collector keeps
        no reference to a batch it has handled)."""
        live = [p for p in batch if not p.future.done()]
        if live:
            await self._handle(live)


def _resolve_ready(futures: Sequence[asyncio.Future[R]], ready: list[tuple[int, R]]) -> None:
    for index, result in ready:
        _resolve(futures[index], result)


def _resolve(future: asyncio.Future[R], result: R) -> None:
    if not future.done():
        future.set_result(result)


def _fail(pendings: list[_Pending[T, R]], exc: BaseException) -> None:
    for pending in pendings:
        if not pending.future.done():
            pending.future.set_exception(exc)
