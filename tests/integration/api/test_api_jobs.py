"""Jobs over HTTP: submission (idempotent), batches, listing, events, cancellation."""

from __future__ import annotations

import httpx

from app.main import create_app
from app.settings import Settings
from tests.conftest import open_client
from tests.factories import job_spec, make_cluster


class TestSubmitJob:
    async def test_created_then_idempotent_then_conflict(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        first = await client.post(url, json=job_spec("j1", cpu=4))
        assert first.status_code == 201
        assert first.json()["state"] == "pending"
        again = await client.post(url, json=job_spec("j1", cpu=4))
        assert again.status_code == 200
        assert again.json() == first.json()
        other = await client.post(url, json=job_spec("j1", cpu=8))
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "job_conflict"

    async def test_default_submit_time_resubmission_is_idempotent(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        await make_cluster(client, cid)
        spec = {"id": "j", "per_task": {"cpu": 1}, "walltime_s": 5}
        a = await client.post(f"/v1/clusters/{cid}/jobs", json=spec)
        b = await client.post(f"/v1/clusters/{cid}/jobs", json=spec)
        assert (a.status_code, b.status_code) == (201, 200)
        assert a.json()["submit_time"] == b.json()["submit_time"]

    async def test_invalid_specs_are_422(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        cases = {
            "body.tasks": job_spec("a", tasks=0),
            "body.walltime_s": job_spec("b", walltime_s=0),
            "body.per_task.cpu": job_spec("c", cpu=-1),
            "body.per_task.tpu": job_spec("d", per_task={"tpu": 1}),
            "body.id": job_spec("bad id!"),
        }
        for field, body in cases.items():
            r = await client.post(url, json=body)
            assert r.status_code == 422, (field, r.text)
            err = r.json()["error"]
            assert err["code"] == "validation_error"
            assert field in [d["field"] for d in err["details"]], (field, err)

    async def test_nan_walltime_is_rejected(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        raw = b'{"id": "x", "per_task": {"cpu": 1}, "walltime_s": NaN}'
        r = await client.post(
            f"/v1/clusters/{cid}/jobs", content=raw, headers={"content-type": "application/json"}
        )
        assert r.status_code in (400, 422)
        assert r.json()["error"]["code"] in ("malformed_json", "validation_error")

    async def test_unknown_cluster_is_404(self, client: httpx.AsyncClient, cid: str) -> None:
        r = await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("j"))
        assert r.status_code == 404


class TestBatch:
    async def test_batch_all_or_nothing(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        await client.post(url, json=job_spec("exists", cpu=2))
        bad = {"jobs": [job_spec("new1"), job_spec("exists", cpu=3)]}
        r = await client.post(f"{url}/batch", json=bad)
        assert r.status_code == 409
        assert (await client.get(f"{url}/new1")).status_code == 404
        good = {"jobs": [job_spec(f"b{i}") for i in range(300)] + [job_spec("exists", cpu=2)]}
        r = await client.post(f"{url}/batch", json=good)
        assert r.status_code == 201
        assert len(r.json()["jobs"]) == 301
        r = await client.post(f"{url}/batch", json=good)
        assert r.status_code == 200

    async def test_batch_limits(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        r = await client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": []})
        assert r.status_code == 422

    async def test_ten_thousand_jobs(self, settings: Settings, cid: str) -> None:
        app = create_app(settings.model_copy(update={"MAX_BODY_BYTES": 8 * 1024 * 1024}))
        async for client in open_client(app):
            await make_cluster(client, cid)
            jobs = [
                {"id": f"j{i}", "per_task": {"cpu": 1}, "walltime_s": 60} for i in range(10_001)
            ]
            url = f"/v1/clusters/{cid}/jobs/batch"
            r = await client.post(url, json={"jobs": jobs})
            assert r.status_code == 422
            r = await client.post(url, json={"jobs": jobs[:10_000]})
            assert r.status_code == 201
            assert len(r.json()["jobs"]) == 10_000
            counts = (await client.get(f"/v1/clusters/{cid}")).json()
            assert counts["pending_jobs"] == 10_000

    async def test_ten_thousand_with_one_bad_job_stores_none(
        self, settings: Settings, cid: str
    ) -> None:
        app = create_app(settings.model_copy(update={"MAX_BODY_BYTES": 8 * 1024 * 1024}))
        async for client in open_client(app):
            await make_cluster(client, cid)
            url = f"/v1/clusters/{cid}/jobs"
            assert (await client.post(url, json=job_spec("old", cpu=2))).status_code == 201
            jobs = [{"id": f"j{i}", "per_task": {"cpu": 1}, "walltime_s": 60} for i in range(9_999)]
            for bad, status, field in [
                (job_spec("old", cpu=3), 409, "body.jobs[9999].id"),
                (job_spec("x", per_task={"tpu": 1}), 422, "body.jobs[9999].per_task.tpu"),
            ]:
                r = await client.post(f"{url}/batch", json={"jobs": [*jobs, bad]})
                assert r.status_code == status, r.text
                assert field in [d["field"] for d in r.json()["error"]["details"]]
                counts = (await client.get(f"/v1/clusters/{cid}")).json()
                assert counts["pending_jobs"] == 1
                assert (await client.get(f"{url}/j0")).status_code == 404
                assert (await client.get(f"{url}/j9998")).status_code == 404


class TestListGetCancel:
    async def test_list_filter_and_pages(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        url = f"/v1/clusters/{cid}/jobs"
        await client.post(f"{url}/batch", json={"jobs": [job_spec(f"j{i}") for i in range(5)]})
        assert (await client.delete(f"{url}/j0")).status_code == 204
        pending = (await client.get(url, params={"state": "pending", "limit": 3})).json()
        assert [j["id"] for j in pending["items"]] == ["j1", "j2", "j3"]
        nxt = (
            await client.get(url, params={"state": "pending", "cursor": pending["next_cursor"]})
        ).json()
        assert [j["id"] for j in nxt["items"]] == ["j4"]
        cancelled = (await client.get(url, params={"state": "cancelled"})).json()
        assert [j["id"] for j in cancelled["items"]] == ["j0"]
        assert (await client.get(url, params={"state": "bogus"})).status_code == 422

    async def test_get_unknown_job_is_404(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        r = await client.get(f"/v1/clusters/{cid}/jobs/nope")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "job_not_found"


class TestEvents:
    async def test_lifecycle(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid, nodes=1, cpu=8)
        url = f"/v1/clusters/{cid}/jobs"
        await client.post(url, json=job_spec("j", cpu=8))
        # finishing a pending job is not allowed
        r = await client.post(f"{url}/j/events", json={"type": "finished"})
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "invalid_transition"
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={})).json()
        assert [a["job_id"] for a in d["allocations"]] == ["j"]
        job = (await client.get(f"{url}/j")).json()
        assert job["state"] == "running"
        assert job["decision_id"] == d["id"]
        # released: back to pending, node freed
        r = await client.post(f"{url}/j/events", json={"type": "released"})
        assert r.json()["state"] == "pending"
        assert r.json()["placements"] == []
        assert (await client.get(f"/v1/clusters/{cid}")).json()["allocated"]["cpu"] == 0.0
        await client.post(f"/v1/clusters/{cid}/schedule", json={})
        r = await client.post(f"{url}/j/events", json={"type": "finished", "at": 1.7e9})
        assert r.status_code == 200
        assert (r.json()["state"], r.json()["end_time"]) == ("finished", 1.7e9)
        # repeating the event is a no-op, another terminal event is a conflict
        assert (await client.post(f"{url}/j/events", json={"type": "finished"})).status_code == 200
        assert (await client.post(f"{url}/j/events", json={"type": "failed"})).status_code == 409
        assert (await client.delete(f"{url}/j")).status_code == 409
        cluster = (await client.get(f"/v1/clusters/{cid}")).json()
        assert cluster["free"]["cpu"] == 8.0
        assert cluster["running_jobs"] == 0

    async def test_transition_matrix(self, client: httpx.AsyncClient, cid: str) -> None:
        """Every event from every state: the allowed ones move the job (and free a running
        job's node), repeating the event that ended a job is a no-op, the rest are 409."""
        await make_cluster(client, cid, nodes=1, cluster={"policy": "fcfs"}, cpu=64)
        url = f"/v1/clusters/{cid}/jobs"
        events = ("finished", "failed", "released", "cancelled")
        setup = {  # state -> how to reach it from running (None: stays pending)
            "pending": None,
            "running": [],
            "finished": ["finished"],
            "failed": ["failed"],
            "cancelled": ["cancelled"],
        }
        expected = {
            ("pending", "finished"): None,
            ("pending", "failed"): "failed",
            ("pending", "released"): None,
            ("pending", "cancelled"): "cancelled",
            ("running", "finished"): "finished",
            ("running", "failed"): "failed",
            ("running", "released"): "pending",
            ("running", "cancelled"): "cancelled",
            ("finished", "finished"): "finished",
            ("failed", "failed"): "failed",
            ("cancelled", "cancelled"): "cancelled",
        }
        run = [f"{s}-{e}" for s in setup for e in events if setup[s] is not None]
        r = await client.post(f"{url}/batch", json={"jobs": [job_spec(j, cpu=1) for j in run]})
        assert r.status_code == 201
        d = (await client.post(f"/v1/clusters/{cid}/schedule", json={})).json()
        assert sorted(a["job_id"] for a in d["allocations"]) == sorted(run)
        r = await client.post(
            f"{url}/batch", json={"jobs": [job_spec(f"pending-{e}", cpu=1) for e in events]}
        )
        assert r.status_code == 201
        for state, path in setup.items():
            for event in events:
                for step in path or []:
                    r = await client.post(f"{url}/{state}-{event}/events", json={"type": step})
                    assert r.status_code == 200, r.text
        for state in setup:
            for event in events:
                job_id = f"{state}-{event}"
                r = await client.post(f"{url}/{job_id}/events", json={"type": event, "at": 5.0})
                target = expected.get((state, event))
                if target is None:
                    assert r.status_code == 409, (job_id, r.text)
                    assert r.json()["error"]["code"] == "invalid_transition"
                    target = state
                else:
                    assert r.status_code == 200, (job_id, r.text)
                job = (await client.get(f"{url}/{job_id}")).json()
                assert job["state"] == target, (job_id, job)
                if target == "pending":
                    assert job["placements"] == [], job
        cluster = (await client.get(f"/v1/clusters/{cid}")).json()
        assert cluster["running_jobs"] == 0
        assert cluster["allocated"]["cpu"] == 0.0

    async def test_unknown_job_events_and_cancel_are_404(
        self, client: httpx.AsyncClient, cid: str
    ) -> None:
        events, job = f"/v1/clusters/{cid}/jobs/j/events", f"/v1/clusters/{cid}/jobs/j"
        for code in ("cluster_not_found", "job_not_found"):
            r = await client.post(events, json={"type": "finished"})
            assert (r.status_code, r.json()["error"]["code"]) == (404, code)
            r = await client.delete(job)
            assert (r.status_code, r.json()["error"]["code"]) == (404, code)
            if code == "cluster_not_found":
                await make_cluster(client, cid)

    async def test_bad_event_type_is_422(self, client: httpx.AsyncClient, cid: str) -> None:
        await make_cluster(client, cid)
        await client.post(f"/v1/clusters/{cid}/jobs", json=job_spec("j"))
        r = await client.post(f"/v1/clusters/{cid}/jobs/j/events", json={"type": "exploded"})
        assert r.status_code == 422
        assert r.json()["error"]["details"][0]["field"] == "body.type"
