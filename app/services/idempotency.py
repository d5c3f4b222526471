"""Stored responses for ``Idempotency-Key`` replays (ADR 0021). Used by the API middleware."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from app.db.orm import IdempotencyKeyRecord
from app.db.repositories.idempotency_repository import IdempotencyRepository
from app.db.session import Database

#: Statuses never stored: a retry must run again (auth fixed, rate limit passed, server error).
NOT_STORED = frozenset({401, 429})


@dataclass(frozen=True, slots=True)
class StoredResponse:
    request_hash: str
    status_code: int
    content_type: str
    body: bytes


def request_hash(method: str, path: str, body: bytes) -> str:
    return hashlib.sha256(b"\n".join([method.encode(), path.encode(), body])).hexdigest()


def should_store(status_code: int) -> bool:
    return status_code < 500 and status_code not in NOT_STORED


async def find(database: Database, tenant: str, key: str) -> StoredResponse | None:
    async with database.transaction(write=False) as session:
        record = await IdempotencyRepository(session).get(tenant, key)
        if record is None:
            return None
        return StoredResponse(
            request_hash=record.request_hash,
            status_code=record.status_code,
            content_type=record.content_type,
            body=record.response_body.encode(),
        )


async def store(
    database: Database,
    *,
    tenant: str,
    key: str,
    method: str,
    path: str,
    digest: str,
    response: StoredResponse,
) -> bool:
    """False when a concurrent request stored the same key first (its response stands)."""
    record = IdempotencyKeyRecord(
        tenant=tenant,
        key=key,
        method=method,
        path=path,
        request_hash=digest,
        status_code=response.status_code,
        response_body=response.body.decode("utf-8", errors="replace"),
        content_type=response.content_type or "application/json",
    )
    async with database.transaction(write=True) as session:
        return await IdempotencyRepository(session).add(record)
