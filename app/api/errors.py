"""One error shape for every error: ``{"error": {"code", "message", "details"}}``.

The service raises :class:`~app.services.errors.ServiceError` subclasses; FastAPI's validation
errors, Starlette's HTTP errors and anything unexpected are mapped here too.

Anything else an app or middleware raises before its response started is answered by
:class:`ErrorGuardMiddleware` with a complete response, so the keep-alive connection stays
usable: 503 ``backend_unavailable`` with ``Retry-After`` when the database cannot be reached
(:func:`app.db.engine.backend_unavailable`), else a logged 500 ``internal_error``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db.engine import backend_unavailable
from app.schemas.common import PATTERN_WORDS, ErrorResponse
from app.services.errors import BackendUnavailableError, ServiceError

logger = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    503: "unavailable",
}

#: ``responses=`` entry for the routers: every operation documents the error shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": desc}
    for code, desc in (
        (400, "Malformed JSON"),
        (401, "Missing or unknown API key"),
        (404, "Unknown resource (or another tenant's)"),
        (409, "Conflict: same id with another body, transition not allowed, Idempotency-Key reuse"),
        (413, "Request body too large"),
        (422, "Validation error; details name each bad field"),
        (
            503,
            "`backend_unavailable`: the database cannot be reached or cannot serve now. Retry "
            "after `Retry-After` seconds (a retry of a write with the same id or "
            "`Idempotency-Key` cannot apply it twice).",
        ),
    )
}


#: ``responses=`` of an operation whose success is not JSON (``response_class`` sets the media type
#: of every ``model`` response): the same errors, documented as the JSON they are.
JSON_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {
        "description": entry["description"],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
    }
    for code, entry in ERROR_RESPONSES.items()
}


#: ``responses=`` entry of the operations that decide: refused when the replica is at its limit
OVERLOADED_RESPONSE: dict[int | str, dict[str, Any]] = {
    429: {
        "model": ErrorResponse,
        "description": (
            "`overloaded`: this replica already works on KAIROS_MAX_DECISIONS_IN_FLIGHT "
            "decisions; nothing was decided or changed. Retry after `Retry-After` seconds."
        ),
    }
}


def error_body(code: str, message: str, details: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": list(details)}}


def error_response(
    status: int,
    code: str,
    message: str,
    details: Sequence[dict[str, Any]] = (),
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, headers=headers)


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


async def _service_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    details = [{"field": d.field, "message": d.message, "type": d.type} for d in exc.details]
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, exc.code, exc.message, details, headers)


def _position(doc: object, pos: object) -> str:
    """``line L, column C`` of character offset ``pos`` in ``doc`` (both 1-based)."""
    if isinstance(doc, bytes):
        doc = doc.decode("utf-8", "replace")
    if not isinstance(doc, str) or not isinstance(pos, int) or isinstance(pos, bool):
        return "an unknown position"
    pos = max(0, min(pos, len(doc)))
    line = doc.count("\n", 0, pos) + 1
    column = pos - (doc.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


#: Pydantic's error types for "this is not an object" (model and dict fields).
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "model_type"})
#: Pydantic's error types for a value of the wrong JSON type, with what the field wants.
_WANTS = {
    "float_type": "a JSON number",
    "int_type": "a JSON integer",
    "int_from_float": "a JSON integer",
    "bool_type": "true or false",
    "string_type": "a JSON string",
    "list_type": "a JSON array",
}


def _message(error: Mapping[str, Any], content_type: str | None) -> str:
    """The message of one validation error: the problem and what is accepted instead."""
    kind = error.get("type")
    loc = tuple(error.get("loc", ()))
    ctx = error.get("ctx") or {}
    if kind in _NOT_AN_OBJECT and loc == ("body",):
        if not _is_json(content_type):
            sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
            return (
                f"the request body must be a JSON object sent with Content-Type: "
                f"application/json (this request had {sent})"
            )
        return "the request body must be a JSON object"
    if kind == "missing" and loc == ("body",):
        return "a request body is required: a JSON object sent with Content-Type: application/json"
    if kind == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(str(ctx.get("pattern", "")))
        if words is not None:
            return f"must be {words}"
    if kind in _WANTS:
        got = type(error.get("input")).__name__
        shown = {
            "str": "a string",
            "NoneType": "null",
            "bool": "a boolean",
            "dict": "an object",
            "list": "an array",
            "float": "a fractional number",
            "int": "an integer",
        }
        return f"must be {_WANTS[str(kind)]}, not {shown.get(got, got)}"
    return str(error.get("msg", ""))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    invalid = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if invalid is not None:
        ctx = invalid.get("ctx") or {}
        loc = tuple(invalid.get("loc", ()))
        where = _position(exc.body, loc[1] if len(loc) > 1 else None)
        reason = str(ctx.get("error", "invalid JSON"))
        return error_response(
            400,
            "malformed_json",
            f"the request body is not valid JSON: {reason} at {where}",
            [{"field": "body", "message": f"{reason} at {where}", "type": "json_invalid"}],
        )
    content_type = request.headers.get("content-type")
    details = [
        {
            "field": _loc(e.get("loc", ())),
            "message": _message(e, content_type),
            "type": e.get("type"),
        }
        for e in errors
    ]
    fields = ", ".join(d["field"] for d in details[:5])
    return error_response(422, "validation_error", f"invalid request: {fields}", details)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 404 and message == "Not Found":
        path = request.url.path
        message = "no such route"
        if len(path) > 1 and path.endswith("/"):
            message = f"no such route: paths have no trailing slash; use {path.rstrip('/') or '/'}"
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, code, message, headers=headers)


def _backend_unavailable_response(exc: BackendUnavailableError) -> JSONResponse:
    return error_response(exc.status_code, exc.code, exc.message, headers=exc.headers)


def unexpected_response(method: str, path: str, exc: Exception) -> JSONResponse:
    """The answer to an exception no handler claimed: 503 when it says the database cannot be
    reached, else 500 (logged with its traceback)."""
    if backend_unavailable(exc):
        logger.warning("database unavailable on %s %s: %r", method, path, exc)
        return _backend_unavailable_response(BackendUnavailableError())
    logger.error("unhandled error on %s %s", method, path, exc_info=exc)
    return error_response(500, "internal_error", "an internal error occurred; it has been logged")


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's last resort, which re-raises afterwards (the server then drops the
    connection): the response says ``Connection: close``."""
    response = unexpected_response(request.method, request.url.path, exc)
    response.headers["Connection"] = "close"
    return response


class ErrorGuardMiddleware:
    """Answers an exception raised before the response started with
    :func:`unexpected_response` and does not re-raise it: the response is complete and the
    connection stays open for the client's next request. An exception after the response
    started propagates (the server closes the connection: the response is cut)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise
            response = unexpected_response(scope["method"], scope["path"], exc)
            await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
