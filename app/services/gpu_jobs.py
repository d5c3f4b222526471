"""Jobs on gpu clusters through the ordinary jobs endpoints (spec section 7.8).

A GPU job is a gang of ``g`` GPUs: ``tasks: g, per_task: {"gpu": 1}``; ``walltime_s`` is its
optional estimate (read by the estimate-aware heuristics only), ``user`` its tenant and
``labels["kairos/app"]`` its application. ``min_tasks`` / ``max_tasks`` make it elastic (any
size in ``min..max``, see :func:`app.services.gpu_rounds.job_size`); they are refused on other
clusters. A job's attained service is read from ``gpu_job_service`` (written by the rounds
only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.db.orm import ClusterRecord, JobRecord
from app.db.repositories.gpu_service_repository import ServiceRow, service_rows
from app.db.repositories.node_repository import NodeRepository
from app.schemas.decision import DecideRequest
from app.schemas.job import GpuServiceRead, JobCreate, JobRead
from app.services.context import Ctx
from app.services.errors import ErrorItem, UnprocessableError

__all__ = [
    "GPU_DOMAIN",
    "GPU_PER_TASK",
    "check_hpc_snapshot",
    "check_specs",
    "service_read",
    "with_service",
]

GPU_DOMAIN = "gpu"
#: what every task of a GPU job asks for: one whole GPU
GPU_PER_TASK = {"gpu": 1.0}
MAX_PROBLEMS = 100


def _elastic_fields(spec: JobCreate) -> list[str]:
    return [name for name in ("min_tasks", "max_tasks") if getattr(spec, name) is not None]


def _elastic_problems(
    specs: Iterable[tuple[str, JobCreate]], domain: str, where: str
) -> list[ErrorItem]:
    problems: list[ErrorItem] = []
    for prefix, spec in specs:
        if spec.min_tasks is None and spec.max_tasks is None:
            continue
        problems.extend(
            ErrorItem(
                f"{prefix}.{name}",
                f"only gpu clusters take elastic jobs; {where} is {domain}",
                "not_allowed",
            )
            for name in _elastic_fields(spec)
        )
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


def check_hpc_snapshot(body: DecideRequest) -> None:
    """422 naming the elastic fields (``min_tasks``, ``max_tasks``) of an hpc ``/v1/decide``
    snapshot's jobs: only gpu clusters take elastic jobs."""
    specs = [
        (f"body.pending[{i}]", s)
        for i, s in enumerate(body.pending)
        if s.min_tasks is not None or s.max_tasks is not None
    ]
    specs += [
        (f"body.running[{i}].job", r.job)
        for i, r in enumerate(body.running)
        if r.job.min_tasks is not None or r.job.max_tasks is not None
    ]
    problems = _elastic_problems(specs, "hpc", "this snapshot")
    if problems:
        raise UnprocessableError("the decide request is invalid", details=problems)


def _spec_problems(spec: JobCreate, where: str, cluster_gpus: int | None) -> list[ErrorItem]:
    problems: list[ErrorItem] = []
    if {k: float(v) for k, v in spec.per_task.items()} != GPU_PER_TASK:
        problems.append(
            ErrorItem(
                f"{where}.per_task",
                'a GPU job is a gang of tasks of one GPU each: per_task must be {"gpu": 1}',
                "gpu_per_task",
            )
        )
    low = spec.min_tasks or spec.tasks
    if spec.max_tasks is not None and spec.max_tasks < low:
        problems.append(
            ErrorItem(
                f"{where}.max_tasks",
                f"must be >= min_tasks ({low}), got {spec.max_tasks}",
                "min_above_max",
            )
        )
    elif cluster_gpus is not None and low > cluster_gpus:
        field = "min_tasks" if spec.min_tasks is not None else "tasks"
        problems.append(
            ErrorItem(
                f"{where}.{field}",
                f"the gang needs {low} GPUs, the cluster's nodes have {cluster_gpus} in all",
                "gang_exceeds_cluster",
            )
        )
    return problems


async def check_specs(
    ctx: Ctx, cluster: ClusterRecord, specs: Sequence[JobCreate], prefix: str
) -> None:
    """422 naming the fields of ``specs`` that ``cluster``'s domain cannot take: elastic fields
    on a cluster that is not gpu; on a gpu cluster a ``per_task`` other than one GPU,
    ``max_tasks`` < ``min_tasks``, or a gang (its minimum) larger than all the cluster's nodes
    together (a cluster with no nodes yet takes any size: nodes may be added)."""
    problems: list[ErrorItem] = []
    if cluster.domain != GPU_DOMAIN:
        named = ((prefix.format(i=i), spec) for i, spec in enumerate(specs))
        problems = _elastic_problems(named, cluster.domain, repr(cluster.id))
    else:
        capacities = await NodeRepository(ctx.session).capacities(cluster.pk)
        total = sum(int(float(c.get("gpu", 0.0))) for c in capacities)
        gpus = total if capacities else None
        for i, spec in enumerate(specs):
            problems.extend(_spec_problems(spec, prefix.format(i=i), gpus))
            if len(problems) >= MAX_PROBLEMS:
                break
    if problems:
        raise UnprocessableError("the job spec is invalid", details=problems[:MAX_PROBLEMS])


def service_read(record: JobRecord, row: ServiceRow | None) -> GpuServiceRead:
    """``row`` as the last round that saw the job left it (``accounted_at``) and, for a job
    that ended holding GPUs (finished or failed while running), advanced to its end."""
    if row is None:
        return GpuServiceRead(
            attained_gpu_s=0.0,
            executed_s=0.0,
            starts=0,
            preemptions=0,
            restart_left_s=0.0,
            accounted_at=None,
        )
    attained, executed, restart = row.attained_gpu_s, row.executed_s, row.restart_left_s
    accounted = row.accounted_at
    held = sum(int(p["tasks"]) for p in record.placements or ())
    end = record.end_time if record.state in ("finished", "failed") else None
    if end is not None and accounted is not None and held and end > accounted:
        dt = end - accounted
        attained += held * dt
        executed += dt
        restart = max(0.0, restart - dt)
        accounted = end
    return GpuServiceRead(
        attained_gpu_s=attained,
        executed_s=executed,
        starts=row.starts,
        preemptions=row.preemptions,
        restart_left_s=restart,
        accounted_at=accounted,
    )


async def with_service(
    ctx: Ctx, cluster: ClusterRecord, records: Iterable[JobRecord], reads: list[JobRead]
) -> list[JobRead]:
    """``reads`` (of ``records``, in the same order) with their service on a gpu cluster."""
    if cluster.domain != GPU_DOMAIN:
        return reads
    records = list(records)
    rows = await service_rows(ctx.session, [r.pk for r in records])
    return [
        read.model_copy(update={"service": service_read(rec, rows.get(rec.pk))})
        for rec, read in zip(records, reads, strict=True)
    ]
