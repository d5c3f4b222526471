"""What goes on the wire: URLs, bodies, headers and configuration."""

from __future__ import annotations

import httpx
import pytest
from sdk_fakes import CLUSTER, DECISION, Script, job

from kairos_client import NOT_GIVEN, AsyncClient, Client, Decision, Policy
from kairos_client._base_client import DEFAULT_TIMEOUT

NODE = {
    "id": "n1",
    "cluster_id": "c1",
    "capacity": {"cpu": 8},
    "allocated": {},
    "free": {"cpu": 8},
    "labels": {},
    "state": "up",
    "updated_at": 1000.0,
}
POLICY = {"name": "sjf", "version": "1", "kind": "heuristic", "domain": "hpc", "loaded": True}


class TestConfiguration:
    def test_api_key_and_base_url_from_environment(
        self, monkeypatch: pytest.MonkeyPatch, script: Script
    ):
        monkeypatch.setenv("KAIROS_API_KEY", "env-key")
        monkeypatch.setenv("KAIROS_BASE_URL", "http://env.example:9000/prefix")
        script.add(httpx.Response(200, json=[POLICY]))
        client = Client(transport=httpx.MockTransport(script))
        client.policies.list()
        request = script.requests[0]
        assert request.headers["Authorization"] == "Bearer env-key"
        assert str(request.url) == "http://env.example:9000/prefix/v1/policies"

    def test_arguments_beat_environment(self, monkeypatch: pytest.MonkeyPatch, script: Script):
        monkeypatch.setenv("KAIROS_API_KEY", "env-key")
        script.add(httpx.Response(200, json=[POLICY]))
        transport = httpx.MockTransport(script)
        client = Client(api_key="arg-key", base_url="http://a", transport=transport)
        client.policies.list()
        assert script.requests[0].headers["Authorization"] == "Bearer arg-key"

    def test_no_key_no_authorization_header(self, monkeypatch: pytest.MonkeyPatch, script: Script):
        monkeypatch.delenv("KAIROS_API_KEY", raising=False)
        monkeypatch.delenv("KAIROS_BASE_URL", raising=False)
        script.add(httpx.Response(200, json=[POLICY]))
        client = Client(transport=httpx.MockTransport(script))
        client.policies.list()
        assert "Authorization" not in script.requests[0].headers
        assert script.requests[0].url.host == "127.0.0.1"

    def test_default_timeout_is_a_few_seconds(self, client: Client, script: Script):
        assert client.timeout == DEFAULT_TIMEOUT
        script.add(httpx.Response(200, json=CLUSTER), httpx.Response(200, json=CLUSTER))
        client.clusters.retrieve("c1")
        client.clusters.retrieve("c1", timeout=0.25)
        first, second = (r.extensions["timeout"] for r in script.requests)
        assert first == {"connect": 2.0, "read": 5.0, "write": 5.0, "pool": 5.0}
        assert second == {"connect": 0.25, "read": 0.25, "write": 0.25, "pool": 0.25}

    def test_user_agent_and_default_headers(self, script: Script):
        script.add(httpx.Response(200, json=CLUSTER))
        client = Client(
            base_url="http://x",
            transport=httpx.MockTransport(script),
            default_headers={"X-Team": "infra"},
        )
        client.clusters.retrieve("c1")
        headers = script.requests[0].headers
        assert headers["User-Agent"].startswith("kairos-client/")
        assert headers["X-Team"] == "infra"

    def test_negative_max_retries_rejected(self):
        with pytest.raises(ValueError, match="max_retries"):
            Client(base_url="http://x", max_retries=-1)

    def test_transport_and_http_client_are_exclusive(self):
        with pytest.raises(ValueError, match="either"):
            Client(
                base_url="http://x",
                transport=httpx.MockTransport(lambda r: httpx.Response(200)),
                http_client=httpx.Client(),
            )

    def test_not_given_is_falsy_singleton(self):
        from kairos_client import NotGiven

        assert not NOT_GIVEN
        assert NotGiven() is NOT_GIVEN
        assert repr(NOT_GIVEN) == "NOT_GIVEN"


class TestBodies:
    def test_cluster_upsert_sends_only_given_fields(self, client: Client, script: Script):
        script.add(httpx.Response(201, json=CLUSTER), httpx.Response(200, json=CLUSTER))
        cluster = client.clusters.upsert("c1", resources=["cpu"])
        assert cluster.id == "c1"
        assert cluster.free == {"cpu": 8}
        assert script.requests[0].method == "PUT"
        assert script.requests[0].url.path == "/v1/clusters/c1"
        assert script.body(0) == {"resources": ["cpu"]}
        client.clusters.upsert("c1", resources=("cpu", "gpu"), policy=None, labels={"a": "b"})
        assert script.body(1) == {"resources": ["cpu", "gpu"], "policy": None, "labels": {"a": "b"}}

    def test_ids_are_url_quoted(self, client: Client, script: Script):
        script.add(httpx.Response(200, json=job("a/b")))
        client.jobs.retrieve("c 1", "a/b")
        assert script.requests[0].url.raw_path == b"/v1/clusters/c%201/jobs/a%2Fb"

    def test_empty_id_rejected(self, client: Client):
        with pytest.raises(ValueError, match="non-empty"):
            client.clusters.retrieve("")

    def test_nodes(self, client: Client, script: Script):
        script.add(httpx.Response(200, json=NODE), httpx.Response(200, json={"nodes": [NODE]}))
        node = client.nodes.upsert("c1", "n1", capacity={"cpu": 8}, state="drain")
        assert node.free == {"cpu": 8}
        assert script.body(0) == {"capacity": {"cpu": 8}, "state": "drain"}
        nodes = client.nodes.upsert_many("c1", [{"id": "n1", "capacity": {"cpu": 8}}])
        assert [n.id for n in nodes] == ["n1"]
        assert script.requests[1].method == "PUT"
        assert script.requests[1].url.path == "/v1/clusters/c1/nodes"
        assert script.body(1) == {"nodes": [{"id": "n1", "capacity": {"cpu": 8}}]}

    def test_job_submit_and_events(self, client: Client, script: Script):
        script.add(
            httpx.Response(201, json=job("j1")),
            httpx.Response(200, json={"jobs": [job("j2"), job("j3")]}),
            httpx.Response(200, json=job("j1", "finished")),
            httpx.Response(204),
        )
        client.jobs.submit(
            "c1", id="j1", per_task={"cpu": 2}, walltime_s=60, tasks=2, depends_on=("j0",)
        )
        assert script.requests[0].method == "POST"
        assert script.body(0) == {
            "id": "j1",
            "per_task": {"cpu": 2},
            "walltime_s": 60,
            "tasks": 2,
            "depends_on": ["j0"],
        }
        jobs = client.jobs.submit_many(
            "c1",
            [
                {"id": "j2", "per_task": {"cpu": 1}, "walltime_s": 1},
                {"id": "j3", "per_task": {"cpu": 1}, "walltime_s": 1},
            ],
        )
        assert [j.id for j in jobs] == ["j2", "j3"]
        assert script.requests[1].url.path == "/v1/clusters/c1/jobs/batch"
        finished = client.jobs.send_event("c1", "j1", type="finished", at=1060.0)
        assert finished.state == "finished"
        assert script.body(2) == {"type": "finished", "at": 1060.0}
        assert script.requests[2].url.path == "/v1/clusters/c1/jobs/j1/events"
        client.jobs.cancel("c1", "j1")
        assert script.requests[3].method == "DELETE"

    def test_schedule_returns_typed_decision(self, client: Client, script: Script):
        script.add(httpx.Response(200, json=DECISION))
        decision = client.clusters.schedule("c1", dry_run=True, now=1000.0)
        assert isinstance(decision, Decision)
        assert decision.policy.kind == "heuristic"
        assert decision.fallback.used is False
        assert decision.allocated_job_ids() == ["j1"]
        assert decision.allocations[0].placements[0].node_id == "n1"
        assert script.body() == {"dry_run": True, "now": 1000.0}

    def test_decide(self, client: Client, script: Script):
        script.add(httpx.Response(200, json={**DECISION, "cluster_id": None}))
        decision = client.decide(
            now=5.0,
            nodes=[{"id": "n1", "capacity": {"cpu": 4}}],
            pending=[{"id": "j1", "per_task": {"cpu": 1}, "walltime_s": 10}],
            policy="sjf",
        )
        assert decision.cluster_id is None
        assert script.requests[0].url.path == "/v1/decide"
        assert script.body() == {
            "now": 5.0,
            "nodes": [{"id": "n1", "capacity": {"cpu": 4}}],
            "running": [],
            "pending": [{"id": "j1", "per_task": {"cpu": 1}, "walltime_s": 10}],
            "policy": "sjf",
        }
        assert "Idempotency-Key" in script.requests[0].headers

    def test_policies(self, client: Client, script: Script, tmp_path):
        script.add(
            httpx.Response(200, json=[POLICY]),
            httpx.Response(200, json=POLICY),
            httpx.Response(201, json={**POLICY, "name": "ppo", "kind": "onnx"}),
        )
        assert [p.name for p in client.policies.list()] == ["sjf"]
        assert isinstance(client.policies.retrieve("sjf"), Policy)
        model = tmp_path / "policy.onnx"
        model.write_bytes(b"\x08\x01onnx")
        uploaded = client.policies.upload(model, {"name": "ppo"})
        assert uploaded.kind == "onnx"
        request = script.requests[2]
        assert request.headers["Content-Type"].startswith("multipart/form-data")
        assert b'name="model"; filename="policy.onnx"' in request.content
        assert b'{"name": "ppo"}' in request.content
        assert "Idempotency-Key" in request.headers

    def test_shadow_report(self, client: Client, script: Script):
        report = {
            "cluster_id": "c1",
            "shadow_policy": "ppo@1",
            "decisions": 4,
            "compared": 4,
            "agreed": 3,
            "agreement_rate": 0.75,
            "policies": [
                {
                    "shadow_policy": "ppo@1",
                    "compared": 4,
                    "agreed": 3,
                    "agreement_rate": 0.75,
                    "jobs_primary_only": 1,
                    "jobs_shadow_only": 0,
                }
            ],
        }
        script.add(httpx.Response(200, json=report))
        got = client.clusters.shadow_report("c1")
        assert script.requests[0].url.path == "/v1/clusters/c1/shadow-report"
        assert got.agreement_rate == 0.75
        assert got.policies[0].jobs_primary_only == 1

    def test_health(self, client: Client, script: Script, sleeps: list[float]):
        script.add(httpx.Response(200, json={"database": "ok", "queue": "ok", "policies": "ok"}))
        assert client.health()["database"] == "ok"
        script.add(httpx.Response(503, json={"database": "down", "queue": "ok", "policies": "ok"}))
        assert client.health()["database"] == "down"  # an answer, not retried
        assert len(script.requests) == 2
        assert sleeps == []


class TestAsyncBodies:
    async def test_quick_start_shapes(self, aclient: AsyncClient, script: Script):
        script.add(
            httpx.Response(201, json=CLUSTER),
            httpx.Response(200, json={"nodes": [NODE]}),
            httpx.Response(201, json=job("j1")),
            httpx.Response(200, json=DECISION),
            httpx.Response(200, json={**DECISION, "input": {"now": 1.0}}),
            httpx.Response(200, json={"items": [DECISION], "next_cursor": None}),
            httpx.Response(200, json=[POLICY]),
            httpx.Response(200, json=DECISION),
        )
        await aclient.clusters.upsert("c1", resources=["cpu"])
        await aclient.nodes.upsert_many("c1", [{"id": "n1", "capacity": {"cpu": 8}}])
        await aclient.jobs.submit("c1", id="j1", per_task={"cpu": 2}, walltime_s=60)
        decision = await aclient.clusters.schedule("c1")
        detail = await aclient.decisions.retrieve(decision.id)
        assert (detail.id, detail.input) == ("d1", {"now": 1.0})
        assert [d.id async for d in aclient.decisions.list("c1")] == ["d1"]
        assert (await aclient.policies.list())[0].name == "sjf"
        await aclient.decide(now=1.0, nodes=[], pending=[])
        paths = [r.url.path for r in script.requests]
        assert paths == [
            "/v1/clusters/c1",
            "/v1/clusters/c1/nodes",
            "/v1/clusters/c1/jobs",
            "/v1/clusters/c1/schedule",
            "/v1/decisions/d1",
            "/v1/clusters/c1/decisions",
            "/v1/policies",
            "/v1/decide",
        ]
