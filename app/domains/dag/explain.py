"""What a DAG round's service needs beside the decision: the invariant check of a decision
(:func:`check_decision`, the last guard before anything is applied), explanations
(:class:`Explainer`: per step, the chosen stage with its score and the runners-up) and the
stages' job ids (``<dag id>:<stage id>``, :func:`stage_job_id`).

Pure: the API process and ``kairos worker`` run the same code on the same snapshot.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.domains.dag.decima import DecimaPolicy, encode
from app.domains.dag.policy import Action, DagPolicy, RoundView
from app.domains.dag.types import (
    DagClusterState,
    DagDecision,
    StageProgress,
    topological_order,
)

__all__ = [
    "RUNNERS_UP",
    "Explainer",
    "check_decision",
    "stage_ids_of",
    "stage_job_id",
]

#: runners-up listed per step of an explanation
RUNNERS_UP: Final = 3


def stage_job_id(dag_id: str, stage_id: str) -> str:
    """The job id under which a DAG's stage is also visible as a job."""
    return f"{dag_id}:{stage_id}"


def check_decision(state: DagClusterState, decision: DagDecision) -> list[str]:
    """Invariant violations of ``decision`` on ``state`` (empty when safe to apply): grants to
    known stages, each at most once, of at least one slot and at most the stage's demand
    (unlaunched tasks not covered by running slots, within ``max_parallelism``); allocations
    only to stages whose parents all finished; no more slots than are free."""
    problems: list[str] = []
    dags = {d.spec.id: d for d in state.dags}
    seen: set[tuple[str, str]] = set()
    total = 0
    kinds = (("allocation", decision.allocations), ("reservation", decision.reservations))
    for kind, grants in kinds:
        for g in grants:
            dag = dags.get(g.dag_id)
            stages = {} if dag is None else {s.id: s for s in dag.spec.stages}
            st = stages.get(g.stage_id)
            if dag is None or st is None or (g.dag_id, g.stage_id) in seen:
                problems.append(f"{kind} {g.dag_id}:{g.stage_id} is unknown or repeated")
                continue
            seen.add((g.dag_id, g.stage_id))
            prog = dag.progress_of()
            p = prog.get(st.id, StageProgress(st.id))
            demand = st.tasks - p.launched - p.running
            if st.max_parallelism is not None:
                demand = min(demand, st.max_parallelism - p.running)
            if g.slots < 1 or g.slots > demand or g.parallelism_limit < 1:
                problems.append(f"{kind} {g.dag_id}:{g.stage_id}: {g.slots} slots of {demand}")
            total += g.slots
            parents_done = all(
                prog.get(q, StageProgress(q)).finished >= stages[q].tasks for q in st.depends_on
            )
            if kind == "allocation" and not parents_done:
                problems.append(f"stage {g.dag_id}:{g.stage_id} placed before its parents finish")
    if total > state.free_slots:
        problems.append(f"{total} slots granted, {state.free_slots} free")
    return problems


def stage_ids_of(state: DagClusterState) -> dict[str, tuple[str, ...]]:
    """Stage ids in the order the domain's views index them (topological, ties spec order)."""
    return {
        d.spec.id: tuple(d.spec.stages[i].id for i in topological_order(d.spec)) for d in state.dags
    }


def _scores(policy: DagPolicy, view: RoundView) -> dict[tuple[int, int], float]:
    """The policy's own scores of the selectable stages, when it has them (Decima-style
    policies: their stage logits; others through a ``stage_scores(view)`` method)."""
    if isinstance(policy, DecimaPolicy):
        obs = encode(view)
        logits = policy.stage_logits(obs)
        return {
            slot: float(logits[j, s])
            for j, row in enumerate(obs.slots)
            for s, slot in enumerate(row)
            if obs.select_mask[j, s]
        }
    score_fn = getattr(policy, "stage_scores", None)
    if callable(score_fn):
        return {(int(j), int(s)): float(v) for (j, s), v in score_fn(view).items()}
    return {}


def _masked(view: RoundView, picks: Sequence[tuple[int, int]]) -> RoundView:
    jobs = list(view.jobs)
    for j, s in picks:
        job = jobs[j]
        stages = list(job.stages)
        stages[s] = dataclasses.replace(stages[s], selectable=False, runnable=False)
        jobs[j] = dataclasses.replace(job, stages=tuple(stages))
    return dataclasses.replace(view, jobs=tuple(jobs))


def _stage_summary(
    view: RoundView,
    j: int,
    s: int,
    scores: Mapping[tuple[int, int], float],
    stage_ids: Mapping[str, tuple[str, ...]],
) -> dict[str, Any]:
    job = view.jobs[j]
    st = job.stages[s]
    return {
        "job_id": stage_job_id(job.id, stage_ids[job.id][s]),
        "score": scores.get((j, s)),
        "runnable": st.runnable,
        "demand": st.demand,
        "unlaunched": st.unlaunched,
        "duration_ms": st.duration_ms,
    }


@dataclass(slots=True)
class Explainer:
    """Runs ``inner`` and records, per action: the chosen stage with its score, the runners-up
    (what ``inner`` would choose with the chosen stages masked out, asked of copies of it) and
    the jobs' summary values."""

    inner: DagPolicy
    #: per DAG id, its stage ids in the order the views index them
    stage_ids: Mapping[str, tuple[str, ...]]
    steps: list[dict[str, Any]] = field(default_factory=list)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def reset(self) -> None:
        self.inner.reset()
        self.steps.clear()

    def _runners_up(
        self,
        probe: DagPolicy | None,
        view: RoundView,
        first: tuple[int, int],
        scores: Mapping[tuple[int, int], float],
    ) -> tuple[list[tuple[int, int]], bool]:
        """The next picks: by the policy's scores when it has them, else what copies of it
        choose with the earlier picks masked out, else unranked."""
        if scores:
            ranked = sorted((k for k in scores if k != first), key=lambda k: (-scores[k], k))
            return ranked[:RUNNERS_UP], True
        picks = [first]
        if probe is not None:
            try:
                while len(picks) <= RUNNERS_UP:
                    action = copy.deepcopy(probe).choose(_masked(view, picks))
                    if action is None:
                        break
                    picks.append((action.job, action.stage))
                return picks[1:], True
            except Exception:  # a policy that cannot be copied or asked twice: list them
                picks = [first]
        others = [
            (j, st.index)
            for j, job in enumerate(view.jobs)
            for st in job.stages
            if st.selectable and (j, st.index) != first
        ]
        return others[:RUNNERS_UP], False

    def choose(self, view: RoundView) -> Action | None:
        probe: DagPolicy | None = None
        if not isinstance(self.inner, DecimaPolicy):  # scored: its runners-up are by score
            try:
                probe = copy.deepcopy(self.inner)
            except Exception:
                probe = None
        action = self.inner.choose(view)
        if action is None:
            return None
        try:
            scores = _scores(self.inner, view)
        except Exception:
            scores = {}
        chosen = (action.job, action.stage)
        others, ranked = self._runners_up(probe, view, chosen, scores)
        self.steps.append(
            {
                "num_source": view.num_source,
                "source_dag": None if view.source_job is None else view.jobs[view.source_job].id,
                "chosen": {
                    **_stage_summary(view, *chosen, scores, self.stage_ids),
                    "slots": action.executors,
                    "parallelism_limit": action.limit,
                },
                "runners_up": [
                    _stage_summary(view, j, s, scores, self.stage_ids) for j, s in others
                ],
                "runners_up_ranked": ranked,
                "jobs": [
                    {
                        "dag_id": job.id,
                        "supply": job.supply,
                        "remaining_work_ms": job.remaining_work_ms(),
                        "selectable_stages": sum(1 for st in job.stages if st.selectable),
                    }
                    for job in view.jobs
                ],
            }
        )
        return action
