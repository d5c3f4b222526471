"""Both serving paths keep one :class:`LockstepLimits` across their batches (ADR 0081): the
in-process pipeline and ``kairos worker``'s batch handler. What the limits do is tested in
``tests/unit/policy/test_selector.py``; here, that a process learns from every batch it decides."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from app.batching import pipeline as pipeline_module
from app.batching import worker as worker_module
from app.batching.pipeline import DecisionPipeline, PipelineOptions
from app.batching.worker import batch_decider
from app.domain.types import ClusterState, Job, Node
from app.policy.registry import PolicyRegistry
from app.policy.selector import DecisionOutcome, DecisionRequest, LockstepLimits, decide_many


def _request(k: int) -> DecisionRequest:
    state = ClusterState(
        now=0.0, nodes=(Node("n1", {"cpu": 4.0}),), pending=(Job(f"j{k}", {"cpu": 1.0}, 60.0, 0.0),)
    )
    return DecisionRequest(f"r{k}", state, policy="f1")


class _Spy:
    """The real ``decide_many``, noting the ``lockstep`` it was given."""

    def __init__(self) -> None:
        self.seen: list[LockstepLimits | None] = []

    def __call__(self, requests: Sequence[DecisionRequest], *args: Any, **kw: Any) -> Any:
        self.seen.append(kw.get("lockstep"))
        return decide_many(requests, *args, **kw)


def test_the_in_process_pipeline_keeps_its_limits_across_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy()
    monkeypatch.setattr(pipeline_module, "decide_many", spy)
    pipeline = DecisionPipeline(PolicyRegistry(tmp_path), PipelineOptions())
    try:
        for k in range(2):
            [outcome] = pipeline._decide_batch([_request(k)])
            assert isinstance(outcome, DecisionOutcome)
            assert outcome.decision is not None
    finally:
        pipeline._executor.shutdown()
    assert spy.seen == [pipeline.lockstep, pipeline.lockstep]
    assert isinstance(pipeline.lockstep, LockstepLimits)


def test_the_worker_keeps_its_limits_across_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy()
    monkeypatch.setattr(worker_module, "decide_many", spy)
    decide = batch_decider(PolicyRegistry(tmp_path))
    for k in range(2):
        [outcome] = decide([_request(k)], lambda _i: True, lambda _i, _o: None)
        assert outcome.decision is not None
    first, second = spy.seen
    assert isinstance(first, LockstepLimits)
    assert second is first
