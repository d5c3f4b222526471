"""Recording a cluster's history through the API: jobs submitted at their times, scheduling
rounds at every arrival and completion (``now``), ``finished`` events at each job's end."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

import httpx

T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Planned:
    id: str
    submit: float
    run: float
    tasks: int
    walltime: float
    user: str


@dataclass(frozen=True)
class Ran:
    submit: float
    start: float
    end: float


def workload(n: int, seed: int, *, gap_s: float, max_tasks: int) -> list[Planned]:
    """``n`` jobs: exponential gaps of mean ``gap_s``, run times from 20 s to 2000 s (a few
    long, many short), walltimes above the run times, gangs of 1..``max_tasks``."""
    rng = random.Random(seed)
    t = T0
    out: list[Planned] = []
    for k in range(n):
        t += round(rng.expovariate(1.0 / gap_s))
        run = float(round(rng.choice([20, 30, 60, 90, 120, 600, 2000]) * rng.uniform(0.8, 1.2)))
        out.append(
            Planned(
                id=f"j{k:04d}",
                submit=t,
                run=run,
                tasks=rng.randint(1, max_tasks),
                walltime=float(round(run * rng.uniform(1.0, 3.0))),
                user=f"u{rng.randint(1, 4)}",
            )
        )
    return out


async def _ok(response: Any, status: int | tuple[int, ...] = 200) -> dict[str, Any]:
    r = await response
    assert r.status_code in ((status,) if isinstance(status, int) else status), r.text
    body: dict[str, Any] = r.json()
    return body


async def setup_cluster(
    client: httpx.AsyncClient, cid: str, *, nodes: int, cpu: float, **cluster: Any
) -> None:
    body = {"name": "tuned", "resources": ["cpu"], **cluster}
    await _ok(client.put(f"/v1/clusters/{cid}", json=body), 201)
    await _ok(
        client.put(
            f"/v1/clusters/{cid}/nodes",
            json={"nodes": [{"id": f"n{i}", "capacity": {"cpu": cpu}} for i in range(nodes)]},
        )
    )


async def record(client: httpx.AsyncClient, cid: str, jobs: list[Planned]) -> dict[str, Ran]:
    """Drive ``jobs`` through the cluster until every one finished; what really happened."""
    plan = {j.id: j for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.id))
    running: dict[str, float] = {}
    ran: dict[str, Ran] = {}
    i, pending = 0, 0
    t = arrivals[0].submit
    while True:
        for job_id, end in sorted(running.items(), key=lambda kv: (kv[1], kv[0])):
            if end <= t:
                await _ok(
                    client.post(
                        f"/v1/clusters/{cid}/jobs/{job_id}/events",
                        json={"type": "finished", "at": end},
                    )
                )
                del running[job_id]
        new: list[Planned] = []
        while i < len(arrivals) and arrivals[i].submit <= t:
            new.append(arrivals[i])
            i += 1
        if new:
            specs = [
                {
                    "id": j.id,
                    "tasks": j.tasks,
                    "per_task": {"cpu": 1},
                    "walltime_s": j.walltime,
                    "submit_time": j.submit,
                    "user": j.user,
                }
                for j in new
            ]
            await _ok(
                client.post(f"/v1/clusters/{cid}/jobs/batch", json={"jobs": specs}), (200, 201)
            )
            pending += len(new)
        if pending:
            decision = await _ok(client.post(f"/v1/clusters/{cid}/schedule", json={"now": t}))
            for alloc in decision["allocations"]:
                job = plan[alloc["job_id"]]
                running[job.id] = t + job.run
                ran[job.id] = Ran(job.submit, t, t + job.run)
                pending -= 1
        upcoming = ([arrivals[i].submit] if i < len(arrivals) else []) + list(running.values())
        if not upcoming:
            assert pending == 0, "jobs left that can never start"
            return ran
        t = min(upcoming)


async def wait_tune(
    client: httpx.AsyncClient, cid: str, tune_id: str, *, timeout_s: float = 600.0
) -> dict[str, Any]:
    """Poll the tune until it succeeded or failed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        body = await _ok(client.get(f"/v1/clusters/{cid}/tunes/{tune_id}"))
        if body["state"] in ("succeeded", "failed"):
            return body
        assert loop.time() < deadline, body
        await asyncio.sleep(0.2)


async def audit(client: httpx.AsyncClient, cid: str, action: str | None = None) -> list[Any]:
    """The audit events of cluster ``cid``'s tunes (newest first), optionally of one action."""
    params: dict[str, Any] = {"limit": 500, **({"action": action} if action else {})}
    body = await _ok(client.get("/v1/audit", params=params))
    return [e for e in body["items"] if e["subject"].startswith(f"{cid}/")]
