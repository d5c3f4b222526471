"""The GPU simulator's three semantics (spec section 7), all driving
:func:`app.domains.gpu.decide.decide` (the artifact's own ``tiresias`` and ``optimus`` under
``pollux-compat`` excepted, see :mod:`app.domains.gpu.compat`).

* ``pollux-compat``: the Pollux artifact's fixed 60-s grid, 16 x 4 GPUs, 30-s restart, the
  measured throughput and efficiency tables; heuristics see an oracle estimate (remaining
  iterations x iteration time at the consolidated shape) and place most-free first;
* ``philly-rigid``: rigid jobs with trace durations; decisions at every arrival, completion and
  60-s tick; a job progresses at rate 1 (no locality penalty), 30-s restart on every start;
  estimates = the trace duration unless the workload gives one;
* ``kairos``: as ``philly-rigid`` with consolidated placement charged a locality factor
  ``1 / (1 + 0.1 (k - k_min))`` for a job on ``k`` nodes where ``k_min`` would do, 2D-LAS on
  Tiresias's three queues, elastic jobs at speedup ``(g / min) ** 0.8``.

Event order at one instant: completions, then arrivals, then one decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from app.domains.gpu.compat import (
    Allocations,
    CompatJob,
    GoodputCompat,
    OptimusCompat,
    PolluxCluster,
    TiresiasCompat,
    make_jobs,
)
from app.domains.gpu.decide import decide
from app.domains.gpu.heuristics import (
    GittinsTable,
    GpuConfig,
    GpuHeuristic,
    Placement,
    get_heuristic,
)
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.metrics import RunResult
from app.domains.gpu.pollux import Application
from app.domains.gpu.types import ClusterSnapshot, GpuDecision, GpuJob, gpu_node
from app.domains.gpu.types import Placement as NodePlacement

__all__ = [
    "COMPAT_POLICIES",
    "DecideCompat",
    "EventConfig",
    "Semantics",
    "SimJob",
    "compat_config",
    "compat_jobs",
    "event_config",
    "simulate",
    "simulate_events",
    "simulate_pollux",
]

#: the artifact's own policies and Kairos's elastic goodput policy, only under pollux-compat
COMPAT_POLICIES = ("goodput-compat", "optimus-compat", "tiresias-compat")
#: the names the brief uses for them under pollux-compat
COMPAT_ALIASES: Mapping[str, str] = {
    "goodput": "goodput-compat",
    "optimus": "optimus-compat",
    "tiresias": "tiresias-compat",
}


class Semantics(StrEnum):
    POLLUX_COMPAT = "pollux-compat"
    PHILLY_RIGID = "philly-rigid"
    KAIROS = "kairos"


@dataclass(frozen=True, slots=True)
class SimJob:
    """A workload row.  Rigid: ``min_gpus == max_gpus``; ``duration_s`` is the run time at
    ``min_gpus`` on a consolidated placement; Pollux rows carry ``app`` and ``batch_size``."""

    id: str
    arrival: float
    min_gpus: int
    max_gpus: int
    duration_s: float | None = None
    estimate_s: float | None = None
    tenant: str = "default"
    app: str | None = None
    batch_size: int | None = None


@dataclass(slots=True)
class _Live:
    job: SimJob
    progress_s: float = 0.0
    allocation: tuple[NodePlacement, ...] = ()
    restart_left_s: float = 0.0
    attained: float = 0.0
    executed: float = 0.0
    starts: int = 0
    preemptions: int = 0
    rate: float = 0.0
    done_at: float | None = None

    @property
    def gpus(self) -> int:
        return sum(p.tasks for p in self.allocation)


@dataclass(frozen=True, slots=True)
class EventConfig:
    nodes: int
    gpus_per_node: int
    restart_s: float = 30.0
    tick_s: float = 60.0
    locality_lambda: float = 0.0
    elastic_alpha: float = 0.8
    decide_config: GpuConfig = field(default_factory=GpuConfig)


def _rate(live: _Live, cfg: EventConfig) -> float:
    g = live.gpus
    if g == 0:
        return 0.0
    j = live.job
    base = math.pow(g / j.min_gpus, cfg.elastic_alpha) if j.max_gpus > j.min_gpus else 1.0
    k = len({p.node_id for p in live.allocation})
    k_min = math.ceil(g / cfg.gpus_per_node)
    return base / (1.0 + cfg.locality_lambda * max(0, k - k_min))


def _advance(live: _Live, dt: float) -> None:
    g = live.gpus
    if g == 0 or dt <= 0:
        return
    live.attained += g * dt
    live.executed += dt
    delay = min(live.restart_left_s, dt)
    live.restart_left_s -= delay
    live.progress_s += live.rate * (dt - delay)


def _finish_time(live: _Live, now: float) -> float:
    if live.gpus == 0 or live.rate <= 0 or live.job.duration_s is None:
        return math.inf
    return now + live.restart_left_s + max(0.0, live.job.duration_s - live.progress_s) / live.rate


def _snapshot(now: float, cfg: EventConfig, live: Sequence[_Live]) -> ClusterSnapshot:
    nodes = tuple(gpu_node(f"n{i}", cfg.gpus_per_node) for i in range(cfg.nodes))
    jobs = tuple(
        GpuJob(
            id=lv.job.id,
            arrival=lv.job.arrival,
            min_gpus=lv.job.min_gpus,
            max_gpus=lv.job.max_gpus,
            tenant=lv.job.tenant,
            app=lv.job.app,
            estimate_s=lv.job.estimate_s,
            allocation=lv.allocation,
            attained_gpu_s=lv.attained,
            executed_s=lv.executed,
            starts=lv.starts,
            preemptions=lv.preemptions,
            restart_left_s=lv.restart_left_s,
        )
        for lv in live
    )
    return ClusterSnapshot(now=now, nodes=nodes, jobs=jobs)


def simulate_events(
    jobs: Sequence[SimJob],
    policy: GpuHeuristic | ScoredPolicy,
    cfg: EventConfig,
    *,
    max_events: int = 10**8,
) -> RunResult:
    """``philly-rigid`` / ``kairos``: every job must carry ``duration_s``."""
    total = cfg.nodes * cfg.gpus_per_node
    for j in jobs:
        if j.duration_s is None or j.duration_s < 0:
            raise ValueError(f"job {j.id!r}: event semantics need a duration >= 0")
        if j.min_gpus > total:  # it could never start: the run would never end
            raise ValueError(f"job {j.id!r} needs {j.min_gpus} GPUs; the cluster has {total}")
    lives = [_Live(j) for j in jobs]
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, jobs[i].id))
    nxt = 0
    active: list[_Live] = []
    usage: list[tuple[float, int]] = []
    now = jobs[order[0]].arrival if jobs else 0.0
    events = 0
    while nxt < len(order) or active:
        events += 1
        if events > max_events:
            raise RuntimeError("simulation did not finish")
        active = _complete(active, now)
        while nxt < len(order) and jobs[order[nxt]].arrival <= now:
            active.append(lives[order[nxt]])
            nxt += 1
        if active:
            _apply(decide(_snapshot(now, cfg, active), policy, cfg.decide_config), active, cfg)
        usage.append((now, sum(lv.gpus for lv in active)))
        candidates = [_finish_time(lv, now) for lv in active]
        if nxt < len(order):
            candidates.append(jobs[order[nxt]].arrival)
        if active:
            candidates.append((math.floor(now / cfg.tick_s) + 1) * cfg.tick_s)
        if not candidates:
            break
        t_next = max(min(candidates), now)
        for lv in active:
            _advance(lv, t_next - now)
        now = t_next
    return RunResult(
        ids=[j.id for j in jobs],
        arrivals=[j.arrival for j in jobs],
        completions=[lv.done_at if lv.done_at is not None else math.nan for lv in lives],
        preemptions=[lv.preemptions for lv in lives],
        starts=[lv.starts for lv in lives],
        total_gpus=cfg.nodes * cfg.gpus_per_node,
        usage=usage,
    )


def _complete(active: list[_Live], now: float) -> list[_Live]:
    """Mark the jobs that finish at ``now``; the others, in order."""
    for lv in active:
        if lv.gpus and _finish_time(lv, now) <= now + 1e-9:
            lv.done_at = now
    return [lv for lv in active if lv.done_at is None]


def _apply(decision: GpuDecision, active: Sequence[_Live], cfg: EventConfig) -> None:
    by_id = {lv.job.id: lv for lv in active}
    for jid in decision.preemptions:
        lv = by_id[jid]
        lv.allocation = ()
        lv.preemptions += 1
        lv.restart_left_s = 0.0
    for a in decision.allocations:
        lv = by_id[a.job_id]
        lv.allocation = a.placements
        lv.starts += 1
        lv.restart_left_s = cfg.restart_s
    for a in decision.resizes:
        lv = by_id[a.job_id]
        lv.allocation = a.placements
        lv.restart_left_s = cfg.restart_s
    for lv in active:
        lv.rate = _rate(lv, cfg)


# --- pollux-compat ------------------------------------------------------------------------


def _oracle_remaining_s(job: CompatJob) -> float:
    return job.remaining_iterations() * job.app.iteration_time(
        job.replicas, job.batch_size, optimus=False
    )


def _placements_of(alloc: Sequence[int]) -> tuple[NodePlacement, ...]:
    out: list[NodePlacement] = []
    for i, node in enumerate(alloc):
        if i == 0 or node != alloc[i - 1]:
            out.append(NodePlacement(f"n{node}", 1))
        else:
            out[-1] = NodePlacement(out[-1].node_id, out[-1].tasks + 1)
    return tuple(out)


@dataclass(slots=True)
class DecideCompat:
    """A library heuristic or a learned policy on the fixed-step cluster (section 3.6): a
    snapshot per step, decided by ``decide()``."""

    policy: GpuHeuristic | ScoredPolicy
    config: GpuConfig
    nodes: int
    gpus_per_node: int

    def snapshot(self, now: int, jobs: Sequence[CompatJob], prev: Allocations) -> ClusterSnapshot:
        return ClusterSnapshot(
            now=float(now),
            nodes=tuple(gpu_node(f"n{i}", self.gpus_per_node) for i in range(self.nodes)),
            jobs=tuple(
                GpuJob(
                    id=j.name,
                    arrival=float(j.arrival),
                    min_gpus=j.replicas,
                    max_gpus=j.replicas,
                    app=j.app.name,
                    estimate_s=j.executed_s + _oracle_remaining_s(j),
                    allocation=_placements_of(prev.get(j.name, [])),
                    attained_gpu_s=j.attained_service,
                    executed_s=float(j.executed_s),
                    starts=j.starts,
                    preemptions=j.preemptions,
                )
                for j in jobs
            ),
        )

    @staticmethod
    def allocations(d: GpuDecision, jobs: Sequence[CompatJob], prev: Allocations) -> Allocations:
        """The cluster's allocation after decision ``d`` (GPU indices per node)."""
        out = {k: v for k, v in prev.items() if k in {j.name for j in jobs}}
        for jid in d.preemptions:
            out.pop(jid, None)
        for a in (*d.allocations, *d.resizes):
            out[a.job_id] = [int(p.node_id[1:]) for p in a.placements for _ in range(p.tasks)]
        return out

    def __call__(
        self, now: int, jobs: Sequence[CompatJob], prev: Allocations, free: list[int]
    ) -> Allocations:
        del free
        snap = self.snapshot(now, jobs, prev)
        return self.allocations(decide(snap, self.policy, self.config), jobs, prev)


def compat_jobs(
    rows: Sequence[SimJob], apps: Mapping[str, Application], *, adaptive: bool = False
) -> list[CompatJob]:
    """The fixed-step cluster's jobs for workload ``rows``."""
    return make_jobs(
        [(r.id, int(r.arrival), str(r.app), r.min_gpus, int(r.batch_size or 0)) for r in rows],
        apps,
        adaptive=adaptive,
    )


def compat_config(rows: Sequence[SimJob], jobs: Sequence[CompatJob]) -> GpuConfig:
    """The ``decide()`` knobs a library heuristic or a learned policy gets under
    ``pollux-compat`` (the Gittins table from the jobs' oracle remaining service)."""
    return GpuConfig(
        placement=Placement.MOST_FREE,
        las_thresholds=(57600.0,),
        gittins=GittinsTable.of(
            [r.min_gpus * _oracle_remaining_s(j) for r, j in zip(rows, jobs, strict=True)]
        ),
    )


def simulate_pollux(
    rows: Sequence[SimJob],
    apps: Mapping[str, Application],
    policy: str | ScoredPolicy,
    *,
    nodes: int = 16,
    gpus_per_node: int = 4,
    interval: int = 60,
    restart_s: int = 30,
) -> RunResult:
    """``pollux-compat``: ``policy`` is ``tiresias``/``optimus`` (the artifact's), ``goodput``
    (elastic, adaptive jobs), a library heuristic name or a learned policy."""
    name = COMPAT_ALIASES.get(policy, policy) if isinstance(policy, str) else ""
    jobs = compat_jobs(rows, apps, adaptive=name == "goodput-compat")
    if name == "goodput-compat":
        pol: object = GoodputCompat(gpus_per_node)
    elif name == "tiresias-compat":
        pol = TiresiasCompat()
    elif name == "optimus-compat":
        pol = OptimusCompat()
    else:
        h = get_heuristic(name) if isinstance(policy, str) else policy
        pol = DecideCompat(h, compat_config(rows, jobs), nodes, gpus_per_node)
    cluster = PolluxCluster(
        jobs,
        pol,  # type: ignore[arg-type]
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        interval=interval,
        restart_s=restart_s,
    )
    res = cluster.run()
    return RunResult(
        ids=res.names,
        arrivals=[float(a) for a in res.arrivals],
        completions=[float(c) for c in res.completions],
        preemptions=res.preemptions,
        starts=res.starts,
        total_gpus=nodes * gpus_per_node,
        usage=[(float(t), g) for t, g in res.usage],
        origin_zero=True,
    )


def event_config(
    semantics: Semantics,
    nodes: int,
    gpus_per_node: int,
    gittins: GittinsTable | None = None,
) -> EventConfig:
    """The event semantics' knobs (``philly-rigid``: no locality penalty; ``kairos``: 0.1)."""
    if semantics is Semantics.POLLUX_COMPAT:
        raise ValueError("pollux-compat is a fixed-step semantics, not an event one")
    dc = GpuConfig(las_thresholds=(3250.0, 7200.0), gittins=gittins)
    lam = 0.1 if semantics is Semantics.KAIROS else 0.0
    return EventConfig(
        nodes=nodes, gpus_per_node=gpus_per_node, locality_lambda=lam, decide_config=dc
    )


def simulate(
    rows: Sequence[SimJob],
    policy: str | ScoredPolicy,
    semantics: Semantics,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    apps: Mapping[str, Application] | None = None,
) -> RunResult:
    """One policy (a heuristic's name or a learned policy) on one workload under
    ``semantics``."""
    if semantics is Semantics.POLLUX_COMPAT:
        if apps is None:
            raise ValueError("pollux-compat needs the application tables")
        return simulate_pollux(
            rows, apps, policy, nodes=nodes or 16, gpus_per_node=gpus_per_node or 4
        )
    if isinstance(policy, str) and (policy in COMPAT_ALIASES or policy in COMPAT_POLICIES):
        raise ValueError(f"{policy!r} is the Pollux artifact's policy: pollux-compat only")
    h = get_heuristic(policy) if isinstance(policy, str) else policy
    n, g = nodes or 8, gpus_per_node or 8
    rows = [r if r.estimate_s is not None else _with_estimate(r) for r in rows]
    gittins = GittinsTable.of([r.min_gpus * float(r.duration_s or 0.0) for r in rows])
    return simulate_events(rows, h, event_config(semantics, n, g, gittins))


def _with_estimate(r: SimJob) -> SimJob:
    return SimJob(
        id=r.id,
        arrival=r.arrival,
        min_gpus=r.min_gpus,
        max_gpus=r.max_gpus,
        duration_s=r.duration_s,
        estimate_s=r.duration_s if r.duration_s and r.duration_s > 0 else None,
        tenant=r.tenant,
        app=r.app,
        batch_size=r.batch_size,
    )
