"""Tuning a cluster's policy from its own history (issue 21): export, tune, shadow, promote.

* :func:`export_history`: the cluster's finished jobs as SWF (submit, start and end times from
  its job events, requested walltimes, gang sizes), the format ``kairos tune`` reads.
* :func:`create_tune` persists a ``queued`` tune (and its ``tune.start`` audit event) in its own
  transaction before anything runs; :class:`TuneRunner` then runs the procedure as a child
  process (``python -m app.tune_worker``: the serving process never imports the simulator),
  so the event loop only reads the child's output and writes its progress.
* A running tune holds a lease (``lease_until``) that its replica renews; a replica that stops
  leaves a lease that expires, and the next replica that looks marks the tune failed.
* A tune that fails (too little history, the procedure refusing, a crash, the time budget
  exceeded) changes nothing of its cluster and says why (``error``, a ``tune.fail`` event).
* A learned winner is registered for the tenant only and becomes the cluster's shadow policy; a
  heuristic winner registers nothing and is shadowed by name. It becomes the primary policy only
  through :func:`promote_tune`: guarded (its validation bounded slowdown below the current
  policy's on the same windows) unless forced; a refusal is a 409 saying why, and is audited.
* Lock order: a cluster's row before its tunes' rows (deleting a cluster deletes its tunes).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import ClusterRecord, JobRecord, NodeRecord, TuneRecord
from app.db.repositories.audit_repository import AuditRepository
from app.db.repositories.cluster_repository import ClusterRepository
from app.db.repositories.pagination import encode_cursor
from app.db.session import Database
from app.domains import DEFAULT_DOMAIN
from app.domains.hpc.swf import format_swf
from app.kernel.clock import epoch_now
from app.policy.onnx_policy import PolicyRefusedError
from app.policy.registry import ModelExistsError
from app.schemas.common import Page
from app.schemas.tune import (
    GuardRead,
    TuneCreate,
    TuneError,
    TuneProgress,
    TunePromote,
    TunePromoteRead,
    TuneRead,
    TuneResultRead,
    ValidationRowRead,
)
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import epoch
from app.services.decision import DecisionService, split_policy
from app.services.errors import ConflictError, ErrorItem, UnprocessableError, not_found
from app.services.paging import cursor_arg

logger = logging.getLogger(__name__)

# -- audit actions -------------------------------------------------------------------------------
TUNE_START = "tune.start"
TUNE_FINISH = "tune.finish"
TUNE_FAIL = "tune.fail"
TUNE_SHADOW = "tune.shadow"
TUNE_PROMOTE = "tune.promote"
TUNE_PROMOTE_REFUSED = "tune.promote_refused"

# -- states ------------------------------------------------------------------------------------
QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
ACTIVE = (QUEUED, RUNNING)

#: seconds a replica's claim on a tune holds unless renewed
LEASE_S = 60.0
#: seconds between lease renewals (and progress writes) of a running tune
RENEW_S = 5.0
#: seconds a procedure may run past its time budget (its last generation, writing the winner)
#: before it is stopped and the tune fails as over budget
OVERRUN_GRACE_S = 30.0
#: simulator processes of one tune (the serving host's cores are the API's first)
TUNE_WORKERS = 1
#: the procedure trains on one window before the held-out validation jobs and validates on at
#: least one more: fewer finished jobs than this many windows cannot be tuned
MIN_WINDOWS = 2
#: the child program (:mod:`app.tune_worker`)
WORKER_MODULE = "app.tune_worker"
#: bytes of a crashed child's standard error kept in the tune's error
STDERR_TAIL = 2000
#: the longest line the child may print (its result carries the model card)
MAX_LINE_BYTES = 16 * 1024 * 1024


# ================================================================ the history as SWF


@dataclass(frozen=True, slots=True)
class History:
    """A cluster's finished jobs as SWF text (:func:`app.domains.hpc.swf.format_swf`)."""

    lines: list[str]
    jobs: int
    max_nodes: int
    max_procs: int

    @property
    def text(self) -> str:
        return "".join(self.lines)


Shape = tuple[tuple[str, float], ...]


def _shape(per_task: Mapping[str, Any]) -> Shape:
    return tuple(sorted((str(k), float(v)) for k, v in per_task.items() if float(v) > 0))


def _task_unit(per_tasks: Iterable[Mapping[str, Any]]) -> Shape:
    """The most common task shape of the jobs (ties: the first seen): one SWF processor."""
    counts = Counter(_shape(per_task) for per_task in per_tasks)
    for shape, _ in counts.most_common(1):
        if shape:
            return shape
    return (("cpu", 1.0),)


def _processors(tasks: int, per_task: Mapping[str, Any], unit: Shape) -> int:
    """The job's gang size in units of ``unit``: tasks times the units one task takes."""
    units = max((float(per_task.get(name, 0.0)) / amount for name, amount in unit), default=1.0)
    return tasks * max(1, math.ceil(units - 1e-9))


def _slots(capacity: Mapping[str, Any], unit: Shape) -> int:
    return max(
        0, min(math.floor(float(capacity.get(name, 0.0)) / amount + 1e-9) for name, amount in unit)
    )


def _numbering(values: Iterable[str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        if v is not None and v not in out:
            out[v] = len(out) + 1
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class _Finished:
    """What the history needs of one finished job (its spec's fields read in SQL)."""

    submit: float
    start: float
    end: float
    tasks: int
    walltime: float | None
    per_task: dict[str, Any]
    user: str | None
    queue: str | None


async def _finished_jobs(
    session: AsyncSession,
    cluster_pk: int,
    *,
    since: float | None,
    limit: int | None,
    newest: bool,
) -> list[_Finished]:
    """The finished jobs in submit order, ties by id (``newest``: the last ``limit``)."""
    spec = JobRecord.spec
    stmt = select(
        JobRecord.submit_time,
        JobRecord.start_time,
        JobRecord.end_time,
        spec["tasks"].as_integer(),
        spec["walltime_s"].as_float(),
        spec["per_task"],
        spec["user"].as_string(),
        spec["queue"].as_string(),
    ).where(
        JobRecord.cluster_pk == cluster_pk,
        JobRecord.state == "finished",
        JobRecord.start_time.is_not(None),
        JobRecord.end_time.is_not(None),
    )
    if since is not None:
        stmt = stmt.where(JobRecord.submit_time >= since)
    if newest:
        stmt = stmt.order_by(JobRecord.submit_time.desc(), JobRecord.id.desc())
    else:
        stmt = stmt.order_by(JobRecord.submit_time, JobRecord.id)
    if limit is not None:
        stmt = stmt.limit(limit)
    rows = [
        _Finished(float(s), float(b), float(e), int(t or 1), w, dict(p or {}), u, q)
        for s, b, e, t, w, p, u, q in (await session.execute(stmt)).all()
        if b is not None and e is not None  # the query's condition, for the type checker
    ]
    if newest:
        rows.reverse()
    return rows


async def _count_finished(session: AsyncSession, cluster_pk: int) -> int:
    stmt = select(func.count()).where(
        JobRecord.cluster_pk == cluster_pk,
        JobRecord.state == "finished",
        JobRecord.start_time.is_not(None),
        JobRecord.end_time.is_not(None),
    )
    return int((await session.execute(stmt)).scalar_one())


async def _history(
    session: AsyncSession,
    cluster: ClusterRecord,
    *,
    since: float | None = None,
    limit: int | None = None,
    newest: bool = False,
) -> History:
    jobs = await _finished_jobs(session, cluster.pk, since=since, limit=limit, newest=newest)
    capacities = list(
        (
            await session.execute(
                select(NodeRecord.capacity).where(NodeRecord.cluster_pk == cluster.pk)
            )
        ).scalars()
    )
    return await asyncio.to_thread(_history_text, cluster.id, jobs, capacities)


def _history_text(
    cluster_id: str, jobs: Sequence[_Finished], capacities: Sequence[Mapping[str, Any]]
) -> History:
    """The SWF text of ``jobs`` (CPU work: run off the event loop)."""
    unit = _task_unit(j.per_task for j in jobs)
    procs = [_processors(j.tasks, j.per_task, unit) for j in jobs]
    slots = max(sum(_slots(capacity, unit) for capacity in capacities), max(procs, default=1), 1)
    users = _numbering(j.user for j in jobs)
    queues = _numbering(j.queue for j in jobs)
    t0 = math.floor(jobs[0].submit) if jobs else 0
    rows: list[list[int]] = []
    for number, (j, p) in enumerate(zip(jobs, procs, strict=True), 1):
        run = max(1, round(j.end - j.start))
        wall = run if j.walltime is None else max(1, round(j.walltime))
        user = -1 if j.user is None else users[j.user]
        queue = -1 if j.queue is None else queues[j.queue]
        # fields: job, submit, wait, run, procs, cpu, memory, requested procs, requested
        # time, requested memory, status (1: completed), user, group, executable, queue,
        # partition, preceding job, think time
        rows.append(
            [number, math.floor(j.submit) - t0, max(0, round(j.start - j.submit)), run, p,
             -1, -1, p, wall, -1, 1, user, -1, -1, queue, -1, -1, -1]
        )  # fmt: skip
    unit_text = ", ".join(f"{name}={amount:g}" for name, amount in unit)
    end = max((j.end for j in jobs), default=float(t0))
    comments = [
        "Version: 2.2",
        f"Computer: Kairos cluster {cluster_id}",
        "Acknowledge: exported by Kairos from the cluster's job events",
        f"UnixStartTime: {t0}",
        "TimeZoneString: UTC",
        f"StartTime: {_iso(t0)}",
        f"EndTime: {_iso(end)}",
        f"MaxJobs: {len(rows)}",
        f"MaxRecords: {len(rows)}",
        "Preemption: No",
        "Note: one line per finished job in submit order (ties by job id); field 1 numbers them "
        "from 1, field 2 is seconds after UnixStartTime, wait = start - submit and run = end - "
        "start in whole seconds (run at least 1), field 9 the requested walltime",
        f"Note: a processor is one task of the jobs' most common task shape ({unit_text}); "
        "fields 5 and 8 are the gang size in processors, MaxNodes = MaxProcs = the tasks of that "
        "shape the cluster's nodes hold",
        "Note: fields 12 and 15 number the jobs' users and queues from 1 in order of first "
        "appearance (-1: none)",
    ]
    lines = list(format_swf(rows, max_nodes=slots, max_procs=slots, comments=comments))
    return History(lines=lines, jobs=len(rows), max_nodes=slots, max_procs=slots)


async def export_history(
    ctx: Ctx, cluster_id: str, *, since: float | None = None, limit: int | None = None
) -> History:
    """``GET /v1/clusters/{id}/history``: the finished jobs submitted at or after ``since``,
    the first ``limit`` of them in submit order."""
    cluster = await require_cluster(ctx, cluster_id)
    return await _history(ctx.session, cluster, since=since, limit=limit)


# ================================================================ tune records


#: parameters of the service's own (a path on the replica's disk), not shown to callers
_PRIVATE_PARAMS = frozenset({"from_model"})


def new_tune_id() -> str:
    return f"tune_{uuid.uuid4().hex}"


def _subject(record: TuneRecord) -> str:
    return f"{record.cluster_id}/{record.id}"


def _read(record: TuneRecord) -> TuneRead:
    result = None
    if record.result is not None and record.policy is not None:
        stored = record.result
        result = TuneResultRead(
            winner=stored["winner"],
            kind=stored["kind"],
            policy=record.policy,
            recommendation=stored.get("recommendation"),
            table=[ValidationRowRead(**row) for row in stored["table"]],
            card=stored["card"],
        )
    progress = None
    if record.progress is not None:
        progress = TuneProgress(
            fraction=float(record.progress.get("fraction", 0.0)),
            message=str(record.progress.get("message", "")),
        )
    error = None
    if record.state == FAILED:
        error = TuneError(code=record.error_code or "failed", message=record.error or "")
    return TuneRead(
        id=record.id,
        cluster_id=record.cluster_id,
        state=record.state,  # type: ignore[arg-type]
        phase=record.phase,  # type: ignore[arg-type]
        created_at=epoch(record.created_at),
        started_at=record.started_at,
        finished_at=record.finished_at,
        params={k: v for k, v in record.params.items() if k not in _PRIVATE_PARAMS},
        baseline_policy=record.baseline_policy,
        from_policy=record.params.get("from_policy"),
        history_jobs=record.history_jobs,
        progress=progress,
        result=result,
        error=error,
    )


async def _audit(
    session: AsyncSession, record: TuneRecord, action: str, details: dict[str, Any]
) -> None:
    await AuditRepository(session).record(
        record.tenant,
        action,
        _subject(record),
        {"tune_id": record.id, "cluster_id": record.cluster_id, **details},
    )


async def _fail(
    session: AsyncSession, record: TuneRecord, code: str, message: str, **details: Any
) -> None:
    """Mark ``record`` failed with why, audited; its cluster is not touched."""
    record.state = FAILED
    record.error_code = code
    record.error = message
    record.finished_at = epoch_now()
    record.lease_until = None
    await session.flush()
    await _audit(session, record, TUNE_FAIL, {"code": code, "reason": message, **details})


async def fail_stale(
    session: AsyncSession, *, tenant: str | None, now: float, cluster_pk: int | None = None
) -> int:
    """Fail every queued or running tune (of ``tenant``, of one cluster; None: of all) whose
    lease expired: the replica that held it stopped. Returns how many."""
    stmt = select(TuneRecord).where(TuneRecord.state.in_(ACTIVE), TuneRecord.lease_until < now)
    if tenant is not None:
        stmt = stmt.where(TuneRecord.tenant == tenant)
    if cluster_pk is not None:
        stmt = stmt.where(TuneRecord.cluster_pk == cluster_pk)
    stale = list((await session.execute(stmt.with_for_update())).scalars())
    for record in stale:
        await _fail(
            session,
            record,
            "lease_expired",
            f"the replica running this tune ({record.owner}) stopped renewing its lease; "
            "the tune did not finish",
        )
    return len(stale)


def _is_stale(record: TuneRecord, now: float) -> bool:
    return record.state in ACTIVE and record.lease_until is not None and record.lease_until < now


async def _tune_of(session: AsyncSession, cluster: ClusterRecord, tune_id: str) -> TuneRecord:
    stmt = select(TuneRecord).where(
        TuneRecord.tenant == cluster.tenant,
        TuneRecord.cluster_pk == cluster.pk,
        TuneRecord.id == tune_id,
    )
    record = (await session.execute(stmt)).scalar_one_or_none()
    if record is None:
        raise not_found("tune", tune_id)
    return record


async def get_tune(database: Database, tenant: str, cluster_id: str, tune_id: str) -> TuneRead:
    async with database.transaction(write=False) as session:
        cluster = await require_cluster(Ctx(session=session, tenant=tenant), cluster_id)
        record = await _tune_of(session, cluster, tune_id)
        if not _is_stale(record, epoch_now()):
            return _read(record)
    async with database.transaction(write=True) as session:
        await fail_stale(session, tenant=tenant, now=epoch_now())
        cluster = await require_cluster(Ctx(session=session, tenant=tenant), cluster_id)
        return _read(await _tune_of(session, cluster, tune_id))


async def _tune_page(
    session: AsyncSession, tenant: str, cluster_id: str, after: int | None, limit: int
) -> tuple[Page[TuneRead], bool]:
    """One page of the cluster's tunes, newest first, and whether one of them is stale."""
    cluster = await require_cluster(Ctx(session=session, tenant=tenant), cluster_id)
    stmt = select(TuneRecord).where(
        TuneRecord.tenant == tenant, TuneRecord.cluster_pk == cluster.pk
    )
    if after is not None:
        stmt = stmt.where(TuneRecord.pk < after)
    stmt = stmt.order_by(TuneRecord.pk.desc()).limit(limit + 1)
    rows = list((await session.execute(stmt)).scalars())
    more = len(rows) > limit
    rows = rows[:limit]
    now = epoch_now()
    page = Page[TuneRead](
        items=[_read(r) for r in rows],
        next_cursor=encode_cursor(rows[-1].pk) if more and rows else None,
    )
    return page, any(_is_stale(r, now) for r in rows)


async def list_tunes(
    database: Database, tenant: str, cluster_id: str, *, limit: int, cursor: str | None
) -> Page[TuneRead]:
    """The cluster's tunes, newest first (a stale one is failed first, then read again)."""
    after = cursor_arg(cursor)
    async with database.transaction(write=False) as session:
        page, stale = await _tune_page(session, tenant, cluster_id, after, limit)
    if not stale:
        return page
    async with database.transaction(write=True) as session:
        await fail_stale(session, tenant=tenant, now=epoch_now())
        page, _ = await _tune_page(session, tenant, cluster_id, after, limit)
    return page


# ================================================================ starting a tune


def _policy_label(decisions: DecisionService, name: str, tenant: str) -> str | None:
    """The validation table's label of policy ``name``, or None when the catalogue does not
    know it: the name of the policy that decides, as its decisions name it. A policy that
    decides as a heuristic (a heuristic's name, or a heuristic card, which the registry serves
    as the heuristic it recommends) is that heuristic's row; a model is ``name@version``."""
    if decisions.is_heuristic(name):
        return split_policy(name)[0]
    info = decisions.get_policy(name, tenant)
    if info is None:
        return None
    if info.heuristic is not None:
        return info.heuristic
    return f"{info.name}@{info.version}"


def _ranking_model_dir(decisions: DecisionService, name: str, tenant: str) -> Path | None:
    """The directory of ``name`` when it is an hpc ranking model ``tenant`` may use (what the
    procedure can start from), else None."""
    if decisions.is_heuristic(name):
        return None
    info = decisions.get_policy(name, tenant)
    if info is None or info.kind != "onnx" or not info.loaded or info.domain != DEFAULT_DOMAIN:
        return None
    card = info.card or {}
    if card.get("decision_mode") != "rank" or not isinstance(card.get("architecture"), dict):
        return None
    for entry in decisions.pipeline.registry.entries():
        if (entry.owner, entry.name, entry.version) == (info.owner, info.name, info.version):
            return entry.path
    return None


def _policy_name_for(cluster_id: str) -> str:
    """The registry name of a cluster's tuned policies (a name segment the registry takes)."""
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in cluster_id)
    return f"tuned-{safe}"[:96]


async def create_tune(
    database: Database,
    tenant: str,
    cluster_id: str,
    body: TuneCreate,
    *,
    decisions: DecisionService,
    runner: TuneRunner,
) -> TuneRead:
    """Persist a queued tune (with its ``tune.start`` event) and hand it to ``runner``.

    422 when the cluster is not an hpc cluster, its history is too short, or ``from_policy``
    is no ranking model the tenant may use; 409 ``tune_in_progress`` while another tune of the
    cluster is queued or running. Nothing of the cluster changes."""
    now = epoch_now()
    async with database.transaction(write=True) as session:
        cluster = await require_cluster(Ctx(session=session, tenant=tenant), cluster_id, lock=True)
        await fail_stale(session, tenant=tenant, now=now, cluster_pk=cluster.pk)
        if cluster.domain != DEFAULT_DOMAIN:
            raise UnprocessableError(
                f"tuning adapts the learned hpc policy; cluster {cluster_id!r} is a "
                f"{cluster.domain} cluster",
                code="unsupported_domain",
                details=[ErrorItem("path.cluster_id", f"a {cluster.domain} cluster", "domain")],
            )
        busy = (
            await session.execute(
                select(TuneRecord.id).where(
                    TuneRecord.cluster_pk == cluster.pk, TuneRecord.state.in_(ACTIVE)
                )
            )
        ).scalar()
        if busy is not None:
            raise ConflictError(
                f"tune {busy!r} of cluster {cluster_id!r} is still queued or running; wait for "
                "it to finish",
                code="tune_in_progress",
            )
        jobs = min(await _count_finished(session, cluster.pk), body.max_history)
        needed = max(body.min_history, MIN_WINDOWS * body.window_length)
        if jobs < needed:
            by_windows = needed == MIN_WINDOWS * body.window_length
            why = (
                f"{MIN_WINDOWS} windows of {body.window_length} jobs"
                if by_windows
                else f"min_history {body.min_history}"
            )
            raise UnprocessableError(
                f"too little history: cluster {cluster_id!r} has {jobs} finished jobs; this tune "
                f"needs at least {needed} ({why})",
                code="too_little_history",
                details=[
                    ErrorItem(
                        "body.window_length" if by_windows else "body.min_history",
                        f"{jobs} finished jobs, {needed} needed",
                        "too_little_history",
                    )
                ],
            )
        from_policy: str | None = None
        from_dir: Path | None = None
        if body.from_policy is not None:
            from_dir = _ranking_model_dir(decisions, body.from_policy, tenant)
            if from_dir is None:
                raise UnprocessableError(
                    f"{body.from_policy!r} is not a ranking model this tenant may tune from",
                    code="not_a_ranking_model",
                    details=[ErrorItem("body.from_policy", "not an hpc ranking model", "unknown")],
                )
            from_policy = _policy_label(decisions, body.from_policy, tenant)
        else:
            from_dir = _ranking_model_dir(decisions, cluster.policy, tenant)
            if from_dir is not None:
                from_policy = _policy_label(decisions, cluster.policy, tenant)
        params = {
            **body.model_dump(mode="json"),
            "backfill": body.backfill or cluster.backfill,
            "from_policy": from_policy,
            "from_model": None if from_dir is None else str(from_dir),
            "workers": TUNE_WORKERS,
        }
        record = TuneRecord(
            id=new_tune_id(),
            tenant=tenant,
            cluster_pk=cluster.pk,
            cluster_id=cluster.id,
            state=QUEUED,
            phase="none",
            params=params,
            baseline_policy=cluster.policy,
            owner=runner.owner,
            lease_until=now + LEASE_S,
        )
        session.add(record)
        await session.flush()
        await _audit(
            session,
            record,
            TUNE_START,
            {
                "baseline_policy": cluster.policy,
                "history_jobs": jobs,
                "backfill": params["backfill"],
                "time_budget_s": body.time_budget_s,
                "from_policy": from_policy,
            },
        )
        read = _read(record)
    runner.launch(record.id, tenant)
    return read


# ================================================================ running a tune


@dataclass(frozen=True, slots=True)
class _Outcome:
    result: dict[str, Any] | None = None
    code: str | None = None
    message: str | None = None


_CHILDREN: set[asyncio.subprocess.Process] = set()


def _kill_children() -> None:
    """At interpreter exit: stop every tune child still running (its tune's lease expires)."""
    for proc in list(_CHILDREN):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


atexit.register(_kill_children)


class TuneRunner:
    """Runs this replica's tunes in the background, one asyncio task each (one per app)."""

    def __init__(self, database: Database, decisions: DecisionService) -> None:
        self.database = database
        self.decisions = decisions
        #: this replica, as the owner of the tunes it runs
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def running(self) -> int:
        return len(self._tasks)

    def launch(self, tune_id: str, tenant: str) -> None:
        task = asyncio.create_task(self._guarded(tune_id, tenant), name=f"kairos-tune-{tune_id}")
        self._tasks[tune_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(tune_id, None))

    async def wait(self, tune_id: str) -> None:
        """Until this replica's task of ``tune_id`` has ended (at once if there is none)."""
        task = self._tasks.get(tune_id)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def close(self) -> None:
        """Cancel every tune task (their children are killed; their leases expire)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _guarded(self, tune_id: str, tenant: str) -> None:
        try:
            await self._run(tune_id, tenant)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the tune fails; the replica goes on serving
            logger.exception("tune %s crashed", tune_id)
            with contextlib.suppress(Exception):
                await self._finish_failed(tune_id, "crash", f"{type(exc).__name__}: {exc}")

    async def _claim(self, tune_id: str) -> tuple[TuneRecord, ClusterRecord] | None:
        now = epoch_now()
        async with self.database.transaction(write=True) as session:
            record = (
                await session.execute(
                    select(TuneRecord).where(TuneRecord.id == tune_id).with_for_update()
                )
            ).scalar_one_or_none()
            if record is None or record.state != QUEUED:
                return None
            cluster = (
                await session.execute(
                    select(ClusterRecord).where(ClusterRecord.pk == record.cluster_pk)
                )
            ).scalar_one()
            record.state = RUNNING
            record.owner = self.owner
            record.started_at = now
            record.lease_until = now + LEASE_S
            record.progress = {"fraction": 0.0, "message": "exporting the history"}
            await session.flush()
            return record, cluster

    async def _run(self, tune_id: str, tenant: str) -> None:
        claimed = await self._claim(tune_id)
        if claimed is None:
            return
        record, cluster = claimed
        params = dict(record.params)
        work = Path(tempfile.mkdtemp(prefix="kairos-tune-"))
        try:
            async with self.database.transaction(write=False) as session:
                history = await _history(
                    session, cluster, limit=int(params["max_history"]), newest=True
                )
            (work / "history.swf").write_text(history.text)
            request = {
                "history": str(work / "history.swf"),
                "backfill": params["backfill"],
                "from_model": params.get("from_model"),
                "time_budget_s": float(params["time_budget_s"]),
                "workers": int(params["workers"]),
                "seed": int(params["seed"]),
                "window_length": int(params["window_length"]),
                "out_dir": str(work / "out"),
                "name": _policy_name_for(cluster.id),
                "version": str(record.pk),
                "command": f"POST /v1/clusters/{cluster.id}/tune ({tune_id})",
            }
            (work / "request.json").write_text(json.dumps(request))
            await self._update(tune_id, history_jobs=history.jobs)
            outcome = await self._child(tune_id, work, float(params["time_budget_s"]))
            if outcome.result is None:
                await self._finish_failed(
                    tune_id, outcome.code or "crash", outcome.message or "the tune failed"
                )
                return
            await self._finish(tune_id, tenant, outcome.result, bool(params["auto_promote"]))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _update(self, tune_id: str, **values: Any) -> bool:
        """Renew the lease of a running tune of this replica and set ``values``; False when the
        tune is no longer this replica's running one (failed as stale, cluster deleted)."""
        async with self.database.transaction(write=True) as session:
            record = (
                await session.execute(
                    select(TuneRecord).where(TuneRecord.id == tune_id).with_for_update()
                )
            ).scalar_one_or_none()
            if record is None or record.state != RUNNING or record.owner != self.owner:
                return False
            record.lease_until = epoch_now() + LEASE_S
            for name, value in values.items():
                setattr(record, name, value)
            await session.flush()
            return True

    async def _child(self, tune_id: str, work: Path, budget_s: float) -> _Outcome:
        """Run the procedure's program on ``work``'s request, renewing the lease and storing
        its progress every :data:`RENEW_S`; stopped past its budget and grace."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            WORKER_MODULE,
            str(work / "request.json"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=MAX_LINE_BYTES,
        )
        _CHILDREN.add(proc)
        assert proc.stderr is not None
        stderr_task = asyncio.create_task(proc.stderr.read())
        try:
            followed = await self._follow(tune_id, proc, budget_s)
            if isinstance(followed, _Outcome):
                return followed
            code = await proc.wait()
            stderr = (await stderr_task).decode(errors="replace")[-STDERR_TAIL:]
            if followed is not None and "result" in followed and code == 0:
                return _Outcome(result=followed["result"])
            if followed is not None and "error" in followed:
                error = followed["error"]
                return _Outcome(code=str(error["code"]), message=str(error["message"]))
            return _Outcome(
                code="crash",
                message=f"the tune process exited with status {code}: {stderr.strip()}",
            )
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(Exception):
                    await proc.wait()
            _CHILDREN.discard(proc)
            if not stderr_task.done():
                stderr_task.cancel()
            with contextlib.suppress(BaseException):
                await stderr_task

    async def _follow(
        self, tune_id: str, proc: asyncio.subprocess.Process, budget_s: float
    ) -> dict[str, Any] | _Outcome | None:
        """Read the child's lines until its output ends: its last result or error line (None:
        none came), or the outcome that stopped following it (over budget, tune taken away)."""
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget_s + OVERRUN_GRACE_S
        next_renew = loop.time() + RENEW_S
        latest: dict[str, Any] | None = None
        final: dict[str, Any] | None = None
        while True:
            timeout = max(0.0, min(deadline, next_renew) - loop.time())
            try:
                line: bytes | None = await asyncio.wait_for(proc.stdout.readline(), timeout)
            except TimeoutError:
                line = None
            now = loop.time()
            if now >= deadline:
                return _Outcome(
                    code="time_budget_exceeded",
                    message=f"the procedure ran past its time budget of {budget_s:g} s (and "
                    f"{OVERRUN_GRACE_S:g} s of grace) and was stopped",
                )
            if line:
                message = _parse_line(line)
                if "progress" in message:
                    latest = message["progress"]
                elif "result" in message or "error" in message:
                    final = message
            if line == b"" or now >= next_renew:
                next_renew = now + RENEW_S
                if not await self._update(tune_id, progress=latest):
                    return _Outcome(code="abandoned", message="the tune is no longer running")
            if line == b"":
                return final

    async def _finish_failed(self, tune_id: str, code: str, message: str) -> None:
        async with self.database.transaction(write=True) as session:
            record = (
                await session.execute(
                    select(TuneRecord).where(TuneRecord.id == tune_id).with_for_update()
                )
            ).scalar_one_or_none()
            if record is not None and record.state in ACTIVE:
                await _fail(session, record, code, message)

    async def _finish(
        self, tune_id: str, tenant: str, result: dict[str, Any], auto_promote: bool
    ) -> None:
        """Register the winner (a model) for the tenant, record the result and make it the
        cluster's shadow policy, in one transaction; then, with ``auto_promote``, try the
        guarded promotion."""
        model_dir = Path(result["model_dir"])
        prepared = None
        if result["kind"] == "model":
            try:
                prepared = await self.decisions.prepare_policy(
                    (model_dir / "policy.onnx").read_bytes(),
                    (model_dir / "card.json").read_bytes(),
                    tenant=tenant,
                )
            except (PolicyRefusedError, ModelExistsError, OSError) as exc:
                await self._finish_failed(
                    tune_id, "model_refused", f"the tuned model could not be registered: {exc}"
                )
                return
        stored = {
            "winner": result["winner"],
            "kind": result["kind"],
            "table": result["table"],
            "card": result["card"],
            "recommendation": None if prepared is not None else result["winner"],
        }
        promote = False
        async with self.database.transaction(write=True) as session:
            # the cluster's lock before the tune's row, as every writer of both takes them
            # (deleting a cluster deletes its tunes)
            where = (
                await session.execute(
                    select(TuneRecord.tenant, TuneRecord.cluster_id).where(TuneRecord.id == tune_id)
                )
            ).one_or_none()
            if where is None:
                return  # its cluster was deleted
            cluster = await ClusterRepository(session).lock(where[0], where[1])
            record = (
                await session.execute(
                    select(TuneRecord).where(TuneRecord.id == tune_id).with_for_update()
                )
            ).scalar_one_or_none()
            if record is None or record.state != RUNNING or record.owner != self.owner:
                return  # failed as stale meanwhile, or its cluster was deleted
            if cluster is None or cluster.pk != record.cluster_pk:
                return
            spec = (
                f"{prepared.name}@{prepared.version}" if prepared is not None else result["winner"]
            )
            record.state = SUCCEEDED
            record.result = stored
            record.policy = spec
            record.finished_at = epoch_now()
            record.lease_until = None
            record.progress = {"fraction": 1.0, "message": f"winner: {result['winner']}"}
            await _audit(
                session,
                record,
                TUNE_FINISH,
                {
                    "winner": result["winner"],
                    "kind": result["kind"],
                    "policy": spec,
                    "registered": prepared is not None,
                    "history_jobs": record.history_jobs,
                    "table": result["table"],
                },
            )
            if _same_policy(cluster.policy, spec):
                record.phase = "none"  # the recommendation is already the primary
            else:
                previous_shadow = cluster.shadow_policy
                await _retire(session, cluster.pk, "shadow", keep=record.id)
                cluster.shadow_policy = spec
                record.phase = "shadow"
                await _audit(
                    session,
                    record,
                    TUNE_SHADOW,
                    {"shadow_policy": spec, "previous_shadow_policy": previous_shadow},
                )
                promote = auto_promote
            await session.flush()
            if prepared is not None:
                await self.decisions.commit_policy(prepared, tenant=tenant)
        if promote:
            with contextlib.suppress(ConflictError):
                await promote_tune(
                    self.database,
                    tenant,
                    record.cluster_id,
                    tune_id,
                    TunePromote(force=False),
                    decisions=self.decisions,
                    by="guard",
                )


def _parse_line(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def _same_policy(a: str, b: str) -> bool:
    return split_policy(a) == split_policy(b)


async def _retire(session: AsyncSession, cluster_pk: int, phase: str, *, keep: str) -> None:
    stmt = select(TuneRecord).where(
        TuneRecord.cluster_pk == cluster_pk, TuneRecord.phase == phase, TuneRecord.id != keep
    )
    for other in (await session.execute(stmt)).scalars():
        other.phase = "retired"


# ================================================================ promotion


def _row(table: Sequence[Mapping[str, Any]], candidates: Iterable[str]) -> Mapping[str, Any] | None:
    wanted = list(candidates)
    for name in wanted:
        for row in table:
            if row["candidate"] == name:
                return row
    return None


def guard(
    record: TuneRecord, current_policy: str, decisions: DecisionService, tenant: str
) -> GuardRead:
    """The tune's winner against ``current_policy`` on the tune's validation windows: passed
    when the winner's mean bounded slowdown is strictly below the current policy's row."""
    assert record.result is not None
    table = record.result["table"]
    winner = _row(table, [record.result["winner"]])
    assert winner is not None
    candidate = float(winner["avg_bsld"])
    label = _policy_label(decisions, current_policy, tenant)
    current = None
    if label is not None:
        current = _row(table, [label, f"start:{label}", f"default:{label}"])
    if current is None:
        return GuardRead(
            passed=False,
            current_policy=current_policy,
            candidate_avg_bsld=candidate,
            reason=f"the current policy {current_policy!r} was not validated by this tune, so "
            "the guard cannot compare them (promote with force to override)",
        )
    value = float(current["avg_bsld"])
    passed = candidate < value
    windows = len(record.result["card"].get("tuning", {}).get("validation_window_starts", []))
    return GuardRead(
        passed=passed,
        current_policy=current_policy,
        current_avg_bsld=value,
        candidate_avg_bsld=candidate,
        reason=f"the tune's winner {record.result['winner']!r} has a mean validation bounded "
        f"slowdown of {candidate:.4f}, {'below' if passed else 'not below'} the current policy "
        f"{current_policy!r}'s {value:.4f} on the same {windows} validation windows",
    )


@dataclass(frozen=True, slots=True)
class _Refusal:
    code: str
    message: str


async def promote_tune(
    database: Database,
    tenant: str,
    cluster_id: str,
    tune_id: str,
    body: TunePromote,
    *,
    decisions: DecisionService,
    by: str = "operator",
) -> TunePromoteRead:
    """Make the tune's result the cluster's primary policy (``tune.promote``), or refuse with a
    409 that says why (``tune.promote_refused``, committed before the 409 is raised): the tune
    has not succeeded, its result is already the primary, its policy is gone, or, unless
    ``force``, the guard refuses."""
    refusal: _Refusal | None = None
    async with database.transaction(write=True) as session:
        cluster = await require_cluster(Ctx(session=session, tenant=tenant), cluster_id, lock=True)
        await fail_stale(session, tenant=tenant, now=epoch_now(), cluster_pk=cluster.pk)
        record = await _tune_of(session, cluster, tune_id)
        current = cluster.policy
        verdict: GuardRead | None = None
        if record.state in ACTIVE:
            refusal = _Refusal(
                "tune_not_finished",
                f"tune {tune_id!r} is {record.state}; promote it once it has succeeded",
            )
        elif record.state == FAILED or record.result is None or record.policy is None:
            refusal = _Refusal(
                "tune_failed",
                f"tune {tune_id!r} failed ({record.error_code}: {record.error}); it has no "
                "result to promote",
            )
        elif _same_policy(current, record.policy):
            refusal = _Refusal(
                "already_primary", f"{record.policy!r} is already the cluster's primary policy"
            )
        elif not decisions.knows(record.policy, tenant):
            refusal = _Refusal(
                "policy_missing", f"the tune's policy {record.policy!r} is no longer installed"
            )
        elif record.params.get("backfill") != cluster.backfill and not body.force:
            refusal = _Refusal(
                "backfill_mismatch",
                f"the tune validated with backfill {record.params.get('backfill')!r}; the "
                f"cluster now backfills {cluster.backfill!r} (promote with force to override)",
            )
        else:
            verdict = guard(record, current, decisions, tenant)
            if not verdict.passed and not body.force:
                refusal = _Refusal("validation_not_better", verdict.reason)
        if refusal is not None:
            await _audit(
                session,
                record,
                TUNE_PROMOTE_REFUSED,
                {
                    "code": refusal.code,
                    "reason": refusal.message,
                    "forced": body.force,
                    "by": by,
                    "current_policy": current,
                    "guard": None if verdict is None else verdict.model_dump(),
                },
            )
        else:
            assert verdict is not None
            assert record.policy is not None
            cluster.policy = record.policy
            if cluster.shadow_policy is not None and _same_policy(
                cluster.shadow_policy, record.policy
            ):
                cluster.shadow_policy = None
            await _retire(session, cluster.pk, "primary", keep=record.id)
            record.phase = "primary"
            await session.flush()
            await _audit(
                session,
                record,
                TUNE_PROMOTE,
                {
                    "policy": record.policy,
                    "previous_policy": current,
                    "forced": body.force and not verdict.passed,
                    "by": by,
                    "guard": verdict.model_dump(),
                },
            )
            read = TunePromoteRead(
                tune=_read(record),
                policy=record.policy,
                previous_policy=current,
                forced=body.force and not verdict.passed,
                guard=verdict,
            )
    if refusal is not None:
        raise ConflictError(
            f"promotion refused: {refusal.message}",
            code=refusal.code,
            details=[ErrorItem("path.tune_id", refusal.message, refusal.code)],
        )
    return read


async def sweep_on_start(database: Database) -> int:
    """Fail every tune whose lease expired (of any tenant): run when a replica's runner starts."""
    async with database.transaction(write=True) as session:
        return await fail_stale(session, tenant=None, now=epoch_now())
