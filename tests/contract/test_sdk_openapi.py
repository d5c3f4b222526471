"""The SDK (``clients/python``) against the service's OpenAPI document, so the two cannot drift.

The SDK never imports ``app``; this test is the only place that sees both. For every SDK method
it records the request the SDK really sends (method, path, query, body keys) through an
``httpx.MockTransport``, finds the matching operation in ``create_app(settings).openapi()``, and
checks, structurally and recursively through nested objects:

* responses: every field an SDK model declares exists in the response schema with a compatible
  type (anything the service may send, the model accepts); every field the schema requires is
  declared by the model; a field the model requires is one the schema requires;
* requests: every argument the SDK can send exists in the request schema with a type the service
  accepts, and everything the service requires is required by the SDK signature;
* coverage: every ``/v1`` operation (bar the Kubernetes extender adapter) has an SDK method, and
  ``Client`` and ``AsyncClient`` expose the same methods with the same parameters.
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Required, get_args, get_origin

import httpx
import kairos_client
import pydantic
import pytest
from kairos_client import AsyncClient, Client, NotGiven, SyncCursorPage
from typing_extensions import TypedDict

from app.main import create_app
from app.settings import Settings

Schema = dict[str, Any]

#: SDK calls with sample arguments (every optional argument given, so every key is sent).
SAMPLE_CALLS: dict[str, Callable[[Client], object]] = {
    "clusters.upsert": lambda c: c.clusters.upsert(
        "c1",
        resources=["cpu"],
        name="n",
        policy="f1",
        fallback="f1",
        backfill="easy",
        placement="best_fit",
        shadow_policy="sjf",
        labels={"a": "b"},
        domain="gpu",
        gpu={"restart_cost_s": 10.0, "las_thresholds_gpu_s": [100.0], "placement": "most-free"},
    ),
    "clusters.retrieve": lambda c: c.clusters.retrieve("c1"),
    "clusters.list": lambda c: c.clusters.list(limit=5),
    "clusters.delete": lambda c: c.clusters.delete("c1"),
    "clusters.shadow_report": lambda c: c.clusters.shadow_report("c1"),
    "clusters.schedule": lambda c: c.clusters.schedule(
        "c1",
        dry_run=True,
        now=1.0,
        policy="f1",
        explain=True,
        deadline_ms=10.0,
        trigger={"type": "stage_released", "job_id": "d1:s1"},
    ),
    "nodes.upsert": lambda c: c.nodes.upsert(
        "c1", "n1", capacity={"cpu": 1}, labels={"a": "b"}, state="drain"
    ),
    "nodes.upsert_many": lambda c: c.nodes.upsert_many(
        "c1", [{"id": "n1", "capacity": {"cpu": 1}, "labels": {}, "state": "up"}]
    ),
    "nodes.list": lambda c: c.nodes.list("c1", limit=5),
    "jobs.submit": lambda c: c.jobs.submit(
        "c1",
        id="j1",
        per_task={"cpu": 1},
        walltime_s=1.0,
        tasks=2,
        submit_time=1.0,
        priority=1,
        user="u",
        queue="q",
        depends_on=["j0"],
        labels={"a": "b"},
        min_tasks=1,
        max_tasks=4,
    ),
    "jobs.submit_many": lambda c: c.jobs.submit_many(
        "c1", [{"id": "j1", "per_task": {"cpu": 1}, "walltime_s": 1.0}]
    ),
    "jobs.retrieve": lambda c: c.jobs.retrieve("c1", "j1"),
    "jobs.send_event": lambda c: c.jobs.send_event(
        "c1", "j1", type="task_finished", at=2.0, count=2, slots=1, node_id="n1"
    ),
    "dags.submit": lambda c: c.dags.submit(
        "c1",
        id="d1",
        stages=[
            {
                "id": "s1",
                "tasks": 2,
                "per_task": {"cpu": 1},
                "task_duration_s": 1.0,
                "depends_on": [],
                "max_parallelism": 1,
                "profile": {"10": {"first_wave": [1.0], "rest_wave": [1.0], "fresh": [1.0]}},
            }
        ],
        submit_time=1.0,
        priority=1,
        user="u",
        queue="q",
        labels={"a": "b"},
    ),
    "dags.retrieve": lambda c: c.dags.retrieve("c1", "d1"),
    "dags.list": lambda c: c.dags.list("c1", state="running", limit=5),
    "dags.cancel": lambda c: c.dags.cancel("c1", "d1"),
    "jobs.cancel": lambda c: c.jobs.cancel("c1", "j1"),
    "jobs.list": lambda c: c.jobs.list("c1", state="pending", limit=5),
    "decisions.retrieve": lambda c: c.decisions.retrieve("d1"),
    "decisions.list": lambda c: c.decisions.list("c1", limit=5),
    "policies.list": lambda c: c.policies.list(),
    "policies.retrieve": lambda c: c.policies.retrieve("f1"),
    "policies.upload": lambda c: c.policies.upload(b"onnx", {"name": "p"}),
    "audit.list": lambda c: c.audit.list(action="policy.upload", limit=5),
    "tunes.tune": lambda c: c.tunes.tune(
        "c1",
        backfill="none",
        time_budget_s=60.0,
        seed=3,
        window_length=64,
        max_history=1000,
        min_history=200,
        from_policy="hpc-kernel",
        auto_promote=True,
    ),
    "tunes.get_tune": lambda c: c.tunes.get_tune("c1", "tune_" + "0" * 32),
    "tunes.list_tunes": lambda c: c.tunes.list_tunes("c1", limit=5),
    "tunes.promote": lambda c: c.tunes.promote("c1", "tune_" + "0" * 32, force=True),
    "tunes.history": lambda c: c.tunes.history("c1", since=1.0, limit=5),
    "decide": lambda c: c.decide(
        now=1.0,
        nodes=[{"id": "n1", "capacity": {"cpu": 1}, "allocated": {}, "state": "up"}],
        pending=[{"id": "j1", "per_task": {"cpu": 1}, "walltime_s": 1.0}],
        running=[
            {
                "job": {"id": "j0", "per_task": {"cpu": 1}, "walltime_s": 1.0},
                "placements": [{"node_id": "n1", "tasks": 1}],
                "start_time": 0.0,
            }
        ],
        finished=["j9"],
        policy="f1",
        fallback="f1",
        backfill="easy",
        placement="first_fit",
        explain=True,
        deadline_ms=5.0,
    ),
    "decide_dag": lambda c: c.decide_dag(
        now=1.0,
        nodes=[{"id": "n1", "capacity": {"cpu": 4}, "allocated": {"cpu": 1}, "state": "up"}],
        dags=[
            {
                "spec": {
                    "id": "d1",
                    "submit_time": 0.0,
                    "priority": 1,
                    "user": "u",
                    "queue": "q",
                    "labels": {"a": "b"},
                    "stages": [
                        {"id": "s1", "tasks": 2, "per_task": {"cpu": 1}, "task_duration_s": 1.0}
                    ],
                },
                "stage_progress": [
                    {"stage_id": "s1", "launched": 1, "finished": 0, "running_slots": 1}
                ],
            }
        ],
        executor_capacity={"cpu": 1},
        trigger={"type": "stage_released", "job_id": "d1:s1"},
        policy="fair",
        fallback="fair",
        weighted_fair_alpha=0.5,
        explain=True,
        deadline_ms=5.0,
    ),
    "decide_gpu": lambda c: c.decide_gpu(
        now=1.0,
        nodes=[{"id": "n1", "gpus": 4, "state": "up"}],
        jobs=[
            {
                "id": "j1",
                "arrival": 0.0,
                "min_gpus": 1,
                "max_gpus": 2,
                "tenant": "t",
                "app": "bert",
                "estimate_s": 10.0,
                "allocation": [{"node_id": "n1", "gpus": 1}],
                "attained_gpu_s": 1.0,
                "executed_s": 1.0,
                "starts": 1,
                "preemptions": 0,
                "restart_left_s": 0.0,
                "labels": {"a": "b"},
            }
        ],
        policy="las",
        fallback="las",
        gpu={"restart_cost_s": 30.0},
        explain=True,
        deadline_ms=5.0,
    ),
}

#: SDK TypedDict parameters and the request-body property that carries them.
NESTED_PARAMS: list[tuple[str, tuple[str, ...], type[Any]]] = [
    ("nodes.upsert_many", ("nodes", "[]"), kairos_client.types.NodeParam),
    ("jobs.submit_many", ("jobs", "[]"), kairos_client.types.JobCreateParam),
    ("dags.submit", ("stages", "[]"), kairos_client.types.StageSpecParam),
    ("decide", ("nodes", "[]"), kairos_client.types.SnapshotNodeParam),
    ("decide_gpu", ("jobs", "[]"), kairos_client.types.GpuJobParam),
    ("decide_dag", ("dags", "[]"), kairos_client.types.DagStateParam),
    ("decide", ("pending", "[]"), kairos_client.types.JobSpecParam),
    ("decide", ("running", "[]"), kairos_client.types.RunningJobParam),
]

#: Operations that are deliberately not part of the SDK.
NOT_IN_SDK = re.compile(r"^/v1/k8s/")
#: Parameters of SDK methods that are not body fields.
TRANSPORT_PARAMS = {"self", "timeout", "idempotency_key"}


# -- the OpenAPI document --------------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi() -> Schema:
    return create_app(Settings(DATABASE_URL="sqlite:///unused.db")).openapi()


@dataclass(frozen=True)
class Captured:
    method: str
    path: str
    params: dict[str, str]
    operation_path: str


class _SentError(Exception):
    def __init__(self, request: httpx.Request) -> None:
        self.request = request


def _template_regex(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\{[^/}]+\}", "[^/]+", path) + "$")


def capture(name: str, openapi: Schema) -> Captured:
    def handler(request: httpx.Request) -> httpx.Response:
        raise _SentError(request)

    client = Client(base_url="http://sdk.test", transport=httpx.MockTransport(handler))
    with pytest.raises(_SentError) as sent:
        SAMPLE_CALLS[name](client)
    request = sent.value.request
    matches = [
        p
        for p, ops in openapi["paths"].items()
        if request.method.lower() in ops and _template_regex(p).match(request.url.path)
    ]
    # Prefer a literal segment over a path parameter (``/jobs/batch`` over ``/jobs/{job_id}``).
    matches.sort(key=lambda p: p.count("{"))
    return Captured(
        method=request.method.lower(),
        path=request.url.path,
        params=dict(request.url.params),
        operation_path=matches[0] if matches else "",
    )


def sdk_method(name: str, client_cls: type[Any] = Client) -> Callable[..., Any]:
    target: Any = client_cls
    for part in name.split("."):
        attr = inspect.getattr_static(target, part)
        if isinstance(attr, functools.cached_property):
            target = typing.get_type_hints(attr.func)["return"]
        else:
            target = attr
    return typing.cast(Callable[..., Any], target)


# -- schema comparison -----------------------------------------------------------------------


class Side:
    """One JSON Schema document (the service's or the SDK's) with ``$ref`` resolution."""

    def __init__(self, root: Schema, label: str) -> None:
        self.root = root
        self.label = label

    def resolve(self, schema: Schema) -> Schema:
        seen = 0
        while "$ref" in schema:
            node: Any = self.root
            for part in schema["$ref"].lstrip("#/").split("/"):
                node = node[part]
            extra = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**node, **extra}
            seen += 1
            assert seen < 50, "reference cycle"
        if "allOf" in schema and len(schema["allOf"]) == 1:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            return self.resolve({**schema["allOf"][0], **merged})
        return schema

    def branches(self, schema: Schema) -> list[Schema]:
        schema = self.resolve(schema)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                out: list[Schema] = []
                for branch in schema[key]:
                    out.extend(self.branches(branch))
                return out
        if isinstance(schema.get("type"), list):
            return [{**schema, "type": t} for t in schema["type"]]
        return [schema]


def _type_of(schema: Schema) -> str | None:
    if "type" in schema:
        return str(schema["type"])
    if "const" in schema:
        return _json_type(schema["const"])
    if "enum" in schema:
        kinds = {_json_type(v) for v in schema["enum"]}
        return kinds.pop() if len(kinds) == 1 else None
    if "properties" in schema:
        return "object"
    return None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _enum_values(schema: Schema) -> set[object] | None:
    if "const" in schema:
        return {schema["const"]}
    if "enum" in schema:
        return set(schema["enum"])
    return None


@dataclass
class Compare:
    """``accepting`` must take every value ``sending`` may produce.

    ``mode="response"``: the service sends, the SDK model accepts. ``mode="request"``: the SDK
    sends, the service accepts. Object rules are checked in both modes: the SDK declares no field
    the service lacks, and the SDK covers the service's required fields.
    """

    sending: Side
    accepting: Side
    mode: str
    problems: list[str]

    @property
    def sdk(self) -> Side:
        return self.accepting if self.mode == "response" else self.sending

    @property
    def service(self) -> Side:
        return self.sending if self.mode == "response" else self.accepting

    def check(self, sent: Schema, accepted: Schema, where: str) -> None:
        for branch in self.sending.branches(sent):
            errors: list[list[str]] = []
            for candidate in self.accepting.branches(accepted):
                sub = Compare(self.sending, self.accepting, self.mode, [])
                sub.check_one(branch, candidate, where)
                if not sub.problems:
                    break
                errors.append(sub.problems)
            else:
                if len(errors) == 1:
                    self.problems.extend(errors[0])
                else:
                    self.problems.append(
                        f"{where}: {self.sending.label} may send {_describe(branch)}, which "
                        f"{self.accepting.label} does not accept "
                        f"({' | '.join(_describe(b) for b in self.accepting.branches(accepted))})"
                    )

    def check_one(self, sent: Schema, accepted: Schema, where: str) -> None:
        sent_type, accepted_type = _type_of(sent), _type_of(accepted)
        if accepted_type is None:
            return  # accepts anything
        if sent_type is None:
            self.problems.append(
                f"{where}: {self.sending.label} is untyped, expected {accepted_type}"
            )
            return
        if sent_type != accepted_type and (sent_type, accepted_type) != ("integer", "number"):
            self.problems.append(
                f"{where}: {self.sending.label} sends {sent_type}, "
                f"{self.accepting.label} expects {accepted_type}"
            )
            return
        sent_enum, accepted_enum = _enum_values(sent), _enum_values(accepted)
        if accepted_enum is not None and (sent_enum is None or not sent_enum <= accepted_enum):
            self.problems.append(
                f"{where}: values {sorted(map(str, sent_enum or {'<any>'}))} not all in "
                f"{sorted(map(str, accepted_enum))}"
            )
        if sent_type == "array":
            self.check(sent.get("items", {}), accepted.get("items", {}), f"{where}[]")
        elif sent_type == "object":
            self.check_object(sent, accepted, where)

    def check_object(self, sent: Schema, accepted: Schema, where: str) -> None:
        sent_props: Schema = sent.get("properties", {})
        accepted_props: Schema = accepted.get("properties", {})
        if sent_props or accepted_props:
            sdk_props, service_props = (
                (accepted_props, sent_props)
                if self.mode == "response"
                else (sent_props, accepted_props)
            )
            sdk_req = set((accepted if self.mode == "response" else sent).get("required", []))
            service_req = set((sent if self.mode == "response" else accepted).get("required", []))
            for name in sorted(set(sdk_props) - set(service_props)):
                self.problems.append(
                    f"{where}.{name}: declared by the SDK, absent from the service"
                )
            if self.mode == "response":
                for name in sorted(service_req - set(sdk_props)):
                    self.problems.append(f"{where}.{name}: required by the service, not in the SDK")
                for name in sorted(sdk_req - service_req):
                    self.problems.append(
                        f"{where}.{name}: required by the SDK model, optional in the service"
                    )
            else:
                for name in sorted(service_req - sdk_req):
                    self.problems.append(
                        f"{where}.{name}: required by the service, optional (or absent) in the SDK"
                    )
            for name in sorted(set(sdk_props) & set(service_props)):
                self.check(sent_props[name], accepted_props[name], f"{where}.{name}")
            return
        sent_extra, accepted_extra = (
            sent.get("additionalProperties"),
            accepted.get("additionalProperties"),
        )
        if isinstance(sent_extra, dict) and isinstance(accepted_extra, dict):
            self.check(sent_extra, accepted_extra, f"{where}{{}}")


def _describe(schema: Schema) -> str:
    kind = _type_of(schema) or "any"
    enum = _enum_values(schema)
    return f"{kind}{sorted(map(str, enum))}" if enum else kind


def sdk_schema(annotation: Any, *, mode: str) -> Side:
    adapter = pydantic.TypeAdapter(annotation)
    return Side(
        adapter.json_schema(mode="validation" if mode == "response" else "serialization"),
        "the SDK",
    )


def compare(sent: tuple[Side, Schema], accepted: tuple[Side, Schema], mode: str, where: str):
    cmp = Compare(sent[0], accepted[0], mode, [])
    cmp.check(sent[1], accepted[1], where)
    return cmp.problems


# -- SDK signatures as schemas ---------------------------------------------------------------


def _strip_not_given(annotation: Any) -> tuple[Any, bool]:
    """(annotation without ``NotGiven``, whether NotGiven was part of it)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not NotGiven]
        had = len(args) != len(get_args(annotation))
        return functools.reduce(operator.or_, args), had
    return annotation, False


#: Body fields an SDK method always sends with one value (not an argument of the method).
CONSTANT_BODY_FIELDS: dict[str, dict[str, Any]] = {
    "decide_gpu": {"domain": Required[Literal["gpu"]]},
    "decide_dag": {"domain": Required[Literal["dag"]]},
}


def body_params(name: str, path_param_count: int) -> type[Any]:
    """A ``TypedDict`` of the body arguments an SDK method takes (required ones ``Required``)."""
    method = sdk_method(name)
    hints = typing.get_type_hints(method)
    fields: dict[str, Any] = dict(CONSTANT_BODY_FIELDS.get(name, {}))
    params = [
        p for p in inspect.signature(method).parameters.values() if p.name not in TRANSPORT_PARAMS
    ]
    for param in params[path_param_count:]:
        annotation, optional = _strip_not_given(hints[param.name])
        required = param.default is inspect.Parameter.empty and not optional
        fields[param.name] = Required[annotation] if required else NotRequired[annotation]
    return TypedDict(f"{name.replace('.', '_')}_body", fields)  # type: ignore[operator]


# -- tests -------------------------------------------------------------------------------------


def _operation(openapi: Schema, captured: Captured) -> Schema:
    op: Schema = openapi["paths"][captured.operation_path][captured.method]
    return op


def _success_schema(op: Schema) -> tuple[str, Schema | None]:
    for status, response in sorted(op["responses"].items()):
        if status.startswith("2"):
            content = response.get("content", {}).get("application/json")
            return status, (content or {}).get("schema")
    raise AssertionError("operation has no 2xx response")


def _return_model(name: str) -> Any:
    return typing.get_type_hints(sdk_method(name))["return"]


def _available(name: str, openapi: Schema) -> Captured:
    captured = capture(name, openapi)
    if not captured.operation_path:
        if name == "policies.upload":
            pytest.skip("POST /v1/policies (ONNX upload) is not served yet")
        pytest.fail(f"{name}: {captured.method.upper()} {captured.path} is not in the OpenAPI")
    return captured


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_sdk_method_hits_a_documented_operation(name: str, openapi: Schema):
    captured = _available(name, openapi)
    op = _operation(openapi, captured)
    declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
    assert set(captured.params) <= declared, f"{name}: query {captured.params} not in {declared}"


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_response_model_matches_schema(name: str, openapi: Schema):
    captured = _available(name, openapi)
    status, schema = _success_schema(_operation(openapi, captured))
    returned = _return_model(name)
    if returned is type(None):
        assert status == "204" or schema is None, f"{name}: SDK returns None, service sends a body"
        return
    if returned is str:  # a text body (the SWF history)
        content = _operation(openapi, captured)["responses"][status].get("content", {})
        assert "text/plain" in content, f"{name}: SDK returns text, service sends {content}"
        return
    assert schema is not None, f"{name}: service sends no JSON body"
    service = Side(openapi, "the service")
    if get_origin(returned) is SyncCursorPage:
        page = service.resolve(schema)
        assert {"items", "next_cursor"} <= set(page["properties"]), f"{name}: not a cursor page"
        problems = compare(
            (service, page["properties"]["next_cursor"]),
            (
                sdk_schema(str | None, mode="response"),
                {"anyOf": [{"type": "string"}, {"type": "null"}]},
            ),
            "response",
            f"{name}.next_cursor",
        )
        schema, returned = page["properties"]["items"], list[get_args(returned)[0]]
    elif get_origin(returned) is list:
        body = service.resolve(schema)
        if body.get("type") == "object":  # {"nodes": [...]} / {"jobs": [...]}
            (key,) = body["properties"]
            schema = body["properties"][key]
        problems = []
    else:
        problems = []
    sdk = sdk_schema(returned, mode="response")
    problems += compare((service, schema), (sdk, sdk.root), "response", name)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_request_arguments_match_schema(name: str, openapi: Schema):
    captured = _available(name, openapi)
    op = _operation(openapi, captured)
    body_schema = (
        op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    )
    path_params = captured.operation_path.count("{")
    if body_schema is None:
        return  # GET / DELETE / multipart: nothing in a JSON body
    params_type = body_params(name, path_params)
    sdk = sdk_schema(params_type, mode="request")
    problems = compare(
        (sdk, sdk.root), (Side(openapi, "the service"), body_schema), "request", name
    )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("name", "where", "param_type"), NESTED_PARAMS)
def test_typed_dict_params_match_schema(name: str, where: tuple[str, ...], param_type, openapi):
    captured = _available(name, openapi)
    op = _operation(openapi, captured)
    service = Side(openapi, "the service")
    schema: Schema = op["requestBody"]["content"]["application/json"]["schema"]
    for step in where:
        schema = service.resolve(schema)
        if "oneOf" in schema:  # a body per domain: the member that has this field
            members = [service.resolve(m) for m in schema["oneOf"]]
            schema = next(m for m in members if step in m.get("properties", {}))
        schema = schema["items"] if step == "[]" else schema["properties"][step]
    sdk = sdk_schema(param_type, mode="request")
    problems = compare(
        (sdk, sdk.root), (service, schema), "request", f"{name}:{param_type.__name__}"
    )
    assert not problems, "\n".join(problems)


def test_every_v1_operation_has_an_sdk_method(openapi: Schema):
    covered = {(c.method, c.operation_path) for c in _captures(openapi) if c.operation_path}
    missing = [
        f"{method.upper()} {path}"
        for path, ops in openapi["paths"].items()
        for method in ops
        if path.startswith("/v1/") and not NOT_IN_SDK.match(path) and (method, path) not in covered
    ]
    assert not missing, f"operations without an SDK method: {missing}"


def _captures(openapi: Schema) -> Iterator[Captured]:
    for name in SAMPLE_CALLS:
        yield capture(name, openapi)


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_sync_and_async_twins_take_the_same_arguments(name: str):
    sync_sig = inspect.signature(sdk_method(name, Client))
    async_sig = inspect.signature(sdk_method(name, AsyncClient))
    assert list(sync_sig.parameters) == list(async_sig.parameters)
    for param in sync_sig.parameters.values():
        twin = async_sig.parameters[param.name]
        assert (param.kind, param.default) == (twin.kind, twin.default), param.name


def test_the_checker_catches_drift():
    """The comparison itself fails on the drifts it is meant to catch."""

    class Thing(kairos_client.Cluster):
        phantom: int

    service_schema = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "count": {"type": "string"}},
        "required": ["id", "count", "extra"],
    }

    class Small(pydantic.BaseModel):
        id: str
        count: int

    sdk = sdk_schema(Small, mode="response")
    problems = compare((Side({}, "svc"), service_schema), (sdk, sdk.root), "response", "x")
    assert any("count" in p and "sends string" in p for p in problems), problems
    assert any("extra" in p and "required by the service" in p for p in problems), problems
    sdk = sdk_schema(Thing, mode="response")
    problems = compare((Side({}, "svc"), service_schema), (sdk, sdk.root), "response", "x")
    assert any("phantom" in p and "absent from the service" in p for p in problems), problems
