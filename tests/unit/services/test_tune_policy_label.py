"""A tune names a policy by the policy that decides: a heuristic card (``kairos tune``'s output
when a heuristic won) is served as the heuristic it recommends, so the tune's validation table,
its guard and its audit name that heuristic, as the card's decisions do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.db.orm import TuneRecord
from app.domains.hpc.types import ClusterState, Job, Node
from app.policy.pipeline import pipeline_from_settings
from app.services.decision import DecisionService, DecisionSpec
from app.services.tunes import _policy_label, guard
from app.settings import Settings

TENANT = "acme"


def _state() -> ClusterState:
    return ClusterState(
        now=0.0,
        nodes=(Node("n1", {"cpu": 4.0}),),
        pending=(Job("big", {"cpu": 4.0}, 100.0, 0.0), Job("small", {"cpu": 1.0}, 10.0, 1.0)),
    )


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[DecisionService]:
    card = {
        "name": "site-tuned",
        "version": "1",
        "domain": "hpc",
        "kind": "heuristic",
        "recommendation": "SJF",
    }
    (tmp_path / "site-tuned" / "1").mkdir(parents=True)
    (tmp_path / "site-tuned" / "1" / "card.json").write_text(json.dumps(card))
    settings = Settings(MODELS_DIR=str(tmp_path), SHIPPED_MODELS=False, GC_FREEZE=False)
    svc = DecisionService(default_deadline_s=5.0, pipeline=pipeline_from_settings(settings))
    await svc.start()
    yield svc
    await svc.close()


@pytest.mark.parametrize("policy", ["site-tuned", "site-tuned@1", "SJF", "f1"])
async def test_the_label_is_the_name_the_decisions_carry(
    service: DecisionService, policy: str
) -> None:
    spec = DecisionSpec(policy=policy, fallback="fcfs")
    outcome = await service.decide(_state(), spec, request_id="r1")
    assert not outcome.fallback_used
    assert _policy_label(service, policy, TENANT) == outcome.policy.name


async def test_the_guard_compares_a_heuristic_card_by_its_heuristics_row(
    service: DecisionService,
) -> None:
    table = [
        {"candidate": "tuned@3", "kind": "model", "avg_bsld": 2.0},
        {"candidate": "sjf", "kind": "heuristic", "avg_bsld": 2.5},
        {"candidate": "f1", "kind": "heuristic", "avg_bsld": 1.5},
    ]
    card = {"tuning": {"validation_window_starts": [0.0, 1.0]}}
    record = TuneRecord(result={"winner": "tuned@3", "table": table, "card": card})
    verdict = guard(record, "site-tuned", service, TENANT)
    assert (verdict.passed, verdict.current_avg_bsld) == (True, 2.5)
    assert "'site-tuned''s 2.5000" in verdict.reason
