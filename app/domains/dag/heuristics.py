"""The DAG heuristics of spec section 7.4, all in the common frame of section 3.

Frame: when the round's source is a job, keep every source executor in it (a runnable stage of
the job first, else a selectable one).  Otherwise walk the jobs in the policy's order and give the
first job under its cap a stage (runnable first, else selectable; lowest index), with
``min(stage demand, cap - supply, num_source)`` executors.  ``None`` when no job is eligible.

* ``fair`` (the default fallback): cap = ceil(N / #jobs), jobs counted per the view's
  ``fair_count``;
* ``fifo``: cap = N against the live supply (Spark's FIFO as spark-sched-sim runs it);
* ``fifo_static``: decima-sim's ``spark_fifo``: cap = N against a per-job counter that only grows
  with every grant outside the source job (never refunded; compatibility baseline);
* ``sjf_cp``: jobs by smallest remaining work W_j, inside a job the selectable stage with the
  longest critical path, no cap;
* ``sjf_capped``: the same order under the fair cap;
* ``weighted_fair(alpha)``: cap_j = ceil(N W_j^alpha / sum_k W_k^alpha), alpha = 0 is ``fair``;
* ``packer``: under the fair cap, the stage whose per-task demand has the largest dot product with
  the executor capacity (Tetris' score; ties by arrival then stage index).

Ties everywhere: arrival order (the view's job order), then stage index.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from app.domains.dag.policy import Action, DagPolicy, JobView, RoundView, StageView
from app.kernel.errors import UnknownHeuristicError

__all__ = [
    "HEURISTIC_NAMES",
    "HEURISTIC_VERSION",
    "Fair",
    "Fifo",
    "FifoStatic",
    "Packer",
    "SjfCapped",
    "SjfCp",
    "WeightedFair",
    "critical_paths",
    "get_heuristic",
]

#: W_j floor (ms) so that negative alpha stays finite for a job with no work left
_MIN_WORK_MS: Final = 1.0


def critical_paths(job: JobView) -> list[float]:
    """CP(v) = d_v + max over children CP(child) (0 past a sink), finished stages count 0.

    Iterative (an explicit stack), so a DAG of any depth is fine."""
    memo: dict[int, float] = {}
    for root in range(len(job.stages)):
        stack = [root]
        while stack:
            i = stack[-1]
            if i in memo:
                stack.pop()
                continue
            st = job.stages[i]
            todo = [c for c in st.children if c not in memo]
            if todo:
                stack.extend(todo)
                continue
            own = 0.0 if st.finished else st.duration_ms
            memo[i] = own + max((memo[c] for c in st.children), default=0.0)
            stack.pop()
    return [memo[i] for i in range(len(job.stages))]


def first_stage(job: JobView) -> StageView | None:
    """A runnable stage first, else a selectable one; lowest index within each."""
    chosen: StageView | None = None
    for st in job.stages:
        if not st.selectable:
            continue
        if st.runnable:
            return st
        if chosen is None:
            chosen = st
    return chosen


def longest_path_stage(job: JobView) -> StageView | None:
    """The selectable stage with the largest critical path (ties: lowest index)."""
    best: StageView | None = None
    best_cp = -math.inf
    cps: list[float] | None = None
    for st in job.stages:
        if st.selectable:
            if cps is None:
                cps = critical_paths(job)
            if cps[st.index] > best_cp:
                best, best_cp = st, cps[st.index]
    return best


def fair_caps(view: RoundView) -> list[int]:
    if view.fair_count == "unsaturated":
        k = sum(1 for j in view.jobs if j.unsaturated)
    else:
        k = len(view.jobs)
    cap = math.ceil(view.num_executors / max(1, k))
    return [cap] * len(view.jobs)


StagePicker = Callable[[JobView], StageView | None]


@dataclass(slots=True)
class _Frame:
    """Source job first, then the first job of ``order`` under its cap."""

    name: str = "frame"
    pick: StagePicker = first_stage

    def reset(self) -> None:
        return None

    def caps(self, view: RoundView) -> Sequence[int]:
        return [view.num_executors] * len(view.jobs)

    def order(self, view: RoundView) -> Sequence[int]:
        return range(len(view.jobs))

    def supply(self, view: RoundView, j: int) -> int:
        return view.jobs[j].supply

    def granted(self, view: RoundView, action: Action) -> None:
        """Hook for stateful policies, called with every grant outside the source job."""

    def choose(self, view: RoundView) -> Action | None:
        if view.num_source <= 0:
            return None
        src = view.source_job
        if src is not None:
            st = self.pick(view.jobs[src])
            if st is not None:
                return Action(src, st.index, view.num_source, view.num_executors)
        caps = self.caps(view)
        for j in self.order(view):
            if j == src:
                continue
            supply = self.supply(view, j)
            if supply >= caps[j]:
                continue
            st = self.pick(view.jobs[j])
            if st is None:
                continue
            n = min(st.demand, caps[j] - supply, view.num_source)
            if n <= 0:
                continue
            action = Action(j, st.index, n, caps[j])
            self.granted(view, action)
            return action
        return None


@dataclass(slots=True)
class Fair(_Frame):
    name: str = "fair"

    def caps(self, view: RoundView) -> Sequence[int]:
        return fair_caps(view)


@dataclass(slots=True)
class Fifo(_Frame):
    name: str = "fifo"


@dataclass(slots=True)
class FifoStatic(_Frame):
    """decima-sim's ``spark_fifo``: the per-job counter only grows (stateful per episode)."""

    name: str = "fifo_static"
    granted_to: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.granted_to.clear()

    def supply(self, view: RoundView, j: int) -> int:
        return self.granted_to.get(view.jobs[j].id, 0)

    def granted(self, view: RoundView, action: Action) -> None:
        live = {job.id for job in view.jobs}
        for gone in [k for k in self.granted_to if k not in live]:
            del self.granted_to[gone]
        jid = view.jobs[action.job].id
        self.granted_to[jid] = self.granted_to.get(jid, 0) + action.executors


def _by_work(view: RoundView) -> list[int]:
    return sorted(range(len(view.jobs)), key=lambda j: (view.jobs[j].remaining_work_ms(), j))


@dataclass(slots=True)
class SjfCp(_Frame):
    name: str = "sjf_cp"
    pick: StagePicker = longest_path_stage

    def order(self, view: RoundView) -> Sequence[int]:
        return _by_work(view)


@dataclass(slots=True)
class SjfCapped(_Frame):
    name: str = "sjf_capped"
    pick: StagePicker = longest_path_stage

    def caps(self, view: RoundView) -> Sequence[int]:
        return fair_caps(view)

    def order(self, view: RoundView) -> Sequence[int]:
        return _by_work(view)


@dataclass(slots=True)
class WeightedFair(_Frame):
    name: str = "weighted_fair"
    alpha: float = 0.0

    def caps(self, view: RoundView) -> Sequence[int]:
        if self.alpha == 0.0:
            return fair_caps(view)
        counted = [view.fair_count == "active" or job.unsaturated for job in view.jobs]
        weights = [
            max(job.remaining_work_ms(), _MIN_WORK_MS) ** self.alpha if c else 0.0
            for job, c in zip(view.jobs, counted, strict=True)
        ]
        total = sum(weights)
        if total <= 0.0:
            return fair_caps(view)
        return [math.ceil(view.num_executors * w / total) for w in weights]


def _pack_score(view: RoundView, st: StageView) -> float:
    cap = view.executor_capacity
    return sum(c * d for c, d in zip(cap, st.per_task, strict=False))


@dataclass(slots=True)
class Packer(_Frame):
    name: str = "packer"

    def caps(self, view: RoundView) -> Sequence[int]:
        return fair_caps(view)

    def choose(self, view: RoundView) -> Action | None:
        if view.num_source <= 0:
            return None
        src = view.source_job
        if src is not None:
            job = view.jobs[src]
            cands = [s for s in job.stages if s.selectable]
            if cands:
                st = max(cands, key=lambda s: (_pack_score(view, s), s.runnable, -s.index))
                return Action(src, st.index, view.num_source, view.num_executors)
        caps = self.caps(view)
        best: tuple[float, int, int] | None = None
        for j, job in enumerate(view.jobs):
            if j == src or job.supply >= caps[j]:
                continue
            for st in job.stages:
                if st.selectable:
                    key = (_pack_score(view, st), -j, -st.index)
                    if best is None or key > best:
                        best = key
        if best is None:
            return None
        j, s = -best[1], -best[2]
        st = view.jobs[j].stages[s]
        n = min(st.demand, caps[j] - view.jobs[j].supply, view.num_source)
        return Action(j, s, n, caps[j])


#: the version every DAG heuristic reports
HEURISTIC_VERSION: Final = "1"

HEURISTIC_NAMES: Final = (
    "fair",
    "fifo",
    "fifo_static",
    "packer",
    "sjf_capped",
    "sjf_cp",
    "weighted_fair",
)

_WF = re.compile(r"^weighted_fair(?:\((?P<a>[-+0-9.eE]+)\)|:(?P<b>[-+0-9.eE]+))?$")


def get_heuristic(name: str) -> DagPolicy:
    """A fresh instance of heuristic ``name``; ``weighted_fair(-0.5)`` (or ``weighted_fair:-0.5``)
    sets alpha (default 0)."""
    simple: dict[str, Callable[[], DagPolicy]] = {
        "fair": Fair,
        "fifo": Fifo,
        "fifo_static": FifoStatic,
        "packer": Packer,
        "sjf_capped": SjfCapped,
        "sjf_cp": SjfCp,
    }
    if name in simple:
        return simple[name]()
    m = _WF.match(name)
    if m is not None:
        raw = m.group("a") or m.group("b")
        try:
            alpha = float(raw) if raw is not None else 0.0
        except ValueError:
            raise UnknownHeuristicError(name, HEURISTIC_NAMES) from None
        if not math.isfinite(alpha):
            raise UnknownHeuristicError(name, HEURISTIC_NAMES)
        return WeightedFair(name=name, alpha=alpha)
    raise UnknownHeuristicError(name, HEURISTIC_NAMES)
