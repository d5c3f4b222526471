"""The SDK on a gpu cluster, against the real app (ASGI): a gpu cluster created with its
settings' defaults, elastic jobs submitted, a round with its typed preemptions and resizes, the
job's tracked service, and a stateless GPU decision."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from kairos_client import AsyncClient

T0 = 1_767_225_600.0


async def test_gpu_cluster_through_the_sdk(app: FastAPI, cid: str) -> None:
    async with app.router.lifespan_context(app):
        sdk = AsyncClient(
            base_url="http://kairos.test", transport=httpx.ASGITransport(app=app), max_retries=0
        )
        async with sdk:
            cluster = await sdk.clusters.upsert(
                cid, resources=["gpu"], domain="gpu", policy="optimus"
            )
            assert cluster.domain == "gpu"
            assert cluster.gpu is not None
            assert cluster.gpu.restart_cost_s == 30.0
            await sdk.nodes.upsert_many(
                cid, [{"id": "n0", "capacity": {"gpu": 4}}, {"id": "n1", "capacity": {"gpu": 4}}]
            )
            job = await sdk.jobs.submit(
                cid,
                id="e",
                tasks=2,
                per_task={"gpu": 1},
                walltime_s=600.0,
                submit_time=T0,
                min_tasks=2,
                max_tasks=8,
            )
            assert (job.min_tasks, job.max_tasks) == (2, 8)
            first = await sdk.clusters.schedule(cid, now=T0 + 1)
            assert first.allocated_job_ids() == ["e"]
            await sdk.jobs.submit(
                cid, id="r", tasks=4, per_task={"gpu": 1}, walltime_s=60.0, submit_time=T0 + 5
            )
            second = await sdk.clusters.schedule(cid, now=T0 + 11)
            assert [a.job_id for a in second.resizes] == ["e"]
            assert second.preemptions == []
            e = await sdk.jobs.retrieve(cid, "e")
            assert e.service is not None
            assert (e.service.attained_gpu_s, e.service.starts) == (80.0, 1)

            d = await sdk.decide_gpu(
                now=T0,
                nodes=[{"id": "n0", "gpus": 4}],
                jobs=[
                    {
                        "id": "old",
                        "arrival": T0 - 100,
                        "min_gpus": 4,
                        "allocation": [{"node_id": "n0", "gpus": 4}],
                        "attained_gpu_s": 1e6,
                    },
                    {"id": "new", "arrival": T0 - 1, "min_gpus": 4},
                ],
                policy="las",
            )
            assert d.preemptions == ["old"]
            assert d.allocated_job_ids() == ["new"]
