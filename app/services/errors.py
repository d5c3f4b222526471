"""The one error family of the service. ``app.api.errors`` turns each into the contract's shape.

Services raise these for expected outcomes a client can cause (unknown id, conflict, invalid
reference); anything else is a bug and becomes a logged 500.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ErrorItem:
    field: str | None
    message: str
    type: str | None = None


class ServiceError(Exception):
    status_code: int = 500
    code: str = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Sequence[ErrorItem] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = tuple(details)
        self.headers = headers


class BadRequestError(ServiceError):
    status_code = 400
    code = "bad_request"


class UnauthorizedError(ServiceError):
    status_code = 401
    code = "unauthorized"


class NotFoundError(ServiceError):
    status_code = 404
    code = "not_found"


class ConflictError(ServiceError):
    status_code = 409
    code = "conflict"


class PayloadTooLargeError(ServiceError):
    status_code = 413
    code = "payload_too_large"


class UnprocessableError(ServiceError):
    status_code = 422
    code = "validation_error"


class TooManyRequestsError(ServiceError):
    status_code = 429
    code = "rate_limited"


class UnavailableError(ServiceError):
    status_code = 503
    code = "unavailable"


#: ``Retry-After`` (seconds) of a 503 for a backend that is down: about a database restart.
BACKEND_RETRY_AFTER_S = 2


class BackendUnavailableError(UnavailableError):
    """A backend the request needs (the database) cannot be reached or cannot serve now."""

    code = "backend_unavailable"

    def __init__(self, message: str = "the database is unavailable; retry later") -> None:
        super().__init__(message, headers={"Retry-After": str(BACKEND_RETRY_AFTER_S)})


def not_found(kind: str, ident: str) -> NotFoundError:
    return NotFoundError(f"{kind} {ident!r} does not exist", code=f"{kind}_not_found")
