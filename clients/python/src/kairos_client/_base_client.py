"""The machinery shared by :class:`~kairos_client.Client` and :class:`~kairos_client.AsyncClient`.

Everything that does not block (configuration, building requests, deciding whether and how long to
wait before a retry, mapping error responses to exceptions, parsing bodies) lives in
:class:`BaseClient`; the two subclasses only differ in how they send and sleep.
"""

from __future__ import annotations

import email.utils
import os
import platform
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import anyio
import httpx
import pydantic

from kairos_client._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    make_status_error,
)
from kairos_client._models import BaseModel
from kairos_client._pagination import AsyncCursorPage, SyncCursorPage
from kairos_client._types import (
    NOT_GIVEN,
    Headers,
    HTTPMethod,
    NotGiven,
    Query,
    Timeout,
    as_array,
    as_object,
)
from kairos_client._version import __version__

ModelT = TypeVar("ModelT", bound=BaseModel)
_HttpxClientT = TypeVar("_HttpxClientT", httpx.Client, httpx.AsyncClient)

DEFAULT_BASE_URL: Final = "http://127.0.0.1:8000"
#: A late scheduling decision is useless: fail fast and let the retry policy try again.
DEFAULT_TIMEOUT: Final = httpx.Timeout(5.0, connect=2.0)
DEFAULT_MAX_RETRIES: Final = 2
INITIAL_RETRY_DELAY_S: Final = 0.5
MAX_RETRY_DELAY_S: Final = 8.0
#: A ``Retry-After`` longer than this is not waited for; normal backoff is used instead.
MAX_RETRY_AFTER_S: Final = 60.0
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
#: 409 code the service sends while the first request with the same key is still running: the
#: one conflict a retry resolves (it then gets the stored answer).
IN_PROGRESS_CODE: Final = "idempotency_key_in_progress"

_RETRYABLE_STATUS: Final = frozenset({408, 429})
_RETRYABLE_TRANSPORT_ERRORS: Final = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """One logical API call (which may take several HTTP attempts)."""

    method: HTTPMethod
    path: str
    params: Query | None = None
    json: object | None = None
    files: Mapping[str, tuple[str, bytes, str]] | None = None
    timeout: Timeout | NotGiven = NOT_GIVEN
    idempotency_key: str | NotGiven = NOT_GIVEN
    headers: Headers = field(default_factory=dict[str, str])


def parse_retry_after(headers: httpx.Headers, *, now: float | None = None) -> float | None:
    """Seconds to wait according to ``Retry-After-Ms`` / ``Retry-After`` (seconds or HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return float(raw_ms) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _is_retryable_status(status_code: int) -> bool:
    return status_code in _RETRYABLE_STATUS or status_code >= 500


def _error_code(response: httpx.Response) -> str | None:
    try:
        body = as_object(response.json())
    except ValueError:
        return None
    error = as_object(body.get("error")) if body is not None else None
    code = error.get("code") if error is not None else None
    return code if isinstance(code, str) else None


def _platform_user_agent() -> str:
    return f"kairos-client/{__version__} python/{platform.python_version()}"


class BaseClient(Generic[_HttpxClientT]):
    """Configuration and the pure parts of the request/retry cycle."""

    api_key: str | None
    base_url: httpx.URL
    timeout: Timeout
    max_retries: int
    _client: _HttpxClientT

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: Timeout | NotGiven,
        max_retries: int,
        default_headers: Headers | None,
        jitter_seed: int | None,
        initial_retry_delay_s: float,
        max_retry_delay_s: float,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.api_key = api_key if api_key is not None else os.environ.get("KAIROS_API_KEY")
        if base_url is None:
            base_url = os.environ.get("KAIROS_BASE_URL") or DEFAULT_BASE_URL
        url = httpx.URL(str(base_url))
        # Make relative joins keep the whole base path ("http://h/prefix" + "v1/x").
        self.base_url = (
            url if url.raw_path.endswith(b"/") else url.copy_with(raw_path=url.raw_path + b"/")
        )
        self.timeout = DEFAULT_TIMEOUT if isinstance(timeout, NotGiven) else timeout
        self.max_retries = max_retries
        self._default_headers = dict(default_headers or {})
        self._jitter_seed = jitter_seed
        # ``None`` seeds from OS entropy on purpose: clients must not retry in lock-step.
        self._rng = random.Random(jitter_seed)
        self.initial_retry_delay_s = initial_retry_delay_s
        self.max_retry_delay_s = max_retry_delay_s

    # -- building requests -------------------------------------------------------------------

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def default_headers(self) -> dict[str, str]:
        return {
            "Accept": "application/json",
            "User-Agent": _platform_user_agent(),
            **self.auth_headers,
            **self._default_headers,
        }

    def _idempotency_key(self, options: RequestOptions) -> str | None:
        """One key per logical POST call; every retry of that call sends the same key."""
        if not isinstance(options.idempotency_key, NotGiven):
            return options.idempotency_key
        if options.method == "POST":
            return f"kairos-py-{uuid.uuid4()}"
        return None

    def _build_request(
        self, options: RequestOptions, *, idempotency_key: str | None, retries_taken: int
    ) -> httpx.Request:
        headers = {**self.default_headers, **options.headers}
        if idempotency_key is not None:
            headers[IDEMPOTENCY_HEADER] = idempotency_key
        if retries_taken:
            headers["Kairos-Retry-Count"] = str(retries_taken)
        timeout = self.timeout if isinstance(options.timeout, NotGiven) else options.timeout
        url = self.base_url.join(options.path.lstrip("/"))
        kwargs: dict[str, Any] = {"headers": headers, "timeout": timeout}
        if options.params:
            kwargs["params"] = dict(options.params)
        if options.files is not None:
            kwargs["files"] = dict(options.files)
            if options.json is not None:
                kwargs["data"] = options.json
        elif options.json is not None:
            kwargs["json"] = options.json
        return self._client.build_request(options.method, url, **kwargs)

    # -- retries -----------------------------------------------------------------------------

    def _retry_delay(self, retries_taken: int, response_headers: httpx.Headers | None) -> float:
        """Seconds before the next attempt: ``Retry-After`` when the service sent a sane one,
        otherwise exponential backoff (capped) with up to 25 % of jitter taken off."""
        if response_headers is not None:
            retry_after = parse_retry_after(response_headers)
            if retry_after is not None and 0 <= retry_after <= MAX_RETRY_AFTER_S:
                return retry_after
        backoff = min(self.initial_retry_delay_s * 2.0**retries_taken, self.max_retry_delay_s)
        return backoff * (1.0 - 0.25 * self._rng.random())

    @staticmethod
    def _should_retry(response: httpx.Response) -> bool:
        should = response.headers.get("x-should-retry")
        if should == "true":
            return True
        if should == "false":
            return False
        if response.status_code == 409:
            return _error_code(response) == IN_PROGRESS_CODE
        return _is_retryable_status(response.status_code)

    @staticmethod
    def _connection_error(exc: httpx.TransportError, request: httpx.Request) -> APIConnectionError:
        if isinstance(exc, httpx.TimeoutException):
            return APITimeoutError(request=request)
        return APIConnectionError(request=request, message=f"Connection error: {exc}")

    # -- parsing -----------------------------------------------------------------------------

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise APIResponseValidationError(
                response=response, message=f"Response body is not JSON: {exc}"
            ) from exc

    def parse_model(self, model: type[ModelT], response: httpx.Response) -> ModelT:
        return self._validate(model, self._json(response), response)

    @staticmethod
    def _validate(model: type[ModelT], data: object, response: httpx.Response) -> ModelT:
        try:
            return model.model_validate(data)
        except pydantic.ValidationError as exc:
            raise APIResponseValidationError(
                response=response, message=f"Unexpected {model.__name__} body: {exc}"
            ) from exc

    def parse_list(
        self, model: type[ModelT], response: httpx.Response, *, key: str | None = None
    ) -> list[ModelT]:
        data: object = self._json(response)
        if key is not None:
            obj = as_object(data)
            data = obj.get(key) if obj is not None else None
        items = as_array(data)
        if items is None:
            raise APIResponseValidationError(
                response=response, message=f"Expected a list of {model.__name__}"
            )
        return [self._validate(model, item, response) for item in items]

    def _parse_page_body(
        self, model: type[ModelT], response: httpx.Response
    ) -> tuple[list[ModelT], str | None]:
        items = self.parse_list(model, response, key="items")
        body = as_object(self._json(response))
        cursor = body.get("next_cursor") if body is not None else None
        if cursor is not None and not isinstance(cursor, str):
            raise APIResponseValidationError(
                response=response, message="next_cursor is not a string"
            )
        return items, cursor


def _page_params(params: Query | None, cursor: str | None) -> dict[str, str | int | float | bool]:
    merged = dict(params or {})
    if cursor is not None:
        merged["cursor"] = cursor
    return merged


class SyncAPIClient(BaseClient[httpx.Client]):
    """Sends requests with a blocking ``httpx.Client``."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: Timeout | NotGiven,
        max_retries: int,
        default_headers: Headers | None,
        jitter_seed: int | None,
        initial_retry_delay_s: float,
        max_retry_delay_s: float,
        transport: httpx.BaseTransport | None,
        http_client: httpx.Client | None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            jitter_seed=jitter_seed,
            initial_retry_delay_s=initial_retry_delay_s,
            max_retry_delay_s=max_retry_delay_s,
        )
        if http_client is not None and transport is not None:
            raise ValueError("pass either transport or http_client, not both")
        self._owns_client = http_client is None
        self._client = http_client or httpx.Client(transport=transport, timeout=self.timeout)

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def request(self, options: RequestOptions) -> httpx.Response:
        """Send one logical call, retrying transient failures; raise the typed error otherwise."""
        idempotency_key = self._idempotency_key(options)
        retries_taken = 0
        while True:
            request = self._build_request(
                options, idempotency_key=idempotency_key, retries_taken=retries_taken
            )
            try:
                response = self._client.send(request)
            except httpx.TransportError as exc:
                if retries_taken < self.max_retries and isinstance(
                    exc, _RETRYABLE_TRANSPORT_ERRORS
                ):
                    self._sleep(self._retry_delay(retries_taken, None))
                    retries_taken += 1
                    continue
                raise self._connection_error(exc, request) from exc
            if response.is_success:
                return response
            if retries_taken < self.max_retries and self._should_retry(response):
                response.close()
                self._sleep(self._retry_delay(retries_taken, response.headers))
                retries_taken += 1
                continue
            response.read()
            raise make_status_error(response)

    def get_page(
        self, model: type[ModelT], path: str, *, params: Query | None, timeout: Timeout | NotGiven
    ) -> SyncCursorPage[ModelT]:
        def fetch(cursor: str | None) -> SyncCursorPage[ModelT]:
            response = self.request(
                RequestOptions(
                    method="GET", path=path, params=_page_params(params, cursor), timeout=timeout
                )
            )
            items, next_cursor = self._parse_page_body(model, response)
            return SyncCursorPage(items=items, next_cursor=next_cursor, fetch=fetch)

        return fetch(None)

    def close(self) -> None:
        """Close the underlying connection pool (only if this client created it)."""
        if self._owns_client:
            self._client.close()


class AsyncAPIClient(BaseClient[httpx.AsyncClient]):
    """Sends requests with an ``httpx.AsyncClient``."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | httpx.URL | None,
        timeout: Timeout | NotGiven,
        max_retries: int,
        default_headers: Headers | None,
        jitter_seed: int | None,
        initial_retry_delay_s: float,
        max_retry_delay_s: float,
        transport: httpx.AsyncBaseTransport | None,
        http_client: httpx.AsyncClient | None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            jitter_seed=jitter_seed,
            initial_retry_delay_s=initial_retry_delay_s,
            max_retry_delay_s=max_retry_delay_s,
        )
        if http_client is not None and transport is not None:
            raise ValueError("pass either transport or http_client, not both")
        self._owns_client = http_client is None
        self._client = http_client or httpx.AsyncClient(transport=transport, timeout=self.timeout)

    async def _sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def request(self, options: RequestOptions) -> httpx.Response:
        """Send one logical call, retrying transient failures; raise the typed error otherwise."""
        idempotency_key = self._idempotency_key(options)
        retries_taken = 0
        while True:
            request = self._build_request(
                options, idempotency_key=idempotency_key, retries_taken=retries_taken
            )
            try:
                response = await self._client.send(request)
            except httpx.TransportError as exc:
                if retries_taken < self.max_retries and isinstance(
                    exc, _RETRYABLE_TRANSPORT_ERRORS
                ):
                    await self._sleep(self._retry_delay(retries_taken, None))
                    retries_taken += 1
                    continue
                raise self._connection_error(exc, request) from exc
            if response.is_success:
                return response
            if retries_taken < self.max_retries and self._should_retry(response):
                await response.aclose()
                await self._sleep(self._retry_delay(retries_taken, response.headers))
                retries_taken += 1
                continue
            await response.aread()
            raise make_status_error(response)

    async def get_page(
        self, model: type[ModelT], path: str, *, params: Query | None, timeout: Timeout | NotGiven
    ) -> AsyncCursorPage[ModelT]:
        async def fetch(cursor: str | None) -> AsyncCursorPage[ModelT]:
            response = await self.request(
                RequestOptions(
                    method="GET", path=path, params=_page_params(params, cursor), timeout=timeout
                )
            )
            items, next_cursor = self._parse_page_body(model, response)
            return AsyncCursorPage(items=items, next_cursor=next_cursor, fetch=fetch)

        return await fetch(None)

    async def close(self) -> None:
        """Close the underlying connection pool (only if this client created it)."""
        if self._owns_client:
            await self._client.aclose()


__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "AsyncAPIClient",
    "BaseClient",
    "RequestOptions",
    "SyncAPIClient",
    "parse_retry_after",
]
