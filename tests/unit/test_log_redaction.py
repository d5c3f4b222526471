"""Secrets are taken out of log records: secret-looking query parameters and ``Authorization``
credentials (``app.observability.RedactSecrets``)."""

from __future__ import annotations

import logging
import sys

import pytest
from uvicorn.logging import AccessFormatter

from app.observability import (
    REDACTED,
    RedactSecrets,
    is_secret_name,
    redact_secrets,
    uvicorn_log_config,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ui/clusters/x?key=sk-1&refresh=3", f"/ui/clusters/x?key={REDACTED}&refresh=3"),
        ("/ui?refresh=2&api_key=sk-1", f"/ui?refresh=2&api_key={REDACTED}"),
        ("/x?access_token=sk-1#top", f"/x?access_token={REDACTED}#top"),
        (
            "/x?password=hunter2&secret=s&KEY=k",
            f"/x?password={REDACTED}&secret={REDACTED}&KEY={REDACTED}",
        ),
        (
            "/ui/login?next=/ui%3Fkey%3Dsk-1%26refresh%3D2",
            f"/ui/login?next=/ui%3Fkey%3D{REDACTED}%26refresh%3D2",
        ),
        ("Authorization: Bearer sk-1", f"Authorization: {REDACTED}"),
        (
            "[(b'authorization', b'Bearer sk-1'), (b'host', b'h')]",
            f"[(b'authorization', b'{REDACTED}'), (b'host', b'h')]",
        ),
        ("sent bearer sk-1 upstream", f"sent bearer {REDACTED} upstream"),
    ],
)
def test_secrets_are_redacted(text: str, expected: str):
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(
    "text",
    ["/v1/clusters?cursor=abc&limit=2", "/ui?refresh=10&next=/ui", "/ui?key=", "GET /healthz"],
)
def test_everything_else_is_left_alone(text: str):
    assert redact_secrets(text) == text


def test_secret_names():
    assert all(map(is_secret_name, ["key", "api_key", "X-Api-Key", "token", "password", "secret"]))
    assert not any(map(is_secret_name, ["refresh", "next", "cursor", "limit", "state"]))


def test_an_access_log_record_still_formats_and_carries_no_key():
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/ui/clusters/x?key=sk-secret&refresh=5", "1.1", 400),
        None,
    )
    assert RedactSecrets().filter(record)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s').format(record)
    request_line = f"GET /ui/clusters/x?key={REDACTED}&refresh=5 HTTP/1.1"
    assert line == f'127.0.0.1:5000 - "{request_line}" 400 Bad Request'


def test_message_and_mapping_arguments_are_redacted():
    record = logging.LogRecord(
        "app", logging.ERROR, __file__, 1, "GET /x?token=t1 %(h)s", ({"h": b"Bearer t2"},), None
    )
    RedactSecrets().filter(record)
    assert "t1" not in record.getMessage()
    assert "t2" not in record.getMessage()


def test_every_handler_of_the_serving_log_config_redacts():
    config = uvicorn_log_config("info")
    assert set(config["handlers"]) >= {"default", "access", "kairos"}
    assert all(h["filters"] == ["redact_secrets"] for h in config["handlers"].values())
    factory = config["filters"]["redact_secrets"]["()"]
    assert factory == "app.observability.RedactSecrets"
    assert config["root"]["handlers"] == ["kairos"]


def test_a_traceback_is_redacted_too():
    try:
        raise RuntimeError("GET http://h/ui?key=sk-in-trace failed")
    except RuntimeError:
        record = logging.LogRecord("app", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    RedactSecrets().filter(record)
    line = logging.Formatter().format(record)
    assert "RuntimeError" in line
    assert "sk-in-trace" not in line
