"""Contract: every operation in the service's OpenAPI document is documented for /docs (issue 6):
a summary, a description, and, where it takes a body, an example body (JSON or multipart)."""

from __future__ import annotations

from typing import Any

import pytest

from app.main import create_app

Schema = dict[str, Any]


@pytest.fixture(scope="module")
def openapi() -> Schema:
    return create_app().openapi()


def _operations(spec: Schema) -> list[tuple[str, str, Schema]]:
    return [(p, m, op) for p, item in spec["paths"].items() for m, op in item.items()]


def _has_example(spec: Schema, media: Schema) -> bool:
    if media.get("examples") or media.get("example") is not None:
        return True
    ref = media.get("schema", {}).get("$ref", "")
    if not ref:
        return False
    schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return bool(schema.get("examples") or schema.get("example") is not None)


def test_every_operation_has_a_summary_and_a_description(openapi: Schema) -> None:
    ops = _operations(openapi)
    assert len(ops) >= 20
    missing = [(m, p) for p, m, op in ops if not (op.get("summary") and op.get("description"))]
    assert not missing, missing


def test_every_request_body_has_an_example(openapi: Schema) -> None:
    bodies = [(m, p, op["requestBody"]) for p, m, op in _operations(openapi) if "requestBody" in op]
    assert any("multipart/form-data" in b["content"] for _, _, b in bodies)
    missing = [
        (m, p, ctype)
        for m, p, body in bodies
        for ctype, media in body["content"].items()
        if not _has_example(openapi, media)
    ]
    assert not missing, missing


def test_the_checker_catches_an_undocumented_operation(openapi: Schema) -> None:
    assert not _has_example(openapi, {"schema": {"type": "object"}})
    ref = {"schema": {"$ref": "#/components/schemas/Bare"}}
    assert not _has_example({"components": {"schemas": {"Bare": {"type": "object"}}}}, ref)


def test_every_error_response_is_documented_as_json(openapi: Schema) -> None:
    """Errors are always the JSON error shape, also on operations whose success is text."""
    wrong = [
        (m, p, code, sorted(resp.get("content", {})))
        for p, m, op in _operations(openapi)
        for code, resp in op.get("responses", {}).items()
        if code[0] in "45" and set(resp.get("content", {})) != {"application/json"}
    ]
    assert not wrong, wrong
