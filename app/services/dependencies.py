"""Checks of ``depends_on`` graphs: submitted jobs (``/jobs``, ``/jobs/batch``) and the pending
jobs of a ``/v1/decide`` snapshot. Pure functions, no I/O.

The invariant behind the submission rule: a job may only depend on jobs that exist in its
cluster already or arrive in the same (all-or-nothing) request, and a stored spec never
changes. Every edge of the stored graph therefore points at a job stored no later than the job
that names it, so a cycle can only form inside one request: checking the request's own graph
keeps the cluster's graph acyclic, with no lock and no walk over the stored jobs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from app.schemas.job import JobSpec
from app.services.errors import ErrorItem, UnprocessableError

#: At most this many unknown dependencies are reported in one answer.
MAX_REPORTED = 100


def unknown_dependencies(
    graph: Mapping[str, Sequence[str]],
    known: Collection[str],
    field_of: Mapping[str, str],
) -> list[ErrorItem]:
    """One error per dependency of ``graph`` (job id -> its ``depends_on``) that is not in
    ``known``; ``field_of`` maps a job id to its field path."""
    problems: list[ErrorItem] = []
    for job_id, deps in graph.items():
        for k, dep in enumerate(deps):
            if dep not in known:
                problems.append(
                    ErrorItem(
                        f"{field_of[job_id]}.depends_on[{k}]",
                        f"job {dep!r} does not exist; a job may depend only on jobs already "
                        "submitted to its cluster or submitted with it",
                        "unknown_dependency",
                    )
                )
                if len(problems) >= MAX_REPORTED:
                    return problems
    return problems


def find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle of ``graph`` as ``[a, b, ..., a]`` (``a`` depends on ``b`` ...), or
    None when it is acyclic. Edges to ids outside ``graph`` are ignored, so jobs without
    dependencies (never part of a cycle) may be left out of it. Iterative: a chain of 10,000
    jobs does not reach the recursion limit."""
    done: set[str] = set()
    for root in graph:
        if root in done:
            continue
        path: list[str] = [root]
        on_path: set[str] = {root}
        stack = [iter(graph[root])]
        while stack:
            dep = next(stack[-1], None)
            if dep is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if dep not in graph or dep in done:
                continue
            if dep in on_path:
                return [*path[path.index(dep) :], dep]
            path.append(dep)
            on_path.add(dep)
            stack.append(iter(graph[dep]))
    return None


def cycle_error(cycle: Sequence[str], field_of: Mapping[str, str]) -> ErrorItem:
    """The error naming ``cycle`` (as :func:`find_cycle` gives it), at its first job's field."""
    shown = [repr(j) for j in cycle]
    if len(shown) > 12:
        shown = [*shown[:10], f"... ({len(cycle) - 12} more)", *shown[-2:]]
    return ErrorItem(
        f"{field_of[cycle[0]]}.depends_on",
        f"dependency cycle: {' -> '.join(shown)}; none of these jobs could ever start",
        "dependency_cycle",
    )


def check_snapshot_dependencies(pending: Sequence[JobSpec], prefix: str = "body.pending") -> None:
    """422 ``dependency_cycle`` for a cycle among a snapshot's pending jobs.

    A dependency on a job the snapshot does not hold is not refused: a stateless caller may
    leave out jobs that finished long ago, so such a job counts as unfinished, and the pending
    job waits (the contract: a job is allocated only when all of ``depends_on`` are in
    ``finished``).
    """
    graph: dict[str, Sequence[str]] = {}
    field_of: dict[str, str] = {}
    for i, job in enumerate(pending):
        if job.depends_on and job.id not in graph:
            graph[job.id] = job.depends_on
            field_of[job.id] = f"{prefix}[{i}]"
    cycle = find_cycle(graph) if graph else None
    if cycle is not None:
        raise UnprocessableError(
            "the pending jobs' dependencies form a cycle",
            code="dependency_cycle",
            details=[cycle_error(cycle, field_of)],
        )
