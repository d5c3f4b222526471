"""Test doubles for the SDK unit tests: a scripted ``httpx.MockTransport`` and sample bodies."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

BASE_URL = "http://kairos.test"

Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Script:
    """Answers requests with a fixed sequence of replies and records every request it saw."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[httpx.Request] = []

    def add(self, *replies: Reply) -> Script:
        self.replies.extend(replies)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx.Response):
            return reply
        return reply(request)

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def error(status: int, code: str, message: str, details: list[Any] | None = None, **kw: Any):
    body = {"error": {"code": code, "message": message, "details": details or []}}
    return httpx.Response(status, json=body, **kw)


CLUSTER = {
    "id": "c1",
    "name": None,
    "resources": ["cpu"],
    "policy": "f1",
    "fallback": "f1",
    "backfill": "easy",
    "placement": "first_fit",
    "shadow_policy": None,
    "labels": {},
    "created_at": 1000.0,
    "updated_at": 1000.0,
    "nodes": 1,
    "capacity": {"cpu": 8},
    "allocated": {"cpu": 0},
    "free": {"cpu": 8},
    "pending_jobs": 0,
    "running_jobs": 0,
}


def job(job_id: str, state: str = "pending") -> dict[str, Any]:
    return {
        "id": job_id,
        "cluster_id": "c1",
        "tasks": 1,
        "per_task": {"cpu": 2},
        "walltime_s": 60.0,
        "submit_time": 1000.0,
        "priority": 0,
        "user": None,
        "queue": None,
        "depends_on": [],
        "labels": {},
        "state": state,
        "placements": [],
        "start_time": None,
        "end_time": None,
        "decision_id": None,
    }


DECISION = {
    "id": "d1",
    "cluster_id": "c1",
    "created_at": 1000.0,
    "request_id": "r1",
    "policy": {"name": "f1", "version": "1", "kind": "heuristic"},
    "fallback": {"used": False, "reason": None},
    "allocations": [{"job_id": "j1", "placements": [{"node_id": "n1", "tasks": 1}]}],
    "reservations": [],
    "queue_length": 1,
    "latency_ms": 1.5,
    "dry_run": False,
}
