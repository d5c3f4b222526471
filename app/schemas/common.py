"""Shared pieces of the API contract: ids, resources, pages, the error shape."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

T = TypeVar("T")

#: Ids of clusters, nodes and jobs: 1-128 characters, letters, digits and ``_ . : -``.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
#: Resource names (``cpu``, ``memory_gb``, ``nvidia.com/gpu``).
RESOURCE_PATTERN = r"^[A-Za-z][A-Za-z0-9_.\-/]{0,63}$"
#: Label keys follow Kubernetes' ``prefix/name`` shape loosely.
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,252}$"

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
ResourceName = Annotated[str, StringConstraints(pattern=RESOURCE_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(max_length=1024)]
Labels = dict[LabelKey, LabelValue]


#: A finite, non-negative amount of one resource.
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: Seconds since the Unix epoch.
EpochSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Resources = dict[ResourceName, Amount]

#: ``limit`` query parameter bounds.
DEFAULT_PAGE_LIMIT = 50
MAX_PAGE_LIMIT = 500


class Schema(BaseModel):
    """Request bodies refuse unknown fields so typos surface as 422 instead of being ignored."""

    model_config = ConfigDict(extra="forbid")


class ReadSchema(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class ErrorDetail(BaseModel):
    field: str | None = None
    message: str
    type: str | None = None


class ErrorInfo(BaseModel):
    code: str
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class ErrorResponse(BaseModel):
    error: ErrorInfo


def example(summary: str, value: Any) -> dict[str, Any]:
    """One entry of ``openapi_examples``."""
    return {"summary": summary, "value": value}
