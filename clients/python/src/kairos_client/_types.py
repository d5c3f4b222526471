"""Small shared types: the ``NotGiven`` sentinel and request-option aliases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeAlias, cast, final

import httpx


@final
class NotGiven:
    """Marks an argument the caller did not pass, as distinct from an explicit ``None``.

    ``client.clusters.upsert("c1", resources=["cpu"], policy=None)`` sends ``"policy": null``;
    leaving ``policy`` out sends nothing, so the service keeps its default.
    """

    _instance: NotGiven | None = None

    def __new__(cls) -> NotGiven:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> Literal[False]:
        return False

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __reduce__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final = NotGiven()

#: A timeout as httpx takes it: seconds per phase, an ``httpx.Timeout``, or ``None`` (no limit).
Timeout: TypeAlias = float | httpx.Timeout | None
Headers: TypeAlias = Mapping[str, str]
Query: TypeAlias = Mapping[str, str | int | float | bool]
HTTPMethod: TypeAlias = Literal["GET", "POST", "PUT", "DELETE"]
#: Resource vector: resource name -> non-negative amount, e.g. ``{"cpu": 32, "gpu": 8}``.
Resources: TypeAlias = Mapping[str, float]


def is_given(value: object) -> bool:
    return not isinstance(value, NotGiven)


def as_object(value: object) -> dict[str, object] | None:
    """``value`` as a JSON object, or ``None`` if it is not one."""
    return cast("dict[str, object]", value) if isinstance(value, dict) else None


def as_array(value: object) -> list[object] | None:
    """``value`` as a JSON array, or ``None`` if it is not one."""
    return cast("list[object]", value) if isinstance(value, list) else None


def strip_not_given(values: Mapping[str, object]) -> dict[str, object]:
    """Drop every entry whose value is ``NOT_GIVEN`` (``None`` is kept: it means JSON ``null``)."""
    return {k: v for k, v in values.items() if not isinstance(v, NotGiven)}
