"""Pure-ASGI middleware: metrics, early admission, body size limit, ``Idempotency-Key`` replay.

Order (outermost first): metrics -> error guard (``app.api.errors``) -> admission -> body limit
-> idempotency -> FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.deps import resolve_tenant
from app.api.errors import error_body
from app.db.engine import backend_unavailable
from app.db.session import Database
from app.observability import Metrics
from app.services import idempotency
from app.services.decision import DecisionGate
from app.services.errors import ServiceError
from app.services.idempotency import STALE_AFTER, StoredResponse

logger = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "idempotency-key"
MAX_IDEMPOTENCY_KEY_LEN = 255
#: ``scope["state"]`` flag: this ``POST /v1/decide`` could not claim its ``Idempotency-Key``
#: (database unavailable), so its decision must not be stored (ADR 0087).
UNSTORED_DECISION = "kairos_unstored_decision"


async def _send_json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


def route_template(scope: Scope) -> str:
    """``/v1/clusters/{cluster_id}`` for ``/v1/clusters/c1``; ``unmatched`` when no route matched.

    Routes of included routers know only their own part of the path (``/clusters/{cluster_id}``);
    the router prefix is the part of the request path before the route's own match.
    """
    early: str | None = scope.get("state", {}).get("early_route")
    if early is not None:  # answered by AdmissionMiddleware, before routing
        return early
    route = scope.get("route")
    fmt = getattr(route, "path_format", None)
    regex = getattr(route, "path_regex", None)
    if not isinstance(fmt, str) or regex is None:
        return "unmatched"
    path: str = scope.get("path", "")
    for i, ch in enumerate(path):
        if ch == "/" and regex.match(path[i:]):
            return path[:i] + fmt
    return fmt


class MetricsMiddleware:
    """Counts and times every request by its route *template* (``/v1/clusters/{cluster_id}``)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.observe_request(
                scope["method"], route_template(scope), status, time.perf_counter() - started
            )


#: the requests that decide (they enter the decision gate), and their route templates
_DECIDES = re.compile(r"/v1/(?:(decide)|clusters/[^/]+/(schedule))/?")
_DECIDE_ROUTES = {"decide": "/v1/decide", "schedule": "/v1/clusters/{cluster_id}/schedule"}


class AnsweredKeys:
    """The ``Idempotency-Key`` values of decision requests whose answers this process stored
    lately (bounded; the oldest go first).

    A full replica reads a refused request's key from the database only when the key is here: a
    retry of an answer this replica gave (a caller's retry usually comes back to the same
    replica). Every other refusal stays free of body reads and database work, which matters
    under overload: the SDK sends a key with every call.
    """

    def __init__(self, capacity: int = 16_384) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)


class AdmissionMiddleware:
    """429 ``overloaded`` for a decision request (``POST /v1/decide``,
    ``/v1/clusters/{id}/schedule``) before its body is parsed, when the decision gate would
    refuse it now (ADR 0024).

    Under overload most requests are refused; refused here, one costs no JSON parsing or
    validation, which would otherwise take the CPU the admitted decisions need. The gate checks
    again when the decision enters it. A refused request claims no ``Idempotency-Key`` (this
    runs before that middleware), so its retry runs as new. A request whose key holds an answer
    this replica gave (:class:`AnsweredKeys`) is answered from the key instead, as the
    idempotency middleware would (a replay, or its 409s): that costs the body, one read and no
    decision, and a caller retrying a decision whose answer it lost gets it even while the
    replica is full.
    """

    def __init__(self, app: ASGIApp, answered: AnsweredKeys | None = None) -> None:
        self.app = app
        self.answered = answered if answered is not None else AnsweredKeys()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        decides = (
            _DECIDES.fullmatch(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if decides is not None:
            # built in lifespan, after the middleware stack: read from the app's state
            gate: DecisionGate = scope["app"].state.decisions.gate
            refusal = gate.refusal()
            if refusal is not None:
                route = _DECIDE_ROUTES[decides.group(1) or decides.group(2)]
                scope.setdefault("state", {})["early_route"] = route
                if await _answer_from_key(scope, receive, send, self.answered):
                    return
                exc = gate.refuse(refusal)
                headers = [(k.lower().encode(), v.encode()) for k, v in (exc.headers or {}).items()]
                await _send_json(send, exc.status_code, error_body(exc.code, exc.message), headers)
                return
        await self.app(scope, receive, send)


async def _answer_from_key(
    scope: Scope, receive: Receive, send: Send, answered: AnsweredKeys
) -> bool:
    """Answer from the request's ``Idempotency-Key`` what it already holds, without claiming
    it (:func:`app.services.idempotency.lookup`); False when there is nothing to answer from:
    no valid key, or one this replica did not answer lately, no tenant, a body over the limit,
    an expired key, or no database."""
    key = _idempotency_key(scope)
    if key is None or key not in answered:
        return False
    app = scope["app"]
    try:
        tenant = resolve_tenant(Request(scope), _bearer_token(scope))
    except ServiceError:
        return False
    try:
        body = await _read_body(scope, receive, app.state.settings.MAX_BODY_BYTES)
    except (_BodyTooLargeError, _BadContentLengthError):
        return False
    if body is None:
        return False
    ttl_s: int = app.state.settings.IDEMPOTENCY_TTL_S
    try:
        stored = await idempotency.lookup(
            app.state.database,
            tenant=tenant,
            key=key,
            ttl=timedelta(seconds=ttl_s) if ttl_s > 0 else None,
        )
    except Exception:  # the 429 is still a safe answer
        logger.warning("could not read Idempotency-Key %r of a refused request", key, exc_info=True)
        return False
    if stored is None:
        return False
    await _answer_stored(
        send, stored, idempotency.request_hash(scope["method"], scope["path"], body)
    )
    return True


class _BodyTooLargeError(Exception):
    pass


class _BadContentLengthError(Exception):
    pass


async def _read_body(scope: Scope, receive: Receive, max_bytes: int) -> bytes | None:
    """The whole body, or None when the client went away.

    Over ``max_bytes``, by ``Content-Length`` up front or by the bytes streamed (chunked uploads,
    lying headers): :class:`_BodyTooLargeError`. An unreadable ``Content-Length``:
    :class:`_BadContentLengthError`."""
    declared = dict(scope["headers"]).get(b"content-length")
    if declared is not None:
        try:
            too_big = int(declared) > max_bytes
        except ValueError:
            raise _BadContentLengthError from None
        if too_big:
            raise _BodyTooLargeError
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise _BodyTooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class BodyLimitMiddleware:
    """413 for bodies over ``max_bytes``: by ``Content-Length`` up front, and by counting the
    streamed bytes (chunked uploads, lying headers). The body is buffered, then replayed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(scope, receive, self.max_bytes)
        except _BadContentLengthError:
            await _send_json(send, 400, error_body("bad_request", "invalid Content-Length"))
            return
        except _BodyTooLargeError:
            await self._too_large(send)
            return
        if body is None:
            return
        scope.setdefault("state", {})["raw_body"] = body
        await self.app(scope, _replay(body), send)

    async def _too_large(self, send: Send) -> None:
        await _send_json(
            send,
            413,
            error_body(
                "payload_too_large",
                f"the request body exceeds {self.max_bytes} bytes",
                [{"field": "body", "message": f"limit is {self.max_bytes} bytes", "type": "size"}],
            ),
        )


#: Seconds between background attempts to record an unsettled key's outcome.
SETTLE_RETRY_S = 1.0

Settle = Callable[[], Awaitable[None]]


class UnsettledKeys:
    """``Idempotency-Key`` claims of this process whose outcome could not be recorded (the
    database was unavailable): the response to store, or the claim to drop. Each is retried in
    the background every :data:`SETTLE_RETRY_S` until it succeeds or its deadline passes (half
    of :data:`~app.services.idempotency.STALE_AFTER` after the claim: until then no other
    request can take the in-progress row, so recording the outcome cannot undo another
    request's claim). A new request with such a key first records the outcome itself
    (:meth:`settle`), so it gets the stored answer or runs anew instead of a 409
    ``idempotency_key_in_progress``."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], tuple[asyncio.Task[None], Settle, float]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, tenant: str, key: str, settle: Settle, deadline: float) -> None:
        """Retry ``settle`` in the background until ``deadline`` (``time.monotonic()``)."""
        task = asyncio.create_task(
            self._retry(tenant, key, settle, deadline), name=f"kairos-settle-key-{key}"
        )
        self._pending[(tenant, key)] = (task, settle, deadline)

    async def settle(self, tenant: str, key: str) -> None:
        """Record the outcome of an unsettled claim of (tenant, key) now, if there is one.
        Raises what the database raised (the key stays unsettled)."""
        entry = self._pending.pop((tenant, key), None)
        if entry is None:
            return
        task, settle, deadline = entry
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if time.monotonic() >= deadline:
            return
        try:
            await settle()
        except Exception:
            self.add(tenant, key, settle, deadline)
            raise

    async def _retry(self, tenant: str, key: str, settle: Settle, deadline: float) -> None:
        while time.monotonic() < deadline:
            await asyncio.sleep(SETTLE_RETRY_S)
            try:
                await settle()
            except Exception:  # still unavailable: next time
                continue
            break
        else:
            logger.warning("idempotency key %r stays in progress until it is stale", key)
        entry = self._pending.get((tenant, key))
        if entry is not None and entry[0] is asyncio.current_task():
            del self._pending[(tenant, key)]


class IdempotencyMiddleware:
    """Every ``POST`` under ``/v1`` honours ``Idempotency-Key``.

    The first request with a key claims it, runs, and its response (status < 500, except 401/429)
    is stored under (tenant, key) with a hash of method, path and body *before* it is sent. The
    same key again with the same request replays the stored response (``Idempotent-Replayed:
    true``); with a different request it is 409 ``idempotency_key_reused``; while the first is
    still running it is 409 ``idempotency_key_in_progress`` with ``Retry-After``. See
    docs/adr/0021-idempotency-keys.md.
    """

    def __init__(self, app: ASGIApp, answered: AnsweredKeys | None = None) -> None:
        self.app = app
        #: the keys of decision requests whose answers were stored (read by admission)
        self.answered = answered if answered is not None else AnsweredKeys()
        self.unsettled = UnsettledKeys()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        key_raw = dict(scope["headers"]).get(IDEMPOTENCY_HEADER.encode())
        if key_raw is None or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        key = _valid_key(key_raw)
        if key is None:
            await _send_json(
                send,
                422,
                error_body(
                    "validation_error",
                    "invalid Idempotency-Key",
                    [
                        {
                            "field": "header.Idempotency-Key",
                            "message": "1-255 characters",
                            "type": "value_error",
                        }
                    ],
                ),
            )
            return
        request = Request(scope)
        try:
            tenant = resolve_tenant(request, _bearer_token(scope))
        except ServiceError:
            await self.app(scope, receive, send)  # the route answers 401
            return
        body: bytes = scope.get("state", {}).get("raw_body", b"")
        digest = idempotency.request_hash(scope["method"], scope["path"], body)
        database: Database = request.app.state.database
        ttl_s: int = request.app.state.settings.IDEMPOTENCY_TTL_S
        # until then the claim's in-progress row is this request's alone (see UnsettledKeys)
        settle_by = (
            time.monotonic()
            + min(STALE_AFTER.total_seconds(), ttl_s if ttl_s > 0 else float("inf")) / 2
        )
        try:
            await self.unsettled.settle(tenant, key)
            stored = await idempotency.claim(
                database,
                tenant=tenant,
                key=key,
                method=scope["method"],
                path=scope["path"],
                digest=digest,
                ttl=timedelta(seconds=ttl_s) if ttl_s > 0 else None,
            )
        except Exception as exc:
            decides = _DECIDES.fullmatch(scope["path"])
            if not (backend_unavailable(exc) and decides is not None and decides.group(1)):
                raise  # the error guard answers 503
            # a stateless decision needs no database: decided, answered, not stored (ADR 0087)
            scope.setdefault("state", {})[UNSTORED_DECISION] = True
            await self.app(scope, receive, send)
            return
        if stored is not None:
            await _answer_stored(send, stored, digest)
            return
        await self._run_and_store(scope, receive, send, database, tenant, key, settle_by)

    async def _run_and_store(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        database: Database,
        tenant: str,
        key: str,
        settle_by: float,
    ) -> None:
        """Run the request holding its response back until the response is stored."""
        held: list[Message] = []
        status = 500
        content_type = ""

        async def hold(message: Message) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", []):
                    if name.lower() == b"content-type":
                        content_type = value.decode("latin-1")
            held.append(message)

        async def release() -> None:
            await idempotency.release(database, tenant=tenant, key=key)

        try:
            await self.app(scope, receive, hold)
        except BaseException:
            try:
                await release()
            except Exception:  # the request's own error is the one to answer
                logger.warning("could not release idempotency key %r", key, exc_info=True)
                self.unsettled.add(tenant, key, release, settle_by)
            raise
        body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")

        async def complete() -> None:
            await idempotency.complete(
                database,
                tenant=tenant,
                key=key,
                status_code=status,
                content_type=content_type,
                body=body,
            )

        settle = complete if idempotency.should_store(status) else release
        try:
            await settle()
            if settle is complete and _DECIDES.fullmatch(scope["path"]):
                self.answered.add(key)
        except Exception:  # the request's own work committed; answer it regardless
            logger.exception("could not record the response for idempotency key %r", key)
            self.unsettled.add(tenant, key, settle, settle_by)
        for message in held:
            await send(message)


async def _answer_stored(send: Send, stored: StoredResponse, digest: str) -> None:
    """What a key that holds ``stored`` answers a request of hash ``digest``: 409 when the
    key was used with another request or its first request still runs, else the replay."""
    if stored.request_hash != digest:
        await _send_json(
            send,
            409,
            error_body(
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request",
                [
                    {
                        "field": "header.Idempotency-Key",
                        "message": "reused with another body",
                        "type": "conflict",
                    }
                ],
            ),
        )
        return
    if stored.in_progress:
        await _send_json(
            send,
            409,
            error_body(
                "idempotency_key_in_progress",
                "a request with this Idempotency-Key is still running; retry shortly",
            ),
            headers=[(b"retry-after", b"1")],
        )
        return
    body = stored.body
    await send(
        {
            "type": "http.response.start",
            "status": stored.status_code,
            "headers": [
                (b"content-type", stored.content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"idempotent-replayed", b"true"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _idempotency_key(scope: Scope) -> str | None:
    """The request's ``Idempotency-Key``, or None when it has none or an invalid one."""
    raw = dict(scope["headers"]).get(IDEMPOTENCY_HEADER.encode())
    return None if raw is None else _valid_key(raw)


def _valid_key(raw: bytes) -> str | None:
    """An ``Idempotency-Key`` header value as a key: 1-255 characters once stripped."""
    key = raw.decode("latin-1").strip()
    return key if key and len(key) <= MAX_IDEMPOTENCY_KEY_LEN else None


def _bearer_token(scope: Scope) -> str | None:
    raw = dict(scope["headers"]).get(b"authorization")
    if raw is None:
        return None
    scheme, _, token = raw.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
