"""Warnings for jobs that cannot run on any of the cluster's current nodes.

Such a job is accepted (nodes may be added or enlarged later; ADR 0092) and its answers carry
``warnings``. The check is against every node whatever its state (a drained or down node may
come back): a task needing more of a resource than the largest node has, or a gang needing more
in total than all nodes have together. :class:`FitLimits` is computed once per request, so a
batch of 10,000 jobs costs one pass over the nodes and one over the jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.schemas.job import JobWarning

#: Rounding slack: a demand equal to a capacity up to this relative error fits.
_EPS = 1e-9


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True, slots=True)
class FitLimits:
    """Per resource, the largest node's capacity and the sum over all nodes."""

    nodes: int = 0
    largest: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, capacities: Iterable[Mapping[str, float]]) -> FitLimits:
        largest: dict[str, float] = {}
        total: dict[str, float] = {}
        count = 0
        for capacity in capacities:
            count += 1
            for name, amount in capacity.items():
                a = float(amount)
                if a > largest.get(name, 0.0):
                    largest[name] = a
                total[name] = total.get(name, 0.0) + a
        return cls(count, largest, total)

    def warnings(self, per_task: Mapping[str, float], tasks: int) -> list[JobWarning]:
        """Why a job of ``tasks`` x ``per_task`` cannot run on these nodes (empty: it may).
        Each warning's ``field`` names the job's field (``per_task.<resource>``, ``tasks``)."""
        if self.nodes == 0:
            return [
                JobWarning(
                    code="no_nodes",
                    message="the cluster has no nodes yet: the job waits until nodes are added",
                    field=None,
                )
            ]
        out: list[JobWarning] = []
        for name, amount in per_task.items():
            need = float(amount)
            if need <= 0:
                continue
            largest = self.largest.get(name, 0.0)
            if need > largest * (1 + _EPS):
                out.append(
                    JobWarning(
                        code="task_exceeds_every_node",
                        message=(
                            f"a task needs {name}={_fmt(need)}, more than any node has (the "
                            f"largest has {_fmt(largest)}): the job cannot start until a "
                            "larger node is added"
                        ),
                        field=f"per_task.{name}",
                    )
                )
                continue
            total = self.total.get(name, 0.0)
            if need * tasks > total * (1 + _EPS):
                out.append(
                    JobWarning(
                        code="gang_exceeds_cluster",
                        message=(
                            f"{tasks} tasks need {name}={_fmt(need * tasks)} together, more "
                            f"than all {self.nodes} nodes have ({_fmt(total)}): the job cannot "
                            "start until nodes are added"
                        ),
                        field="tasks",
                    )
                )
        return out
