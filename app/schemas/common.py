"""Shared pieces of the API contract: ids, resources, pages, the error shape."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

T = TypeVar("T")

#: Ids of clusters, nodes and jobs: 1-128 characters, letters, digits and ``_ . : -``.
#: The patterns here are whole-string patterns: pydantic (Rust engine) and JSON Schema read ``$``
#: as the end of the text; Python checks them with ``re.fullmatch`` (``re.match``'s ``$`` also
#: accepts a final ``\n``).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
#: Resource names (``cpu``, ``memory_gb``, ``nvidia.com/gpu``).
RESOURCE_PATTERN = r"^[A-Za-z][A-Za-z0-9_.\-/]{0,63}$"
#: Label keys follow Kubernetes' ``prefix/name`` shape loosely.
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,252}$"

#: What each pattern allows, in words, for error messages.
PATTERN_WORDS: dict[str, str] = {
    ID_PATTERN: (
        "1-128 characters: letters, digits and '_', '.', ':', '-', starting with a letter or digit"
    ),
    RESOURCE_PATTERN: (
        "1-64 characters: letters, digits and '_', '.', '-', '/', starting with a letter"
    ),
    LABEL_KEY_PATTERN: (
        "1-253 characters: letters, digits and '_', '.', '-', '/', starting with a letter or digit"
    ),
}

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
ResourceName = Annotated[str, StringConstraints(pattern=RESOURCE_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
#: Free text: no NUL characters (PostgreSQL cannot store them).
NO_NUL_PATTERN = r"^[^\x00]*$"
LabelValue = Annotated[str, StringConstraints(max_length=1024, pattern=NO_NUL_PATTERN)]
Name = Annotated[str, StringConstraints(max_length=256, pattern=NO_NUL_PATTERN)]
ShortText = Annotated[str, StringConstraints(max_length=128, pattern=NO_NUL_PATTERN)]
#: JSON Schema of a map whose keys follow a pattern: no other key is valid (the server refuses
#: them), which ``patternProperties`` alone does not say.
CLOSED_MAP: dict[str, Any] = {"additionalProperties": False}
Labels = Annotated[dict[LabelKey, LabelValue], Field(json_schema_extra=CLOSED_MAP)]


#: The numbers of request bodies are strict: a JSON number, never a string such as ``"60"``
#: (a float field takes an integer too). Query parameters do not use these types: they arrive
#: as strings and are parsed.
#: A finite, non-negative amount of one resource.
#: Bounded so sums over a cluster stay finite.
Amount = Annotated[float, Field(ge=0, le=1e15, allow_inf_nan=False, strict=True)]
#: Seconds since the Unix epoch (bounded: start + walltime must stay a finite JSON number).
EpochSeconds = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False, strict=True)]
#: A requested run time: positive, at most ~317 years.
Duration = Annotated[float, Field(gt=0, le=1e10, allow_inf_nan=False, strict=True)]
Resources = Annotated[dict[ResourceName, Amount], Field(json_schema_extra=CLOSED_MAP)]


#: A node's capacity or a task's demand: at least one entry. That one of them is above zero
#: (nothing can be placed on an empty node, and an empty demand would fit everywhere using
#: nothing) is checked by the services, 422 ``no_positive_amount``
#: (:mod:`app.services.amounts`): a validator here costs a call into Python per map, on the
#: decide path too. The JSON Schema says it in the description only (as
#: ``not: {additionalProperties: {maximum: 0}}``, schema-driven generators such as schemathesis
#: filter out most of what they draw).
NonZeroResources = Annotated[
    Resources, Field(min_length=1, description="At least one resource with a positive amount.")
]

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
