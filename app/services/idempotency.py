"""``Idempotency-Key`` bookkeeping (ADR 0021), used by the API middleware.

1. :func:`claim` inserts an in-progress row for (tenant, key) in its own transaction. If the row
   exists, the caller gets it back instead: a finished response to replay (or a 409 when the
   request differs), or an in-progress marker (another request with this key is running: 409).
2. The request runs; its response is held back.
3. :func:`complete` stores the response, and only then is it sent, so a retry that follows the
   answer always finds it. Responses that must not be replayed (5xx, 401, 429) are
   :func:`release`\\ d instead, so the retry runs again.

A row left in progress by a crashed process is taken over after :data:`STALE_AFTER`.  A key lives
for ``KAIROS_IDEMPOTENCY_TTL_S`` (24 h by default): after that a request with the same key runs as
new, and :class:`IdempotencyJanitor` purges expired rows in batches (every replica may run one:
a purge is idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.db.orm import IdempotencyKeyRecord
from app.db.repositories.idempotency_repository import IN_PROGRESS, IdempotencyRepository
from app.db.session import Database
from app.kernel.clock import utc_now

#: Statuses never stored: a retry must run again (auth fixed, rate limit passed, server error).
NOT_STORED = frozenset({401, 429})
#: An in-progress claim older than this belongs to a request that died.
STALE_AFTER = timedelta(seconds=60)
#: Rows deleted per purge transaction (short transactions: no long lock on the table).
PURGE_BATCH = 1000

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredResponse:
    request_hash: str
    status_code: int
    content_type: str
    body: bytes

    @property
    def in_progress(self) -> bool:
        return self.status_code == IN_PROGRESS


def request_hash(method: str, path: str, body: bytes) -> str:
    return hashlib.sha256(b"\n".join([method.encode(), path.encode(), body])).hexdigest()


def should_store(status_code: int) -> bool:
    return status_code < 500 and status_code not in NOT_STORED


def _stored(record: IdempotencyKeyRecord) -> StoredResponse:
    return StoredResponse(
        request_hash=record.request_hash,
        status_code=record.status_code,
        content_type=record.content_type,
        body=record.response_body.encode(),
    )


def _busy(digest: str) -> StoredResponse:
    """What a claim answers when another request took the key between two of its statements:
    in progress (409, retry later), never "this request owns it"."""
    return StoredResponse(request_hash=digest, status_code=IN_PROGRESS, content_type="", body=b"")


async def claim(
    database: Database,
    *,
    tenant: str,
    key: str,
    method: str,
    path: str,
    digest: str,
    ttl: timedelta | None = None,
) -> StoredResponse | None:
    """None when this request now owns the key; else what the key already holds.

    With ``ttl``, a finished response stored longer ago than ``ttl`` has expired: this request
    takes the key over and runs as new (whatever its body)."""
    now = utc_now()
    async with database.transaction(write=True) as session:
        repo = IdempotencyRepository(session)
        record = IdempotencyKeyRecord(
            tenant=tenant,
            key=key,
            method=method,
            path=path,
            request_hash=digest,
            status_code=IN_PROGRESS,
            response_body="",
            content_type="",
            created_at=now,
        )
        if await repo.add(record):
            return None
        existing = await repo.get(tenant, key)
        if existing is None:  # released between our insert and read: take it
            return None if await repo.add(record) else _busy(digest)
        if existing.status_code == IN_PROGRESS:
            if existing.request_hash == digest and await repo.restart(
                tenant, key, stale_before=now - STALE_AFTER, now=now
            ):
                return None
            return _stored(existing)
        if ttl is not None and await repo.renew(record, expired_before=now - ttl):
            return None
        if ttl is not None:  # not expired, or renewed by a concurrent request: read it again
            current = await repo.get(tenant, key, fresh=True)
            if current is None:  # purged meanwhile: take it
                return None if await repo.add(record) else _busy(digest)
            existing = current
        return _stored(existing)


async def lookup(
    database: Database, *, tenant: str, key: str, ttl: timedelta | None = None
) -> StoredResponse | None:
    """What (tenant, key) holds now, without claiming it: None when the key is free or its
    response has expired. For a replica that must not start work (a full decision gate, ADR
    0077) but can still answer from the key."""
    cutoff = None if ttl is None else utc_now() - ttl
    async with database.transaction(write=False) as session:
        record = await IdempotencyRepository(session).get_unexpired(
            tenant, key, expired_before=cutoff
        )
        return None if record is None else _stored(record)


async def purge_expired(
    database: Database, *, ttl: timedelta, now: datetime | None = None, batch: int = PURGE_BATCH
) -> int:
    """Delete every key row created more than ``ttl`` before ``now``, ``batch`` rows per
    transaction; returns how many went."""
    cutoff = (now or utc_now()) - ttl
    total = 0
    while True:
        async with database.transaction(write=True) as session:
            gone = await IdempotencyRepository(session).purge(created_before=cutoff, limit=batch)
        total += gone
        if gone < batch:
            return total


class IdempotencyJanitor:
    """Purges expired keys every ``interval_s`` in the background of a serving process."""

    def __init__(self, database: Database, *, ttl: timedelta, interval_s: float) -> None:
        self.database = database
        self.ttl = ttl
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kairos-idempotency-janitor")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                gone = await purge_expired(self.database, ttl=self.ttl)
            except Exception:  # the database may be briefly away: try again next time
                logger.exception("could not purge expired idempotency keys")
                continue
            if gone:
                logger.info("purged %d expired idempotency keys", gone)


async def complete(
    database: Database, *, tenant: str, key: str, status_code: int, content_type: str, body: bytes
) -> None:
    async with database.transaction(write=True) as session:
        await IdempotencyRepository(session).complete(
            tenant,
            key,
            status_code=status_code,
            content_type=content_type or "application/json",
            body=body.decode("utf-8", errors="replace"),
        )


async def release(database: Database, *, tenant: str, key: str) -> None:
    async with database.transaction(write=True) as session:
        await IdempotencyRepository(session).remove(tenant, key)
