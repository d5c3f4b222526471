"""Python SDK for the Kairos scheduling-as-a-service HTTP API.

>>> from kairos_client import Client
>>> with Client(base_url="http://127.0.0.1:8000") as client:  # doctest: +SKIP
...     client.clusters.upsert("c1", resources=["cpu"])
...     client.nodes.upsert_many("c1", [{"id": "n1", "capacity": {"cpu": 8}}])
...     client.jobs.submit("c1", id="j1", per_task={"cpu": 2}, walltime_s=60)
...     decision = client.clusters.schedule("c1")
"""

from kairos_client._base_client import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, RequestOptions
from kairos_client._client import AsyncClient, Client
from kairos_client._exceptions import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    KairosError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
    UnprocessableEntityError,
    ValidationError,
)
from kairos_client._pagination import AsyncCursorPage, AsyncPaginator, SyncCursorPage
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout
from kairos_client._version import __version__
from kairos_client.types import (
    Allocation,
    AuditEvent,
    Cluster,
    Decision,
    DecisionDetail,
    Fallback,
    Job,
    Node,
    Placement,
    Policy,
    PolicyRef,
    Reservation,
    ShadowReport,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "NOT_GIVEN",
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "Allocation",
    "AsyncClient",
    "AsyncCursorPage",
    "AsyncPaginator",
    "AuditEvent",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "Cluster",
    "ConflictError",
    "Decision",
    "DecisionDetail",
    "Fallback",
    "InternalServerError",
    "Job",
    "KairosError",
    "Node",
    "NotFoundError",
    "NotGiven",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Placement",
    "Policy",
    "PolicyRef",
    "RateLimitError",
    "RequestOptions",
    "Reservation",
    "ServiceUnavailableError",
    "ShadowReport",
    "SyncCursorPage",
    "Timeout",
    "UnprocessableEntityError",
    "ValidationError",
    "__version__",
]
