"""Pure helpers that turn keyword arguments into request bodies and query strings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from kairos_client._types import NotGiven


def list_params(
    limit: int | NotGiven, **filters: str | NotGiven | None
) -> dict[str, str | int | float | bool]:
    params: dict[str, str | int | float | bool] = {}
    if not isinstance(limit, NotGiven):
        if limit < 1:
            raise ValueError("limit must be >= 1")
        params["limit"] = limit
    for key, value in filters.items():
        if isinstance(value, str):
            params[key] = value
    return params


def plain(value: object) -> object:
    """A JSON-ready deep copy of caller-given mappings/sequences (``Mapping`` -> ``dict``)."""
    if isinstance(value, Mapping):
        mapping = cast("Mapping[object, object]", value)
        return {str(k): plain(v) for k, v in mapping.items()}
    if isinstance(value, list | tuple):
        sequence = cast("Sequence[object]", value)
        return [plain(v) for v in sequence]
    return value
