"""One decision vocabulary: the service answers with the pipeline's own outcome types, and its
last-resort fallback is the domain's default heuristic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.domain import DOMAIN
from app.domains.hpc.types import ClusterState, Job, Node
from app.outcomes import DecisionOutcome, FallbackReason, ShadowOutcome
from app.policy.pipeline import pipeline_from_settings
from app.services.decision import DecisionService, DecisionSpec
from app.settings import Settings


def _state() -> ClusterState:
    return ClusterState(
        now=0.0,
        nodes=(Node("n1", {"cpu": 4.0}),),
        pending=(
            Job("big", {"cpu": 4.0}, 100.0, 0.0),
            Job("small", {"cpu": 1.0}, 10.0, 1.0),
        ),
    )


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[DecisionService]:
    settings = Settings(MODELS_DIR=str(tmp_path), SHIPPED_MODELS=False, GC_FREEZE=False)
    svc = DecisionService(default_deadline_s=5.0, pipeline=pipeline_from_settings(settings))
    await svc.start()
    yield svc
    await svc.close()


async def test_the_last_resort_fallback_is_the_domains_default(service: DecisionService) -> None:
    decision = await service._fallback(_state(), "no-such-heuristic", DecisionConfig(), "r1")
    assert decision.policy.name == DOMAIN.default_fallback == "f1"


async def test_the_service_answers_with_the_pipelines_vocabulary(service: DecisionService) -> None:
    spec = DecisionSpec(policy="hpc-missing", fallback="f1", shadow_policy="sjf")
    outcome = await service.decide(_state(), spec, request_id="r2")
    assert isinstance(outcome, DecisionOutcome)
    assert outcome.request_id == "r2"
    assert outcome.fallback_used
    assert outcome.fallback_reason is FallbackReason.MODEL_MISSING
    assert outcome.fallback_detail is not None
    assert "hpc-missing" in outcome.fallback_detail
    assert outcome.policy.name == "f1"
    assert isinstance(outcome.shadow, ShadowOutcome)
    assert outcome.shadow.policy == "sjf"
    assert outcome.shadow.decision is not None
    assert outcome.shadow.allocations == outcome.shadow.decision.allocations
    assert {a.job_id for a in outcome.shadow.allocations} == {"small"}
