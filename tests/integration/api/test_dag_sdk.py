"""The SDK on a dag cluster, against the real app (ASGI): DAGs submitted, a round with its
typed slot grants, task events through ``jobs.send_event``, a DAG run to its JCT, listing,
cancellation and a stateless DAG decision."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from kairos_client import AsyncClient

T0 = 1_767_225_600.0


async def test_dag_cluster_through_the_sdk(app: FastAPI, cid: str) -> None:
    async with app.router.lifespan_context(app):
        sdk = AsyncClient(
            base_url="http://kairos.test", transport=httpx.ASGITransport(app=app), max_retries=0
        )
        async with sdk:
            cluster = await sdk.clusters.upsert(cid, resources=["cpu"], domain="dag", policy="fair")
            assert cluster.domain == "dag"
            await sdk.nodes.upsert_many(cid, [{"id": "n0", "capacity": {"cpu": 4}}])
            dag = await sdk.dags.submit(
                cid,
                id="q",
                submit_time=T0,
                stages=[
                    {"id": "map", "tasks": 3, "per_task": {"cpu": 1}, "task_duration_s": 2.0},
                    {
                        "id": "reduce",
                        "tasks": 1,
                        "per_task": {"cpu": 1},
                        "task_duration_s": 1.0,
                        "depends_on": ["map"],
                    },
                ],
            )
            assert (dag.state, [s.job_id for s in dag.stages]) == ("pending", ["q:map", "q:reduce"])
            first = await sdk.clusters.schedule(cid, now=T0 + 1)
            assert first.allocations[0].job_id == "q:map"
            assert first.allocations[0].parallelism_limit == 4
            assert [r.job_id for r in first.reservations] == ["q:reduce"]
            assert first.reservations[0].start_at is None
            await sdk.jobs.send_event(cid, "q:map", type="task_finished", count=3, at=T0 + 3)
            second = await sdk.clusters.schedule(
                cid, now=T0 + 3, trigger={"type": "stage_released", "job_id": "q:map"}
            )
            assert second.allocated_job_ids() == ["q:reduce"]
            await sdk.jobs.send_event(cid, "q:reduce", type="task_finished", at=T0 + 4)
            done = await sdk.dags.retrieve(cid, "q")
            assert (done.state, done.jct_s, done.finished_tasks) == ("finished", 4.0, 4)
            await sdk.dags.submit(
                cid,
                id="w",
                stages=[{"id": "s", "tasks": 2, "per_task": {"cpu": 1}, "task_duration_s": 1.0}],
            )
            page = await sdk.dags.list(cid, state="pending")
            assert [d.id for d in page.items] == ["w"]
            await sdk.dags.cancel(cid, "w")
            assert (await sdk.dags.retrieve(cid, "w")).state == "cancelled"

            d = await sdk.decide_dag(
                now=T0,
                nodes=[{"id": "n0", "capacity": {"cpu": 2}}],
                dags=[
                    {
                        "spec": {
                            "id": "x",
                            "stages": [
                                {
                                    "id": "a",
                                    "tasks": 5,
                                    "per_task": {"cpu": 1},
                                    "task_duration_s": 1.0,
                                }
                            ],
                        }
                    }
                ],
            )
            assert d.cluster_id is None
            assert [(a.job_id, a.placements[0].tasks) for a in d.allocations] == [("x:a", 2)]
