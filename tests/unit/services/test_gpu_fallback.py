"""The GPU round's fallback chain (:func:`app.services.gpu_rounds._decide`, through the pipeline
to :mod:`app.policy.deciders`): a learned policy
that is missing, refused, raises, answers garbage, misses its deadline or breaks an invariant
gives way to the fallback heuristic, and the outcome says why in the one vocabulary
(:class:`app.outcomes.FallbackReason`); a working one decides."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import numpy as np
import pytest

from app.db.repositories.gpu_service_repository import ServiceRow
from app.domains.gpu import validation
from app.domains.gpu.domain import GpuDomain
from app.domains.gpu.heuristics import GpuConfig
from app.domains.gpu.learned import ScoredPolicy
from app.domains.gpu.types import ClusterSnapshot, GpuDecision, GpuJob, Placement, gpu_node
from app.outcomes import DecisionOutcome, DecisionRequest, FallbackReason
from app.policy.deciders import decide_requests
from app.schemas.cluster import ClusterUpsert, GpuClusterSettings
from app.services import gpu_rounds
from app.services.convert import domain_config
from app.services.decision import DecisionService
from app.services.errors import UnprocessableError

STATE = ClusterSnapshot(
    now=1000.0,
    nodes=(gpu_node("n0", 4), gpu_node("n1", 4)),
    jobs=(
        GpuJob(
            "old",
            arrival=0.0,
            min_gpus=4,
            max_gpus=4,
            allocation=(Placement("n0", 4),),
            attained_gpu_s=40_000.0,
        ),
        GpuJob("a", arrival=10.0, min_gpus=4, max_gpus=4),
        GpuJob("b", arrival=20.0, min_gpus=4, max_gpus=4),
    ),
)


@dataclass
class _Entry:
    domain: str | None
    gpu: Any = None
    message: str | None = None


@dataclass
class _Model:
    """The part of :class:`~app.policy.gpu_onnx.GpuOnnxModel` the round uses."""

    policy_: Any
    window: int = 64

    def policy(self, window: int | None = None) -> Any:
        return self.policy_


class _Registry:
    def __init__(self, entry: _Entry | None) -> None:
        self.entry = entry

    def find_or_load(self, spec: str) -> _Entry | None:
        return self.entry


class _Pipeline:
    """The pipeline's in-process path: the batch handler, in a thread."""

    def __init__(self, entry: _Entry | None) -> None:
        self.registry = _Registry(entry)

    async def decide(self, request: DecisionRequest) -> DecisionOutcome:
        outcomes = await anyio.to_thread.run_sync(
            lambda: decide_requests([request], self.registry)  # type: ignore[arg-type]
        )
        return outcomes[0]


class _Decisions:
    """The two things the round asks the decision service: the pipeline and name resolution."""

    def __init__(self, entry: _Entry | None) -> None:
        self.pipeline = _Pipeline(entry)

    decide_request = DecisionService.decide_request

    def resolve_spec(self, name: str, tenant: str | None) -> str:
        return name


def _scored(score: Any) -> ScoredPolicy:
    return ScoredPolicy(name="gpu-test", version="1", score=score)


def _by_arrival_desc(obs: Any, mask: Any) -> Any:
    # later rows (pending, newest last) score higher: "b" then "a" then the running job
    return np.arange(len(mask), dtype=np.float32)


async def _decide(entry: _Entry | None, *, deadline_ms: float = 5_000.0) -> Any:
    return await gpu_rounds._decide(
        STATE,
        policy="gpu-test",
        fallback="tiresias-2dlas",
        config=GpuConfig(),
        decisions=_Decisions(entry),  # type: ignore[arg-type]
        tenant="t",
        deadline_ms=deadline_ms,
        field_prefix="body.",
        request_id="r",
    )


async def test_a_working_learned_policy_decides() -> None:
    out = await _decide(_Entry("gpu", _Model(_scored(_by_arrival_desc))))
    assert not out.fallback_used
    assert out.reason is None
    assert out.decision.policy.name == "gpu-test"
    assert [a.job_id for a in out.decision.allocations] == ["b", "a"]
    assert out.decision.preemptions == ("old",)


def _raises(obs: Any, mask: Any) -> Any:
    raise RuntimeError("session exploded")


def _nan(obs: Any, mask: Any) -> Any:
    return np.full(len(mask), np.nan, dtype=np.float32)


def _wrong_shape(obs: Any, mask: Any) -> Any:
    return np.zeros(len(mask) + 1, dtype=np.float32)


def _slow(obs: Any, mask: Any) -> Any:
    time.sleep(0.5)
    return np.zeros(len(mask), dtype=np.float32)


@pytest.mark.parametrize(
    ("entry", "reason", "deadline_ms"),
    [
        (None, FallbackReason.MODEL_MISSING, 5_000.0),
        (_Entry("gpu", None, "probe failed"), FallbackReason.MODEL_REFUSED, 5_000.0),
        (_Entry("hpc", None), FallbackReason.MODEL_REFUSED, 5_000.0),
        (_Entry("gpu", _Model(_scored(_raises))), FallbackReason.INFERENCE_ERROR, 5_000.0),
        (_Entry("gpu", _Model(_scored(_nan))), FallbackReason.NON_FINITE_OUTPUT, 5_000.0),
        (_Entry("gpu", _Model(_scored(_wrong_shape))), FallbackReason.INVALID_OUTPUT, 5_000.0),
        (_Entry("gpu", _Model(_scored(_slow))), FallbackReason.DEADLINE_EXCEEDED, 50.0),
    ],
)
async def test_a_failing_model_gives_way_to_the_fallback(
    entry: _Entry | None, reason: FallbackReason, deadline_ms: float
) -> None:
    out = await _decide(entry, deadline_ms=deadline_ms)
    assert out.fallback_used
    assert out.reason is reason
    assert out.detail
    assert out.decision.policy.name == "tiresias-2dlas"
    # the fallback's own decision: 2D-LAS puts the long-running job behind both new ones
    assert sorted(a.job_id for a in out.decision.allocations) == ["a", "b"]
    assert out.decision.preemptions == ("old",)


async def test_a_decision_that_breaks_an_invariant_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = GpuDomain.decide

    def over_allocating(
        self: GpuDomain, state: ClusterSnapshot, policy: Any, config: GpuConfig | None = None
    ) -> GpuDecision:
        if isinstance(policy, ScoredPolicy):  # preempts a pending job
            return GpuDecision(policy=policy.ref, preemptions=("a",))
        return real(self, state, policy, config)

    monkeypatch.setattr(GpuDomain, "decide", over_allocating)
    out = await _decide(_Entry("gpu", _Model(_scored(_by_arrival_desc))))
    assert (out.fallback_used, out.reason) == (True, FallbackReason.INVALID_DECISION)
    assert "not running" in (out.detail or "")


@pytest.mark.parametrize(
    ("entry", "fallback_used"),
    [
        (_Entry("gpu", _Model(_scored(_by_arrival_desc))), False),
        (_Entry("gpu", _Model(_scored(_nan))), True),
    ],
)
async def test_a_round_validates_its_snapshot_once(
    monkeypatch: pytest.MonkeyPatch, entry: _Entry, fallback_used: bool
) -> None:
    # every validate_snapshot checks each job once (through validation._check_job), whoever
    # calls it: the boundary, the policy's decide or the fallback's
    checked: list[str] = []
    real = validation._check_job

    def counting(job: GpuJob, where: str) -> None:
        checked.append(job.id)
        real(job, where)

    monkeypatch.setattr(validation, "_check_job", counting)
    out = await _decide(entry)
    assert out.fallback_used is fallback_used
    assert checked == [j.id for j in STATE.jobs]


async def test_an_inconsistent_snapshot_is_a_422_naming_the_field() -> None:
    bad = ClusterSnapshot(
        now=0.0,
        nodes=(gpu_node("n0", 2),),
        jobs=(GpuJob("x", 0.0, 4, 4, allocation=(Placement("n0", 4),)),),
    )
    with pytest.raises(UnprocessableError) as err:
        await gpu_rounds._decide(
            bad,
            policy="las",
            fallback="las",
            config=GpuConfig(),
            decisions=_Decisions(None),  # type: ignore[arg-type]
            tenant="t",
            deadline_ms=100.0,
            field_prefix="cluster.",
            request_id="r",
        )
    assert err.value.details[0].field == "cluster.jobs.allocation"


def test_service_advances_only_while_gpus_are_held() -> None:
    row = ServiceRow(1, 100.0, 10.0, 1, 0, 30.0, accounted_at=50.0)
    assert gpu_rounds._advance(row, 4, 70.0) == ServiceRow(
        1, 180.0, 30.0, 1, 0, 10.0, accounted_at=70.0
    )
    # time never runs backwards, a pending job accrues nothing
    assert gpu_rounds._advance(row, 4, 40.0) == row
    assert gpu_rounds._advance(row, 0, 70.0).attained_gpu_s == 100.0


def test_a_gpu_cluster_stores_its_settings_and_others_nothing() -> None:
    body = ClusterUpsert.model_validate(
        {"domain": "gpu", "resources": ["gpu"], "gpu": {"restart_cost_s": 5.0}}
    )
    assert domain_config(body) == {
        "gpu": {
            "restart_cost_s": 5.0,
            "las_thresholds_gpu_s": [3250.0, 7200.0],
            "placement": "consolidate",
        }
    }
    plain = ClusterUpsert.model_validate({"domain": "gpu", "resources": ["gpu"]})
    assert domain_config(plain) == {"gpu": GpuClusterSettings().model_dump(mode="json")}
    assert domain_config(ClusterUpsert.model_validate({"resources": ["cpu"]})) is None


async def test_a_fallback_that_breaks_an_invariant_answers_the_empty_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Never a 500 and never an unsafe decision: a heuristic whose decision breaks an
    invariant (a bug in the domain) is replaced by the empty decision, which keeps every
    running job and starts nothing."""

    def broken(
        self: GpuDomain, state: ClusterSnapshot, policy: Any, config: GpuConfig | None = None
    ) -> GpuDecision:
        return GpuDecision(policy=policy.ref, preemptions=("a",))  # "a" is not running

    monkeypatch.setattr(GpuDomain, "decide", broken)
    out = await _decide(None)
    assert (out.fallback_used, out.reason) == (True, FallbackReason.MODEL_MISSING)
    assert out.decision == GpuDecision(policy=out.decision.policy)
    assert out.decision.policy.name == "tiresias-2dlas"


async def test_a_heuristic_primary_that_raises_gives_way_to_the_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = GpuDomain.decide

    def las_raises(
        self: GpuDomain, state: ClusterSnapshot, policy: Any, config: GpuConfig | None = None
    ) -> GpuDecision:
        if policy.ref.name == "las":
            raise ZeroDivisionError("a bug in las")
        return real(self, state, policy, config)

    monkeypatch.setattr(GpuDomain, "decide", las_raises)
    out = await gpu_rounds._decide(
        STATE,
        policy="las",
        fallback="tiresias-2dlas",
        config=GpuConfig(),
        decisions=_Decisions(None),  # type: ignore[arg-type]
        tenant="t",
        deadline_ms=5_000.0,
        field_prefix="body.",
        request_id="r",
    )
    assert (out.fallback_used, out.reason) == (True, FallbackReason.INFERENCE_ERROR)
    assert "ZeroDivisionError" in (out.detail or "")
    assert out.decision.policy.name == "tiresias-2dlas"
