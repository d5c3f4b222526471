"""Scheduling rounds at real cluster sizes: the stateful round and ``POST /v1/decide``.

Usage: ``python -m benchmarks.scale [--domain hpc|gpu] [--quick] [--sizes 16x64,100x1000]
[--database-url URL] [--deadline-ms MS] [--no-core] [--given] [--cell-timeout S]``

For each size (nodes x pending gangs; default 16x64, 100x1000, 1000x5000, 5000x10000 and
10000x50000, ``--quick`` the first three) a child process starts the service in process (the
app behind httpx's ASGI transport, so no socket is measured), builds the cluster through the API
as a user would (``PUT .../nodes`` and ``POST .../jobs/batch`` in chunks of 10,000; nodes of 64
cpu, 256 GB and 0, 0, 4 or 8 gpus; gangs of 1, 1, 2, 4 or 16 tasks), and then times:

* ``stateful``: one ``POST /v1/clusters/{id}/schedule`` (applied), after a dry run of it;
* ``decide``: one ``POST /v1/decide`` of the same snapshot (the body encoded beforehand);
* ``given`` (with ``--given``): the stateful round on a second cluster built the same way, its
  decision computed beforehand (a dry run) and handed back by the pipeline at no cost. The
  service still validates the snapshot, checks the decision's invariants, stores it and applies
  it: ``given`` is what the round costs around the policy, a floor that no decision core can
  go below.

Each is split into ``load`` (reading the snapshot: rows for the round, the checks and the
snapshot build for ``/v1/decide``), ``decide`` (the policy with its fallback chain), ``persist``
(storing the decision with its input and, for the round, the allocations) and ``rest`` (the
HTTP layer: body parsing, the response's JSON), with the policy that decided. ``raw`` is a
plain ``SELECT *`` of that cluster's node and job rows through the bare driver (sqlite3 or
asyncpg) on the same database in the same run, best of three; ``ratio`` is the round's total
over it. ``core`` is ``app.domains.hpc.decision.decide`` alone on the round's snapshot with the
shipped ranking policy (``--no-core`` skips it). ``peak`` is the child's peak RSS (service,
client and workload together); ``us/job`` is the total per pending job.

``--domain gpu`` times a gpu-domain cluster instead (sizes nodes x active jobs; default 100x1000
and 1000x5000): nodes of 8 GPUs, gangs of 1, 1, 2, 4, 8 or 16 GPUs, a fifth of them elastic (up
to twice their size), decided by the shipped ``gpu-v1``. Three fifths of the jobs are submitted
and one ``tiresias-2dlas`` round starts what fits; then the rest are submitted and the timed
round (after its dry run) sees running and pending jobs together. ``decide`` replays that
round's stored input through ``POST /v1/decide``; ``core`` is ``app.domains.gpu.decide.decide``
alone on it with ``gpu-v1`` scoring the running jobs + its window (as the service does).

SQLite (a fresh file per size) by default; ``--database-url postgresql://user@host:port/db``
creates a fresh database per size on that server and drops it after. The deadline is the
service's default rule unless ``--deadline-ms`` names one, so a fallback shows as the user would
see it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
SIZES = ((16, 64), (100, 1_000), (1_000, 5_000), (5_000, 10_000), (10_000, 50_000))
QUICK_SIZES = SIZES[:3]
GPU_SIZES = ((100, 1_000), (1_000, 5_000))
GPU_POLICY = "gpu-v1"
GPU_FIRST = 0.6
CHUNK = 10_000
NOW = 1_800_000_000.0


def workload(
    nodes: int, jobs: int, seed: int = 1
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Node and job bodies of the user's workload (``shared/checks/scale_round.py``)."""
    rng = random.Random(seed)
    node_bodies = [
        {"id": f"n{i}", "capacity": {"cpu": 64, "memory_gb": 256, "gpu": rng.choice([0, 0, 4, 8])}}
        for i in range(nodes)
    ]
    job_bodies = []
    for i in range(jobs):
        g = rng.choice([0, 0, 0, 1, 2, 4, 8])
        per_task: dict[str, float] = {
            "cpu": rng.choice([1, 4, 16]),
            "memory_gb": rng.choice([4, 16, 64]),
        }
        if g:
            per_task["gpu"] = min(g, 4)
        job_bodies.append(
            {
                "id": f"j{i}",
                "tasks": rng.choice([1, 1, 2, 4, 16]),
                "per_task": per_task,
                "walltime_s": float(rng.choice([60, 600, 3600, 36000])),
                "submit_time": NOW - jobs + i,
            }
        )
    return node_bodies, job_bodies


async def build_cluster(client: Any, cid: str, nodes: int, jobs: int) -> None:
    """The cluster of :func:`workload` through the API."""
    r = await client.put(f"/v1/clusters/{cid}", json={"resources": ["cpu", "memory_gb", "gpu"]})
    assert r.status_code in (200, 201), r.text
    node_bodies, job_bodies = workload(nodes, jobs)
    for k in range(0, len(node_bodies), CHUNK):
        r = await client.put(
            f"/v1/clusters/{cid}/nodes", json={"nodes": node_bodies[k : k + CHUNK]}
        )
        assert r.status_code == 200, r.text[:300]
    for k in range(0, len(job_bodies), CHUNK):
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/batch", json={"jobs": job_bodies[k : k + CHUNK]}
        )
        assert r.status_code in (200, 201), r.text[:300]


def gpu_workload(
    nodes: int, jobs: int, seed: int = 1
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Node and job bodies of the gpu-domain workload (see the module docstring)."""
    rng = random.Random(seed)
    node_bodies = [{"id": f"n{i}", "capacity": {"gpu": 8}} for i in range(nodes)]
    job_bodies = []
    for i in range(jobs):
        g = rng.choice([1, 1, 2, 4, 8, 16])
        body: dict[str, Any] = {
            "id": f"j{i}",
            "tasks": g,
            "per_task": {"gpu": 1},
            "walltime_s": float(rng.choice([600, 3600, 36000])),
            "submit_time": NOW - jobs + i,
        }
        if rng.random() < 0.2:
            body["max_tasks"] = 2 * g
        job_bodies.append(body)
    return node_bodies, job_bodies


async def _post_jobs(client: Any, cid: str, bodies: list[dict[str, Any]]) -> None:
    for k in range(0, len(bodies), CHUNK):
        r = await client.post(
            f"/v1/clusters/{cid}/jobs/batch", json={"jobs": bodies[k : k + CHUNK]}
        )
        assert r.status_code in (200, 201), r.text[:300]


async def build_gpu_cluster(client: Any, cid: str, nodes: int, jobs: int) -> None:
    """The gpu cluster of :func:`gpu_workload` through the API, with running jobs: the first
    :data:`GPU_FIRST` of the jobs, one ``tiresias-2dlas`` round at ``NOW`` (it starts all that
    fit; the learned policy would start at most its window), then the rest."""
    body = {"name": "scale", "domain": "gpu", "resources": ["gpu"], "policy": GPU_POLICY}
    r = await client.put(f"/v1/clusters/{cid}", json=body)
    assert r.status_code in (200, 201), r.text
    node_bodies, job_bodies = gpu_workload(nodes, jobs)
    r = await client.put(f"/v1/clusters/{cid}/nodes", json={"nodes": node_bodies})
    assert r.status_code == 200, r.text[:300]
    first = int(len(job_bodies) * GPU_FIRST)
    await _post_jobs(client, cid, job_bodies[:first])
    r = await client.post(
        f"/v1/clusters/{cid}/schedule", json={"now": NOW, "policy": "tiresias-2dlas"}
    )
    assert r.status_code == 200, r.text[:300]
    await _post_jobs(client, cid, job_bodies[first:])


def _gpu_core_seconds(body: dict[str, Any]) -> float:
    """``decide()`` alone on a stored gpu round's input, ``gpu-v1`` scoring the running jobs
    + its window."""
    from app.domains.gpu import codec
    from app.domains.gpu.decide import decide
    from app.policy.gpu_onnx import load_gpu_model

    state = codec.state_from_json(body)
    versions = sorted((ROOT / "models" / GPU_POLICY).iterdir(), key=lambda p: int(p.name))
    model = load_gpu_model(
        (versions[-1] / "policy.onnx").read_bytes(), (versions[-1] / "card.json").read_bytes()
    )
    policy = model.policy(model.window + sum(1 for j in state.jobs if j.running))
    started = time.perf_counter()
    decide(state, policy)
    return time.perf_counter() - started


async def _gpu_cell(
    nodes: int, jobs: int, url: str, deadline_ms: float | None, core: bool
) -> dict[str, Any]:
    import httpx

    from app.main import create_app
    from app.settings import Settings

    settings = Settings(
        DATABASE_URL=url,
        MAX_BODY_BYTES=256 * 1024 * 1024,
        MODELS_DIR=str(ROOT / "models"),
        LOG_LEVEL="warning",
    )
    app = create_app(settings)
    out: dict[str, Any] = {"nodes": nodes, "jobs": jobs}
    cid = "scale-gpu"
    now = NOW + 600.0
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://kairos", timeout=3600
        ) as c:
            started = time.perf_counter()
            await build_gpu_cluster(c, cid, nodes, jobs)
            out["upload_s"] = time.perf_counter() - started
            out["raw_s"] = await _raw_read(url, await _cluster_pk(url, cid))
            extra = {} if deadline_ms is None else {"deadline_ms": deadline_ms}

            r = await c.post(f"/v1/clusters/{cid}/schedule", json={"now": now, "dry_run": True})
            assert r.status_code == 200, r.text[:300]
            answer, out["stateful"] = await _timed(
                c, f"/v1/clusters/{cid}/schedule", json={"now": now, **extra}
            )

            detail = (await c.get(f"/v1/decisions/{answer['id']}")).json()
            decide_body = {**detail["input"], **extra}
            out["running"] = sum(1 for j in decide_body["jobs"] if j.get("allocation"))
            content = json.dumps(decide_body).encode()
            _, out["decide"] = await _timed(
                c, "/v1/decide", content=content, headers={"Content-Type": "application/json"}
            )
    if core:
        out["core_s"] = _gpu_core_seconds(decide_body)
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return out


# -- one cell, in a child process -------------------------------------------------------------


async def _raw_read(url: str, cluster_pk: int) -> float:
    """Best of three plain ``SELECT *`` of the cluster's node and job rows, bare driver."""
    best = float("inf")
    for _ in range(3):
        if url.startswith("sqlite"):
            started = time.perf_counter()
            con = sqlite3.connect(url.removeprefix("sqlite:///"))
            con.execute("SELECT * FROM nodes WHERE cluster_pk = ?", (cluster_pk,)).fetchall()
            con.execute("SELECT * FROM jobs WHERE cluster_pk = ?", (cluster_pk,)).fetchall()
            con.close()
        else:
            started = time.perf_counter()
            conn = await asyncpg.connect(_asyncpg_dsn(url))
            await conn.fetch("SELECT * FROM nodes WHERE cluster_pk = $1", cluster_pk)
            await conn.fetch("SELECT * FROM jobs WHERE cluster_pk = $1", cluster_pk)
            await conn.close()
        best = min(best, time.perf_counter() - started)
    return best


def _asyncpg_dsn(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _cluster_pk(url: str, cid: str) -> int:
    if url.startswith("sqlite"):
        con = sqlite3.connect(url.removeprefix("sqlite:///"))
        (pk,) = con.execute("SELECT pk FROM clusters WHERE id = ?", (cid,)).fetchone()
        con.close()
        return int(pk)
    conn = await asyncpg.connect(_asyncpg_dsn(url))
    pk = await conn.fetchval("SELECT pk FROM clusters WHERE id = $1", cid)
    await conn.close()
    return int(pk)


def _policy(d: dict[str, Any]) -> str:
    p = d.get("policy") or {}
    name = f"{p.get('name')}@{p.get('version')}"
    fallback = d.get("fallback") or {}
    return f"{name} (fallback: {fallback.get('reason')})" if fallback.get("used") else name


def _core_seconds(body: dict[str, Any]) -> float:
    """``decide()`` alone on the snapshot, with the shipped default policy."""
    from app.domains.hpc.decision import DecisionConfig, decide
    from app.policy.onnx_policy import OnnxPolicy
    from app.schemas.decision import DecideRequest
    from app.services.hpc_rounds import state_from_request
    from app.settings import Settings

    state = state_from_request(DecideRequest.model_validate(body))
    name = Settings().DEFAULT_POLICY
    versions = sorted((ROOT / "models" / name).iterdir(), key=lambda p: int(p.name))
    policy = OnnxPolicy.load(versions[-1])
    started = time.perf_counter()
    decide(state, policy, DecisionConfig())
    return time.perf_counter() - started


def _given_decider(answer: dict[str, Any]) -> Any:
    """A stand-in for the pipeline's ``decide_requests`` that answers every request with the
    decision ``answer`` (a ``DecisionRead`` body) at no cost."""
    from collections.abc import Sequence

    from app.domains.hpc.types import Allocation, Decision, Placement, PolicyRef, Reservation
    from app.outcomes import DecisionOutcome, DecisionRequest

    allocations = tuple(
        Allocation(a["job_id"], tuple(Placement(p["node_id"], p["tasks"]) for p in a["placements"]))
        for a in answer["allocations"]
    )
    reservations = tuple(Reservation(r["job_id"], r["start_at"]) for r in answer["reservations"])
    p = answer["policy"]
    ref = PolicyRef(p["name"], p["version"], p["kind"])

    def decide_given(
        requests: Sequence[DecisionRequest], *_: object, **__: object
    ) -> list[DecisionOutcome]:
        return [
            DecisionOutcome(
                r.request_id, Decision(allocations, reservations, len(r.state.pending), ref)
            )
            for r in requests
        ]

    return decide_given


async def _given_row(c: Any, nodes: int, jobs: int, extra: dict[str, Any]) -> dict[str, Any]:
    """The ``given`` row: a second cluster of the same workload, its round's decision computed
    by a dry run first and handed back by the pipeline for free."""
    import app.policy.pipeline as pipeline

    cid = "scale-given"
    await build_cluster(c, cid, nodes, jobs)
    r = await c.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW, "dry_run": True})
    assert r.status_code == 200, r.text[:300]
    decided = getattr(pipeline, "decide_requests")  # noqa: B009 (the function patched below)
    setattr(pipeline, "decide_requests", _given_decider(r.json()))  # noqa: B010 (a deliberate patch)
    try:
        _, row = await _timed(c, f"/v1/clusters/{cid}/schedule", json={"now": NOW, **extra})
    finally:
        setattr(pipeline, "decide_requests", decided)  # noqa: B010
    return row


async def _cell(
    nodes: int, jobs: int, url: str, deadline_ms: float | None, core: bool, given: bool = False
) -> dict[str, Any]:
    import httpx

    from app.main import create_app
    from app.settings import Settings

    settings = Settings(
        DATABASE_URL=url,
        MAX_BODY_BYTES=256 * 1024 * 1024,
        MODELS_DIR=tempfile.mkdtemp(prefix="kairos-scale-models-"),
        LOG_LEVEL="warning",
    )
    app = create_app(settings)
    out: dict[str, Any] = {"nodes": nodes, "jobs": jobs}
    cid = "scale"
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://kairos", timeout=3600
        ) as c:
            started = time.perf_counter()
            await build_cluster(c, cid, nodes, jobs)
            out["upload_s"] = time.perf_counter() - started
            out["raw_s"] = await _raw_read(url, await _cluster_pk(url, cid))
            extra = {} if deadline_ms is None else {"deadline_ms": deadline_ms}

            # the same snapshot as a /v1/decide body, encoded before the clock starts
            node_bodies, job_bodies = workload(nodes, jobs)
            decide_body = {"now": NOW, "nodes": node_bodies, "pending": job_bodies, **extra}
            content = json.dumps(decide_body).encode()

            # a dry run first, as a user previews a round (and the code paths are warm)
            r = await c.post(f"/v1/clusters/{cid}/schedule", json={"now": NOW, "dry_run": True})
            assert r.status_code == 200, r.text[:300]
            _, out["stateful"] = await _timed(
                c, f"/v1/clusters/{cid}/schedule", json={"now": NOW, **extra}
            )

            _, out["decide"] = await _timed(
                c, "/v1/decide", content=content, headers={"Content-Type": "application/json"}
            )
            if given:
                out["given"] = await _given_row(c, nodes, jobs, extra)
    if core:
        out["core_s"] = _core_seconds(decide_body)
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return out


async def _timed(c: Any, path: str, **request: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``POST path`` with the round's split recorded: the answer and its row."""
    from app.services.rounds import RoundTimings, round_timings

    timings = RoundTimings()
    token = round_timings.set(timings)
    started = time.perf_counter()
    try:
        r = await c.post(path, **request)
    finally:
        total = time.perf_counter() - started
        round_timings.reset(token)
    assert r.status_code == 200, r.text[:300]
    answer: dict[str, Any] = r.json()
    return answer, _row(answer, timings, total)


def _row(d: dict[str, Any], timings: Any, total: float) -> dict[str, Any]:
    return {
        "load_s": timings.load_s,
        "decide_s": timings.decide_s,
        "persist_s": timings.persist_s,
        "rest_s": max(0.0, total - timings.load_s - timings.decide_s - timings.persist_s),
        "total_s": total,
        "policy": _policy(d),
        "allocations": len(d.get("allocations", [])),
    }


async def _pg_database(admin_url: str) -> tuple[str, str]:
    from sqlalchemy.engine import make_url

    name = f"kairos_scale_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    conn = await asyncpg.connect(_asyncpg_dsn(admin_url))
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    return name, make_url(admin_url).set(database=name).render_as_string(hide_password=False)


async def _pg_drop(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(_asyncpg_dsn(admin_url))
    await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await conn.close()


def run_cell(
    nodes: int,
    jobs: int,
    database_url: str | None,
    deadline_ms: float | None,
    core: bool,
    domain: str = "hpc",
    given: bool = False,
) -> dict[str, Any]:
    def cell(url: str) -> Any:
        if domain == "gpu":
            return _gpu_cell(nodes, jobs, url, deadline_ms, core)
        return _cell(nodes, jobs, url, deadline_ms, core, given)

    if database_url is None:
        with tempfile.TemporaryDirectory(prefix="kairos-scale-") as tmp:
            return asyncio.run(cell(f"sqlite:///{tmp}/kairos.db"))
    name, url = asyncio.run(_pg_database(database_url))
    try:
        return asyncio.run(cell(url))
    finally:
        asyncio.run(_pg_drop(database_url, name))


# -- the parent: one child per size, then the table --------------------------------------------


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        n, _, j = item.strip().lower().partition("x")
        sizes.append((int(n), int(j)))
    return sizes


def _child(args: argparse.Namespace, nodes: int, jobs: int) -> dict[str, Any] | str:
    command = [sys.executable, "-m", "benchmarks.scale", "--cell", f"{nodes}x{jobs}"]
    command += ["--domain", args.domain]
    if args.database_url:
        command += ["--database-url", args.database_url]
    if args.deadline_ms is not None:
        command += ["--deadline-ms", str(args.deadline_ms)]
    if args.no_core:
        command.append("--no-core")
    if args.given:
        command.append("--given")
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=args.cell_timeout
        )
    except subprocess.TimeoutExpired:
        return f"over the {args.cell_timeout:.0f} s cell timeout"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed (exit {done.returncode}): {tail[:120]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _print(result: dict[str, Any]) -> None:
    size = f"{result['nodes']}x{result['jobs']}"
    if "running" in result:
        print(f"{'':<9}{size:>12}  {result['running']} of the active jobs running before")
    raw = result["raw_s"]
    for kind in ("stateful", "decide", "given"):
        row = result.get(kind)
        if row is None:
            continue
        core = result.get("core_s")
        print(
            f"{kind:<9}{size:>12}{row['load_s']:>8.3f}{row['decide_s']:>8.3f}"
            f"{row['persist_s']:>8.3f}{row['rest_s']:>8.3f}{row['total_s']:>8.3f}"
            f"{raw:>8.3f}{row['total_s'] / raw:>7.1f}x"
            f"{'-' if core is None else f'{core:.3f}':>8}{result['peak_mib']:>8.0f}"
            f"{row['total_s'] / result['jobs'] * 1e6:>8.1f}  {row['policy']}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description="Stateful rounds and /v1/decide at 16x64 .. 10000x50000 (nodes x pending), "
        "split into load, decide and persist, against a raw row read of the same database.",
    )
    parser.add_argument(
        "--domain",
        choices=("hpc", "gpu"),
        default="hpc",
        help="hpc (default) or gpu: a gpu-domain cluster decided by gpu-v1 (sizes: nodes x "
        "active jobs, default 100x1000,1000x5000)",
    )
    parser.add_argument("--quick", action="store_true", help="only the three smaller sizes")
    parser.add_argument("--sizes", help="NODESxJOBS,... (default: the five sizes of the curve)")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server URL (a fresh database is created per size); default SQLite",
    )
    parser.add_argument("--deadline-ms", type=float, help="the requests' deadline_ms")
    parser.add_argument("--no-core", action="store_true", help="skip decide() alone")
    parser.add_argument(
        "--given",
        action="store_true",
        help="hpc: also time the round with its decision given for free (a second cluster): "
        "what the service costs around the policy",
    )
    parser.add_argument("--cell-timeout", type=float, default=1800.0, help="seconds per size")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cell:
        ((nodes, jobs),) = parse_sizes(args.cell)
        print(
            json.dumps(
                run_cell(
                    nodes,
                    jobs,
                    args.database_url,
                    args.deadline_ms,
                    not args.no_core,
                    args.domain,
                    args.given,
                )
            )
        )
        return 0
    default = GPU_SIZES if args.domain == "gpu" else QUICK_SIZES if args.quick else SIZES
    sizes = parse_sizes(args.sizes) if args.sizes else list(default)
    backend = "PostgreSQL" if args.database_url else "SQLite (embedded default)"
    per = "active" if args.domain == "gpu" else "pending"
    print(
        f"scale ({args.domain}): {backend}; seconds; ratio = total / raw row read; peak MiB; "
        f"us per {per} job"
    )
    print(
        f"{'kind':<9}{'size':>12}{'load':>8}{'decide':>8}{'persist':>8}{'rest':>8}{'total':>8}"
        f"{'raw':>8}{'ratio':>8}{'core':>8}{'peak':>8}{'us/job':>8}  policy"
    )
    failed = 0
    for nodes, jobs in sizes:
        result = _child(args, nodes, jobs)
        if isinstance(result, str):
            failed += 1
            print(f"{'-':<9}{f'{nodes}x{jobs}':>12}  {result}")
            continue
        _print(result)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
