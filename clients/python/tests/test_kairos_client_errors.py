from __future__ import annotations

import httpx
import pytest
from sdk_fakes import CLUSTER, Script, error

import kairos_client
from kairos_client import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
    ValidationError,
)

STATUS_CLASSES = [
    (400, BadRequestError),
    (401, AuthenticationError),
    (403, PermissionDeniedError),
    (404, NotFoundError),
    (409, ConflictError),
    (413, PayloadTooLargeError),
    (418, APIStatusError),
    (422, ValidationError),
    (429, RateLimitError),
    (500, InternalServerError),
    (502, InternalServerError),
    (503, ServiceUnavailableError),
]


class TestErrorMapping:
    @pytest.mark.parametrize(("status", "cls"), STATUS_CLASSES)
    def test_status_maps_to_class_with_body_fields(self, status, cls, script: Script):
        details = [{"field": "resources", "message": "required"}]
        script.add(error(status, f"code_{status}", f"message {status}", details))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script), max_retries=0)
        with pytest.raises(cls) as info:
            client.clusters.retrieve("c1")
        exc = info.value
        assert type(exc) is cls
        assert isinstance(exc, APIStatusError)
        assert exc.status_code == status
        assert exc.code == f"code_{status}"
        assert exc.message == f"message {status}"
        assert exc.details == details
        assert exc.request.url.path == "/v1/clusters/c1"
        assert f"Error {status} code_{status}: message {status}" == str(exc)

    def test_validation_error_alias(self):
        assert kairos_client.UnprocessableEntityError is ValidationError

    def test_non_json_error_body_keeps_text(self, script: Script):
        script.add(httpx.Response(404, text="no such thing"))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script))
        with pytest.raises(NotFoundError) as info:
            client.clusters.retrieve("c1")
        assert info.value.message == "no such thing"
        assert info.value.code is None
        assert info.value.details == []

    def test_framework_detail_body(self, script: Script):
        script.add(httpx.Response(405, json={"detail": "Method Not Allowed"}))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script))
        with pytest.raises(APIStatusError) as info:
            client.clusters.retrieve("c1")
        assert info.value.status_code == 405
        assert info.value.message == "Method Not Allowed"

    def test_connection_error(self, script: Script):
        script.add(httpx.ConnectError("refused"))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script), max_retries=0)
        with pytest.raises(APIConnectionError) as info:
            client.clusters.retrieve("c1")
        assert not isinstance(info.value, APITimeoutError)
        assert "refused" in info.value.message

    def test_timeout_error(self, script: Script):
        script.add(httpx.ReadTimeout("slow"))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script), max_retries=0)
        with pytest.raises(APITimeoutError):
            client.clusters.retrieve("c1")

    def test_malformed_success_body_is_a_response_validation_error(self, script: Script):
        script.add(httpx.Response(200, json={"id": "c1"}))  # no "resources"
        client = Client(base_url="http://x", transport=httpx.MockTransport(script))
        with pytest.raises(APIResponseValidationError) as info:
            client.clusters.retrieve("c1")
        assert info.value.status_code == 200
        assert "Cluster" in info.value.message

    def test_non_json_success_body(self, script: Script):
        script.add(httpx.Response(200, text="<html>"))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script))
        with pytest.raises(APIResponseValidationError):
            client.clusters.retrieve("c1")

    def test_unknown_response_fields_are_kept(self, script: Script):
        script.add(httpx.Response(200, json={**CLUSTER, "shiny_new_field": 3}))
        client = Client(base_url="http://x", transport=httpx.MockTransport(script))
        cluster = client.clusters.retrieve("c1")
        assert cluster.model_extra == {"shiny_new_field": 3}


class TestAsyncErrorMapping:
    @pytest.mark.parametrize(("status", "cls"), STATUS_CLASSES)
    async def test_status_maps_to_class(self, status, cls, script: Script):
        script.add(error(status, "c", "m"))
        async with AsyncClient(
            base_url="http://x", transport=httpx.MockTransport(script), max_retries=0
        ) as client:
            with pytest.raises(cls) as info:
                await client.clusters.retrieve("c1")
        assert type(info.value) is cls
        assert info.value.code == "c"

    async def test_timeout_error(self, script: Script):
        script.add(httpx.ConnectTimeout("slow"))
        async with AsyncClient(
            base_url="http://x", transport=httpx.MockTransport(script), max_retries=0
        ) as client:
            with pytest.raises(APITimeoutError):
                await client.policies.list()
