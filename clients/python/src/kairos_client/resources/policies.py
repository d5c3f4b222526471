from __future__ import annotations

import builtins
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kairos_client._base_client import RequestOptions
from kairos_client._resource import AsyncAPIResource, SyncAPIResource, path
from kairos_client._types import NOT_GIVEN, NotGiven, Timeout
from kairos_client.types.policy import Policy

__all__ = ["AsyncPolicies", "Policies"]


def _upload(
    model: bytes | os.PathLike[str],
    card: Mapping[str, Any],
    *,
    timeout: Timeout | NotGiven,
    idempotency_key: str | NotGiven,
) -> RequestOptions:
    # Read the file up front: a retry must send exactly the same bytes.
    if isinstance(model, bytes):
        content, filename = model, "policy.onnx"
    else:
        model_path = Path(model)
        content, filename = model_path.read_bytes(), model_path.name
    files = {
        "model": (filename, content, "application/octet-stream"),
        "card": ("card.json", json.dumps(dict(card)).encode(), "application/json"),
    }
    return RequestOptions(
        "POST", "/v1/policies", files=files, timeout=timeout, idempotency_key=idempotency_key
    )


class Policies(SyncAPIResource):
    """``client.policies``: heuristics and learned (ONNX) policies the service can use."""

    def retrieve(self, name: str, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> Policy:
        """One policy with its model card."""
        options = RequestOptions("GET", path("/v1/policies/{}", name), timeout=timeout)
        return self._client.parse_model(Policy, self._client.request(options))

    def upload(
        self,
        model: bytes | os.PathLike[str],
        card: Mapping[str, Any],
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Policy:
        """Upload an ONNX policy with its model card; an invalid model raises
        :class:`~kairos_client.ValidationError` with the reason."""
        options = _upload(model, card, timeout=timeout, idempotency_key=idempotency_key)
        return self._client.parse_model(Policy, self._client.request(options))

    def list(self, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> builtins.list[Policy]:
        """Every heuristic and every ONNX model found (not paginated)."""
        options = RequestOptions("GET", "/v1/policies", timeout=timeout)
        return self._client.parse_list(Policy, self._client.request(options))


class AsyncPolicies(AsyncAPIResource):
    """``client.policies`` of :class:`~kairos_client.AsyncClient`."""

    async def retrieve(self, name: str, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> Policy:
        """One policy with its model card."""
        options = RequestOptions("GET", path("/v1/policies/{}", name), timeout=timeout)
        return self._client.parse_model(Policy, await self._client.request(options))

    async def upload(
        self,
        model: bytes | os.PathLike[str],
        card: Mapping[str, Any],
        *,
        timeout: Timeout | NotGiven = NOT_GIVEN,
        idempotency_key: str | NotGiven = NOT_GIVEN,
    ) -> Policy:
        """Upload an ONNX policy with its model card."""
        options = _upload(model, card, timeout=timeout, idempotency_key=idempotency_key)
        return self._client.parse_model(Policy, await self._client.request(options))

    async def list(self, *, timeout: Timeout | NotGiven = NOT_GIVEN) -> builtins.list[Policy]:
        """Every heuristic and every ONNX model found (not paginated)."""
        options = RequestOptions("GET", "/v1/policies", timeout=timeout)
        return self._client.parse_list(Policy, await self._client.request(options))
