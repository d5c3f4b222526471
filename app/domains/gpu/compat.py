"""``pollux-compat`` semantics (spec sections 3.1-3.3): the Pollux artifact's fixed-step cluster,
its job model and its own Tiresias+TunedJobs and Optimus+Oracle+TunedJobs policies.

Invariants of the step (each needed for the exact per-job JCTs of the artifact):

* every ``interval`` seconds: every job advances ``interval`` seconds under its placement, the
  clock advances, the active jobs (``clock >= arrival``, not completed, in workload order) are
  allocated by the policy, and every job whose allocation (a list of node indices, one per GPU)
  differs from the previous one is re-allocated;
* a (re)allocation costs ``restart_s`` during which the job holds its GPUs and accrues attained
  service but makes no progress;
* node choice is "most free GPUs, lowest index on ties", ``min(free, needed)`` at a time;
* an epoch boundary crossed inside a step ends after ``round((P(e+1) - progress) / goodput)``
  seconds (round half to even); completion is the clock at the crossing past the completion
  epoch.

``goodput`` (:class:`GoodputCompat`) is Kairos's elastic policy of this semantics: adaptive
jobs (the batch of :meth:`~app.domains.gpu.pollux.Application.best_batch` at every placement and
epoch) and GPUs shared out by marginal gain of Pollux's fairness objective.

Besides the artifact's two policies, any heuristic of :mod:`app.domains.gpu.heuristics` runs
here through :func:`app.domains.gpu.decide.decide` on a snapshot of the step (section 3.6).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from app.domains.gpu.pollux import Application, batch_split, consolidated_shape

__all__ = [
    "CompatJob",
    "CompatPolicy",
    "GoodputCompat",
    "OptimusCompat",
    "PolluxCluster",
    "TiresiasCompat",
    "most_free_fill",
]

#: allocations: job name -> node index per GPU, in allocation order
Allocations = dict[str, list[int]]


def most_free_fill(free: list[int], needed: int) -> list[int]:
    """Node index per GPU: repeatedly the node with the most free GPUs (lowest index on ties),
    taking ``min(free, still needed)``; ``free`` is updated in place."""
    out: list[int] = []
    while len(out) < needed:
        best = 0
        for i in range(1, len(free)):
            if free[i] > free[best]:
                best = i
        if free[best] <= 0:
            raise ValueError(f"no free GPU left for {needed - len(out)} more")
        take = min(free[best], needed - len(out))
        out.extend([best] * take)
        free[best] -= take
    return out


def placement_of(alloc: Sequence[int]) -> tuple[int, ...]:
    """GPUs per node in allocation order (a run of one node index is one entry)."""
    out: list[int] = []
    for i, node in enumerate(alloc):
        if i == 0 or node != alloc[i - 1]:
            out.append(1)
        else:
            out[-1] += 1
    return tuple(out)


@dataclass(slots=True)
class CompatJob:
    """One job of the Pollux job model: TunedJobs (a fixed global batch size) or, when
    ``adaptive``, the batch that maximises goodput on its placement at its epoch (Pollux's
    jobs; ``batch_size`` and ``replicas`` are then the workload's and unused)."""

    name: str
    app: Application
    arrival: int
    batch_size: int
    replicas: int
    completion_time: int | None = None
    current_time: int = 0
    rescale_time: int = 0
    placement: tuple[int, ...] = ()
    atomic_bsz: int = 0
    accum_steps: int = 0
    progress: float = 0.0
    epoch: int = 0
    attained_service: float = 0.0
    restarts: int | None = None
    #: seconds held (restart delays included), counted per step held at its start
    executed_s: int = 0
    starts: int = 0
    preemptions: int = 0
    adaptive: bool = False

    def update_local_bsz(self) -> None:
        shape = tuple(g for g in self.placement if g)
        if self.adaptive:
            choice = self.app.best_batch(shape, self.epoch)
            if choice is None:
                raise ValueError(f"{self.name}: no feasible batch on {shape}")
            self.atomic_bsz, self.accum_steps = choice.atomic_bsz, choice.accum_steps
            return
        r = sum(shape)
        force = self.batch_size > self.app.init_batch_size
        self.atomic_bsz, self.accum_steps = batch_split(
            self.app, self.batch_size, r, force_accum_single=force
        )

    def step(self, seconds: int) -> None:
        if not self.placement:
            self.current_time += seconds
            return
        gpus = sum(self.placement)
        delay = min(self.rescale_time, seconds)
        self.current_time += delay
        self.attained_service += delay * gpus
        self.rescale_time -= delay
        seconds -= delay
        app = self.app
        while seconds > 0 and self.completion_time is None:
            goodput = app.goodput(self.placement, self.atomic_bsz, self.accum_steps, self.epoch)
            next_progress = app.progress(self.epoch + 1)
            if self.progress + goodput * seconds < next_progress:
                self.progress += goodput * seconds
                self.current_time += seconds
                self.attained_service += seconds * gpus
                seconds = 0
            else:
                self.epoch += 1
                delta = round(float((next_progress - self.progress) / goodput))
                if self.epoch > app.completion_epoch:
                    self.completion_time = self.current_time + delta
                self.progress = next_progress
                self.current_time += delta
                self.attained_service += delta * gpus
                seconds -= delta
            self.update_local_bsz()
        self.current_time += seconds

    def reallocate(self, placement: tuple[int, ...], restart_s: int) -> None:
        if placement:
            if not self.placement:
                self.starts += 1
            self.placement = placement
            self.update_local_bsz()
            self.rescale_time = restart_s
            self.restarts = 0 if self.restarts is None else self.restarts + 1
        else:
            if self.placement and self.completion_time is None:
                self.preemptions += 1
            self.placement = ()
            self.atomic_bsz = 0

    def remaining_iterations(self) -> float:
        """Iterations left to the completion epoch (1 once there), as Optimus computes them."""
        if self.app.completion_epoch <= self.epoch:
            return 1.0
        return self.app.iteration(self.batch_size, self.app.completion_epoch) - self.app.iteration(
            self.batch_size, self.epoch
        )


class CompatPolicy:
    """A policy of the fixed-step cluster: the active jobs (workload order) and the previous
    allocations in, the complete allocation out."""

    def optimize(
        self, now: int, jobs: Sequence[CompatJob], prev: Allocations, free: list[int]
    ) -> Allocations:  # pragma: no cover - interface
        raise NotImplementedError


class TiresiasCompat(CompatPolicy):
    """The artifact's Tiresias+TunedJobs: two queues split at ``threshold`` GPU-seconds of
    executed time x replicas, executed time counted in whole steps while marked running,
    count-only admission Q0 then Q1 (skip), most-free placement, no starvation promotion."""

    def __init__(self, threshold_gpu_s: int = 3600 * 16) -> None:
        self.threshold = threshold_gpu_s
        self.q0: list[str] = []
        self.q1: list[str] = []
        self.running: dict[str, bool] = {}
        self.last_check: dict[str, int] = {}
        self.executed: dict[str, int] = {}

    def _update_queues(self, now: int, jobs: Sequence[CompatJob]) -> None:
        """New jobs enter Q0; running jobs add the time since the last check and demote."""
        for j in jobs:
            if j.name not in self.running:
                self.running[j.name] = False
                self.q0.append(j.name)
        for j in jobs:
            k = j.name
            elapsed = now - self.last_check.get(k, 0)
            self.last_check[k] = now
            if self.running[k]:
                self.executed[k] = self.executed.get(k, 0) + elapsed
                if k in self.q0 and self.executed[k] * j.replicas >= self.threshold:
                    self.q0.remove(k)
                    self.q1.append(k)

    def optimize(
        self, now: int, jobs: Sequence[CompatJob], prev: Allocations, free: list[int]
    ) -> Allocations:
        by_name = {j.name: j for j in jobs}
        self.q0 = [k for k in self.q0 if k in by_name]
        self.q1 = [k for k in self.q1 if k in by_name]
        self.running = {k: v for k, v in self.running.items() if k in by_name}
        allocations = {k: v for k, v in prev.items() if k in by_name}
        self._update_queues(now, jobs)
        num_gpus = sum(free) + sum(len(v) for v in allocations.values())
        for queue in (self.q0, self.q1):
            for k in queue:
                need = by_name[k].replicas
                if need <= num_gpus:
                    self.running[k] = True
                    num_gpus -= need
                else:
                    self.running[k] = False
                    allocations.pop(k, None)
        free_now = list(free)
        for k, v in prev.items():
            if k in by_name and k not in allocations:
                for node in v:
                    free_now[node] += 1
        for queue in (self.q0, self.q1):
            for k in queue:
                if self.running[k] and not allocations.get(k):
                    allocations[k] = most_free_fill(free_now, by_name[k].replicas)
        return allocations


class OptimusCompat(CompatPolicy):
    """The artifact's Optimus+Oracle+TunedJobs: one GPU per job (workload order, while GPUs
    last), then one more GPU at a time to the largest positive marginal gain
    ``(T(r) - T(r + 1)) * remaining iterations`` (first on ties), capped at
    ``batch // min_local`` replicas (ncf 1); allocations of unchanged size are kept, the others
    placed in increasing replica count, most-free first."""

    def optimize(
        self,
        now: int,  # noqa: ARG002 - the interface's; Optimus is memoryless
        jobs: Sequence[CompatJob],
        prev: Allocations,
        free: list[int],
    ) -> Allocations:
        by_name = {j.name: j for j in jobs}
        allocations = {k: v for k, v in prev.items() if k in by_name}
        total = list(free)
        for v in prev.values():
            for node in v:
                total[node] += 1
        replicas = self._replicas(jobs, sum(total))
        allocations = {k: v for k, v in allocations.items() if len(v) == replicas[k]}
        used = [0] * len(free)
        for v in allocations.values():
            for node in v:
                used[node] += 1
        free_now = [total[i] - used[i] for i in range(len(total))]
        for k in sorted(by_name, key=lambda k: replicas[k]):
            if replicas[k] > 0 and not allocations.get(k):
                allocations[k] = most_free_fill(free_now, replicas[k])
        return allocations

    @staticmethod
    def _replicas(jobs: Sequence[CompatJob], num_gpus: int) -> dict[str, int]:
        by_name = {j.name: j for j in jobs}
        remaining = {j.name: j.remaining_iterations() for j in jobs}
        cap = {
            j.name: 1 if j.app.name == "ncf" else j.batch_size // j.app.min_local_bsz for j in jobs
        }

        def t(j: CompatJob, r: int) -> float:
            return j.app.iteration_time(r, j.batch_size, optimus=True)

        replicas: dict[str, int] = {}
        gain: dict[str, float] = {}
        for j in jobs:
            k = j.name
            if num_gpus < 1:
                replicas[k] = 0
                gain[k] = 0.0
                continue
            replicas[k] = 1
            num_gpus -= 1
            if replicas[k] + 1 > cap[k] or num_gpus < 1:
                gain[k] = 0.0
            else:
                gain[k] = (t(j, 1) - t(j, 2)) * remaining[k]
        while num_gpus > 0 and gain and max(gain.values()) > 0:
            best = max(gain, key=lambda k: gain[k])
            j = by_name[best]
            replicas[best] += 1
            r = replicas[best]
            if r + 1 > cap[best] or num_gpus < 1:
                gain[best] = 0.0
            else:
                gain[best] = (t(j, r) - t(j, r + 1)) * remaining[best]
            num_gpus -= 1
        return replicas


class GoodputCompat(CompatPolicy):
    """Goodput-driven elastic allocation for adaptive jobs (Pollux's objective, greedily).

    Each step: one GPU to each job in least-attained-service order (ties: arrival, name) while
    GPUs last; then one GPU at a time to the job whose next GPU most raises the power mean
    ``p = -1`` of the speedups, i.e. the largest ``1/S(g) - 1/S(g + 1)`` (ties: arrival, name),
    where ``S(g)`` is the job's best goodput at the consolidated shape of ``g`` GPUs over its
    best goodput on one GPU, at its current epoch; a job grows while that is positive, up to
    ``max batch // min local`` replicas (ncf: 1, everyone: the cluster).  Allocations whose size
    is unchanged are kept; the others are placed largest first, most-free node first.
    Requires adaptive jobs (:func:`make_jobs` with ``adaptive=True``)."""

    def __init__(self, gpus_per_node: int = 4) -> None:
        self.gpus_per_node = gpus_per_node

    def speedup(self, job: CompatJob, gpus: int) -> float:
        """``S(gpus)`` of the class docstring (0 for no GPU or an infeasible shape)."""
        if gpus <= 0:
            return 0.0
        one = job.app.best_batch((1,), job.epoch)
        many = job.app.best_batch(consolidated_shape(gpus, self.gpus_per_node), job.epoch)
        if one is None or many is None:
            return 0.0
        return many.goodput / one.goodput

    @staticmethod
    def max_replicas(job: CompatJob, num_gpus: int) -> int:
        if job.app.name == "ncf":
            return 1
        return max(1, min(num_gpus, job.app.max_batch_size // job.app.min_local_bsz))

    def sizes(self, jobs: Sequence[CompatJob], num_gpus: int) -> dict[str, int]:
        """GPUs per job (0: waits this step)."""
        order = sorted(jobs, key=lambda j: (j.attained_service, j.arrival, j.name))
        size = {j.name: 0 for j in jobs}
        left = num_gpus
        for j in order[:num_gpus]:
            size[j.name] = 1
            left -= 1
        by_name = {j.name: j for j in jobs}

        def gain(j: CompatJob, g: int) -> float:
            if g + 1 > self.max_replicas(j, num_gpus):
                return 0.0
            now, more = self.speedup(j, g), self.speedup(j, g + 1)
            if now <= 0.0 or more <= now:
                return 0.0
            return 1.0 / now - 1.0 / more

        heap: list[tuple[float, int, str]] = []
        for j in order[:num_gpus]:
            g = gain(j, 1)
            if g > 0.0:
                heap.append((-g, j.arrival, j.name))
        heapq.heapify(heap)
        while left > 0 and heap:
            _, arrival, k = heapq.heappop(heap)
            size[k] += 1
            left -= 1
            g = gain(by_name[k], size[k])
            if g > 0.0:
                heapq.heappush(heap, (-g, arrival, k))
        return size

    def optimize(
        self,
        now: int,  # noqa: ARG002 - the interface's; the state is in the jobs
        jobs: Sequence[CompatJob],
        prev: Allocations,
        free: list[int],
    ) -> Allocations:
        by_name = {j.name: j for j in jobs}
        total = list(free)
        for v in prev.values():
            for node in v:
                total[node] += 1
        size = self.sizes(jobs, sum(total))
        allocations = {k: v for k, v in prev.items() if k in by_name and len(v) == size[k]}
        free_now = list(total)
        for v in allocations.values():
            for node in v:
                free_now[node] -= 1
        rest = [k for k, g in size.items() if g > 0 and k not in allocations]
        for k in sorted(rest, key=lambda k: (-size[k], by_name[k].arrival, k)):
            allocations[k] = most_free_fill(free_now, size[k])
        return allocations


@dataclass(slots=True)
class CompatResult:
    """Per job (workload order): completion time; the cluster's GPUs in use per step."""

    names: list[str]
    arrivals: list[int]
    completions: list[int]
    starts: list[int]
    preemptions: list[int]
    restarts: list[int]
    #: (clock at the decision, GPUs allocated until the next decision)
    usage: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class PolluxCluster:
    """The fixed-step cluster: ``nodes`` x ``gpus_per_node`` GPUs, one decision per
    ``interval`` seconds."""

    jobs: list[CompatJob]
    policy: CompatPolicy | Callable[[int, Sequence[CompatJob], Allocations, list[int]], Allocations]
    nodes: int = 16
    gpus_per_node: int = 4
    interval: int = 60
    restart_s: int = 30
    max_steps: int = 1_000_000
    now: int = 0
    allocations: Allocations = field(default_factory=dict)

    def _free(self) -> list[int]:
        free = [self.gpus_per_node] * self.nodes
        for v in self.allocations.values():
            for node in v:
                free[node] -= 1
        return free

    def done(self) -> bool:
        return all(j.completion_time is not None for j in self.jobs)

    def advance(self) -> list[CompatJob]:
        """One interval of progress; the jobs active after it (the finished ones' GPUs are
        released)."""
        for j in self.jobs:
            j.step(self.interval)
        self.now += self.interval
        active = [j for j in self.jobs if self.now >= j.arrival and j.completion_time is None]
        names = {j.name for j in active}
        self.allocations = {k: v for k, v in self.allocations.items() if k in names}
        return active

    def step(self) -> list[tuple[int, int]]:
        active = self.advance()
        if not active:
            return []
        opt = self.policy.optimize if isinstance(self.policy, CompatPolicy) else self.policy
        return self.apply(active, opt(self.now, active, dict(self.allocations), self._free()))

    def apply(self, active: Sequence[CompatJob], new: Allocations) -> list[tuple[int, int]]:
        """Make ``new`` the allocation of this step (restarts where a job's placement changed);
        the step's usage."""
        used = [0] * self.nodes
        for v in new.values():
            for node in v:
                used[node] += 1
        if any(u > self.gpus_per_node for u in used):
            raise AssertionError(f"over-allocated node at t={self.now}: {used}")
        for j in self.jobs:
            if new.get(j.name) != self.allocations.get(j.name):
                j.reallocate(placement_of(new.get(j.name, [])), self.restart_s)
        for j in active:
            if j.placement:
                j.executed_s += self.interval
        self.allocations = new
        return [(self.now, sum(used))]

    def run(self) -> CompatResult:
        usage: list[tuple[int, int]] = []
        steps = 0
        while not self.done():
            usage.extend(self.step())
            steps += 1
            if steps > self.max_steps:
                raise RuntimeError(f"not finished after {steps} steps")
        return CompatResult(
            names=[j.name for j in self.jobs],
            arrivals=[j.arrival for j in self.jobs],
            completions=[int(j.completion_time or 0) for j in self.jobs],
            starts=[j.starts for j in self.jobs],
            preemptions=[j.preemptions for j in self.jobs],
            restarts=[j.restarts or 0 for j in self.jobs],
            usage=usage,
        )


def make_jobs(
    rows: Sequence[tuple[str, int, str, int, int]],
    apps: Mapping[str, Application],
    *,
    adaptive: bool = False,
) -> list[CompatJob]:
    """Jobs from Pollux workload rows ``(name, time, application, num_replicas, batch_size)``
    (``adaptive``: Pollux-style jobs that choose their batch)."""
    return [
        CompatJob(name=n, app=apps[a], arrival=t, batch_size=b, replicas=r, adaptive=adaptive)
        for n, t, a, r, b in rows
    ]
