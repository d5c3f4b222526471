"""Exceptions raised by the SDK: one class per status family, all under :class:`KairosError`.

Every error body the service sends is ``{"error": {"code", "message", "details"}}``;
:class:`APIStatusError` exposes those three fields as attributes.
"""

from __future__ import annotations

from typing import Any

import httpx

from kairos_client._types import as_array, as_object

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "InternalServerError",
    "KairosError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "ServiceUnavailableError",
    "UnprocessableEntityError",
    "ValidationError",
]


class KairosError(Exception):
    """Base of every exception this SDK raises."""


class APIError(KairosError):
    """Something went wrong talking to the API; ``request`` is the request that failed."""

    message: str
    request: httpx.Request

    def __init__(self, message: str, *, request: httpx.Request) -> None:
        super().__init__(message)
        self.message = message
        self.request = request


class APIConnectionError(APIError):
    """The request never got a response (DNS, refused connection, reset, protocol error)."""

    def __init__(self, *, request: httpx.Request, message: str = "Connection error.") -> None:
        super().__init__(message, request=request)


class APITimeoutError(APIConnectionError):
    """The request timed out (connect, read, write or pool timeout)."""

    def __init__(self, *, request: httpx.Request) -> None:
        super().__init__(request=request, message="Request timed out.")


class APIResponseValidationError(APIError):
    """The service answered 2xx but the body does not match the SDK's model of it."""

    response: httpx.Response
    status_code: int

    def __init__(self, *, response: httpx.Response, message: str) -> None:
        super().__init__(message, request=response.request)
        self.response = response
        self.status_code = response.status_code


class APIStatusError(APIError):
    """The service answered with a 4xx/5xx status.

    ``code``, ``message`` and ``details`` come from the service's error body; ``body`` is the
    whole decoded body (or the raw text when it was not JSON).
    """

    response: httpx.Response
    status_code: int
    code: str | None
    details: list[Any]
    body: object

    def __init__(
        self,
        message: str,
        *,
        response: httpx.Response,
        body: object,
        code: str | None = None,
        details: list[Any] | None = None,
    ) -> None:
        super().__init__(message, request=response.request)
        self.response = response
        self.status_code = response.status_code
        self.body = body
        self.code = code
        self.details = details if details is not None else []

    @property
    def request_id(self) -> str | None:
        value: str | None = self.response.headers.get("x-request-id")
        return value

    def __str__(self) -> str:
        code = f" {self.code}" if self.code else ""
        return f"Error {self.status_code}{code}: {self.message}"


class BadRequestError(APIStatusError):
    """400: the body was not valid JSON or the request was malformed."""


class AuthenticationError(APIStatusError):
    """401: the API key is missing or not valid."""


class PermissionDeniedError(APIStatusError):
    """403: the API key is valid but not allowed to do this."""


class NotFoundError(APIStatusError):
    """404: unknown cluster, node, job, decision or policy (or one owned by another tenant)."""


class ConflictError(APIStatusError):
    """409: the same id with a different body, or a state transition that is not allowed."""


class PayloadTooLargeError(APIStatusError):
    """413: the request body exceeds the service's limit."""


class ValidationError(APIStatusError):
    """422: the request was well-formed JSON but failed validation; ``details`` names each field."""


#: Alias in the naming of other SDKs (openai-python).
UnprocessableEntityError = ValidationError


class RateLimitError(APIStatusError):
    """429: too many requests; retried automatically, honouring ``Retry-After``."""


class InternalServerError(APIStatusError):
    """5xx: the service failed; retried automatically."""


class ServiceUnavailableError(InternalServerError):
    """503: a backend the service needs is down and there is no degraded path."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def status_error_class(status_code: int) -> type[APIStatusError]:
    """The exception class for an HTTP error status."""
    if status_code in _STATUS_ERRORS:
        return _STATUS_ERRORS[status_code]
    if status_code >= 500:
        return InternalServerError
    return APIStatusError


def make_status_error(response: httpx.Response) -> APIStatusError:
    """Build the typed exception for an error response, reading ``{"error": {...}}`` if present."""
    try:
        body: object = response.json()
    except ValueError:
        body = response.text
    code: str | None = None
    details: list[Any] = []
    message = response.reason_phrase or f"HTTP {response.status_code}"
    obj = as_object(body)
    if obj is not None:
        error = as_object(obj.get("error"))
        if error is not None:
            raw_code = error.get("code")
            code = raw_code if isinstance(raw_code, str) else None
            raw_message = error.get("message")
            if isinstance(raw_message, str) and raw_message:
                message = raw_message
            details = as_array(error.get("details")) or []
        elif isinstance(obj.get("detail"), str):  # a framework-default error body
            message = str(obj["detail"])
    elif isinstance(body, str) and body.strip():
        message = body.strip()[:500]
    cls = status_error_class(response.status_code)
    return cls(message, response=response, body=body, code=code, details=details)
