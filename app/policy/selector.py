"""The fallback chain and the step-synchronous batched decision.

A :class:`DecisionRequest` names a primary policy (a heuristic name or an ONNX ``name[@version]``),
a fallback heuristic (default F1, with the request's backfilling, EASY by default) and optionally a
shadow policy.  :func:`decide_many` decides a whole batch:

* heuristic primaries decide directly (no fallback involved);
* ONNX primaries run step-synchronously: at every step, **one** inference per model scores the
  candidates of every request still deciding (``encode_batch`` pads them to one ``N``), and each
  request applies its own pick with its own mask (ADR 0041);
* ranking ONNX models (card ``decision_mode: rank``, ADR 0065) need a single step: one inference
  scores the whole queue of every request in the batch, and each request walks its own order;
* the fallback heuristic decides instead, recording a machine-readable :class:`FallbackReason`
  (ADR 0042), when the model is missing or refused, inference raises or returns the wrong shape,
  a request's logits are NaN/inf where its mask is true, every candidate is masked, the pick is
  refused by the decision loop, or the request's deadline would pass before the next step;
* a shadow policy is decided the same way from the same snapshot; it never falls back (a failing
  shadow is recorded as ``None`` with its reason) and never affects the served decision;
* one request's bad snapshot (``SnapshotError``...) is an error outcome for that request only.

This module is synchronous and CPU-bound: call it from a thread (the :class:`MicroBatcher` does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from app.domains.hpc.decision import DecisionRun, decide
from app.domains.hpc.encoding import (
    EncodedBatch,
    LogitsArray,
    MaskArray,
    encode_batch,
    masked_argmax,
    rank_rows,
)
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.policy import OrderingPolicy
from app.kernel.errors import DomainError, UnknownHeuristicError
from app.outcomes import (
    ABANDONED,
    DEFAULT_FALLBACK,
    DecisionOutcome,
    DecisionRequest,
    Deliver,
    FallbackReason,
    ShadowOutcome,
    Wanted,
)
from app.policy.onnx_policy import (
    InferenceFailure,
    OnnxPolicy,
    OnnxRankingPolicy,
    PolicyInferenceError,
)
from app.policy.registry import PolicyRegistry

logger = logging.getLogger(__name__)

#: Time kept in hand for the fallback heuristic when judging whether the deadline would pass.
DEFAULT_FALLBACK_RESERVE_S = 0.003


_INFERENCE_REASONS = {
    InferenceFailure.INFERENCE_ERROR: FallbackReason.INFERENCE_ERROR,
    InferenceFailure.INVALID_OUTPUT: FallbackReason.INVALID_OUTPUT,
    InferenceFailure.NON_FINITE_OUTPUT: FallbackReason.NON_FINITE_OUTPUT,
    InferenceFailure.ALL_MASKED: FallbackReason.ALL_MASKED,
}


@dataclass(slots=True)
class _Slot:
    """One DecisionRun driven by an ONNX policy (a primary or a shadow)."""

    index: int  # position in the request list
    run: DecisionRun
    shadow: bool
    failure: FallbackReason | None = None
    detail: str | None = None
    max_batch: int = 0
    #: the caller gave up (its wait timed out or was cancelled): no more work, no answer
    abandoned: bool = False

    @property
    def active(self) -> bool:
        return self.failure is None and not self.abandoned and not self.run.done


@dataclass(slots=True)
class _Resolved:
    heuristic: OrderingPolicy | None = None
    onnx: OnnxPolicy | None = None
    reason: FallbackReason | None = None
    detail: str | None = None


def resolve(spec: str, registry: PolicyRegistry | None) -> _Resolved:
    """A heuristic, a loaded ONNX policy, or why neither is available."""
    try:
        return _Resolved(heuristic=get_heuristic(spec))
    except UnknownHeuristicError:
        pass
    entry = registry.find_or_load(spec) if registry is not None else None
    if entry is None:
        return _Resolved(reason=FallbackReason.MODEL_MISSING, detail=f"no policy named {spec!r}")
    if entry.heuristic is not None:  # a heuristic card (a tune whose winner is a heuristic)
        return _Resolved(heuristic=get_heuristic(entry.heuristic))
    if entry.policy is None:
        reason = entry.reason.value if entry.reason is not None else "unknown"
        return _Resolved(
            reason=FallbackReason.MODEL_REFUSED,
            detail=f"{entry.name}@{entry.version} refused: {reason}: {entry.message}",
        )
    return _Resolved(onnx=entry.policy)


def _error_outcome(request_id: str, exc: Exception) -> DecisionOutcome:
    return DecisionOutcome(
        request_id=request_id,
        decision=None,
        error=str(exc),
        error_type=type(exc).__name__,
    )


def _deadline_passed(
    slots: list[_Slot],
    requests: Sequence[DecisionRequest],
    now: float,
    reserve_s: float,
    wanted: Wanted,
) -> list[_Slot]:
    """Mark slots whose caller gave up, or whose deadline would pass before the next step;
    return the others, active."""
    active: list[_Slot] = []
    for slot in slots:
        if not slot.active:
            continue
        if not _still_wanted(slot, requests, now, reserve_s, wanted):
            continue
        active.append(slot)
    return active


def _still_wanted(
    slot: _Slot,
    requests: Sequence[DecisionRequest],
    now: float,
    reserve_s: float,
    wanted: Wanted,
) -> bool:
    """False (and the slot marked) when the caller gave up or the deadline would pass."""
    if not wanted(slot.index):
        slot.abandoned = True
        return False
    deadline = requests[slot.index].deadline
    if deadline is not None and now + reserve_s >= deadline:
        slot.failure = FallbackReason.DEADLINE_EXCEEDED
        slot.detail = "the deadline would pass before the next inference"
        return False
    return True


def _batch_argmax(logits: LogitsArray, mask: MaskArray) -> list[int | None] | None:
    """:func:`masked_argmax` of every item at once (``None`` if the shapes differ: the per-item
    function then raises as before)."""
    if logits.shape != mask.shape or logits.ndim != 2:
        return None
    ok = np.asarray(mask.any(axis=1) & (np.isfinite(logits) | ~mask).all(axis=1))
    usable = [bool(x) for x in ok]
    rows = np.where(mask, logits, -np.inf).argmax(axis=1)  # first of equal maxima
    return [int(r) if ok else None for r, ok in zip(rows.tolist(), usable, strict=True)]


def _apply_picks(active: list[_Slot], encoded: EncodedBatch, logits: LogitsArray) -> None:
    picks = _batch_argmax(logits, encoded.mask)
    pickable = [bool(x) for x in np.asarray(encoded.mask.any(axis=1))]  # [B, N] masks
    for b, slot in enumerate(active):
        slot.max_batch = max(slot.max_batch, len(active))
        mask = encoded.mask[b]
        if not pickable[b]:
            slot.failure, slot.detail = FallbackReason.ALL_MASKED, "every candidate is masked"
            continue
        row = picks[b] if picks is not None else masked_argmax(logits[b], mask)
        if row is None:
            slot.failure = FallbackReason.NON_FINITE_OUTPUT
            slot.detail = "non-finite logits for a pickable candidate"
            continue
        try:
            slot.run.apply(encoded.candidate(b, row))
        except DomainError as exc:
            slot.failure, slot.detail = FallbackReason.INVALID_PICK, str(exc)


def _score_or_fail(
    policy: OnnxPolicy, active: list[_Slot], encoded: EncodedBatch
) -> LogitsArray | None:
    """One inference for ``active``; on failure every slot records the reason and ``None``."""
    try:
        return policy.score(encoded.obs, encoded.mask)
    except PolicyInferenceError as exc:
        for slot in active:
            slot.failure, slot.detail = _INFERENCE_REASONS[exc.reason], exc.message
        return None


def _step_group(
    policy: OnnxPolicy,
    slots: list[_Slot],
    requests: Sequence[DecisionRequest],
    clock: Callable[[], float],
    reserve_s: float,
    wanted: Wanted,
    finished: Callable[[_Slot], None],
) -> None:
    """Drive every slot of one model to completion, one inference per step; ``finished(slot)``
    as each slot leaves the batch."""
    live = list(slots)
    while True:
        active = _deadline_passed(live, requests, clock(), reserve_s, wanted)
        for slot in live:
            if not slot.active:
                finished(slot)
        live = active
        if not active:
            return
        encoded = encode_batch([slot.run.view() for slot in active], policy.max_candidates)
        logits = _score_or_fail(policy, active, encoded)
        if logits is None:
            for slot in active:
                finished(slot)
            return
        _apply_picks(active, encoded, logits)


def _rank_group(
    policy: OnnxPolicy,
    slots: list[_Slot],
    requests: Sequence[DecisionRequest],
    clock: Callable[[], float],
    reserve_s: float,
    wanted: Wanted,
    finished: Callable[[_Slot], None],
) -> None:
    """Decide every slot of one ranking model with one inference over all their queues, then
    walk each request's order in batch order; ``finished(slot)`` right after its walk, so its
    caller is answered without waiting for the batch-mates behind it."""
    active = _deadline_passed(slots, requests, clock(), reserve_s, wanted)
    for slot in slots:
        if not slot.active:
            finished(slot)
    if not active:
        return
    views = [slot.run.view() for slot in active]
    width = max(1, max(len(view.candidates) for view in views))
    encoded = encode_batch(views, width)
    logits = _score_or_fail(policy, active, encoded)
    if logits is None:
        for slot in active:
            finished(slot)
        return
    for b, slot in enumerate(active):
        slot.max_batch = len(active)
        # each walk costs about a millisecond, so the last of a large batch may be abandoned
        # by its caller by the time its turn comes: skip it. The deadline is not checked again:
        # with the scores in hand, walking the learned order costs what the fallback's walk
        # would, so switching now would not answer any sooner
        if not wanted(slot.index):
            slot.abandoned = True
            finished(slot)
            continue
        rows = rank_rows(logits[b], encoded.mask[b])
        if rows is None:
            slot.failure = FallbackReason.NON_FINITE_OUTPUT
            slot.detail = "non-finite logits for a pickable candidate"
        else:
            try:
                slot.run.run_ranked(views[b], [encoded.candidate(b, row) for row in rows])
            except DomainError as exc:
                slot.failure, slot.detail = FallbackReason.INVALID_PICK, str(exc)
        finished(slot)


class _Batch:
    """The bookkeeping of one :func:`decide_many` call."""

    def __init__(
        self,
        requests: Sequence[DecisionRequest],
        registry: PolicyRegistry | None,
        wanted: Wanted,
        deliver: Deliver | None,
    ):
        self.requests = requests
        self.registry = registry
        self.wanted = wanted
        self.deliver = deliver
        n = len(requests)
        self.outcomes: list[DecisionOutcome | None] = [None] * n
        self.shadows: list[ShadowOutcome | None] = [None] * n
        self.reasons: list[tuple[FallbackReason, str | None] | None] = [None] * n
        #: slots (primary and shadow) of each request still deciding in a model group
        self.open_slots = [0] * n
        self.abandoned = [False] * n
        self.finals: list[DecisionOutcome | None] = [None] * n
        self.groups: dict[int, tuple[OnnxPolicy, list[_Slot]]] = {}
        self._resolved: dict[str, _Resolved] = {}

    def resolve(self, spec: str) -> _Resolved:
        if spec not in self._resolved:
            self._resolved[spec] = resolve(spec, self.registry)
        return self._resolved[spec]

    def failed(self, i: int) -> bool:
        outcome = self.outcomes[i]
        return outcome is not None and outcome.error is not None

    def enqueue(self, policy: OnnxPolicy, slot: _Slot) -> None:
        self.groups.setdefault(id(policy), (policy, []))[1].append(slot)
        self.open_slots[slot.index] += 1

    def start(self, i: int) -> None:
        req = self.requests[i]
        if not self.wanted(i):
            self.abandoned[i] = True
            return
        primary = self.resolve(req.policy)
        if primary.heuristic is not None:
            decision = decide(req.state, primary.heuristic, req.config)
            self.outcomes[i] = DecisionOutcome(req.request_id, decision)
        elif primary.onnx is not None:
            self.enqueue(primary.onnx, _Slot(i, DecisionRun(req.state, req.config), shadow=False))
        else:
            assert primary.reason is not None
            self.reasons[i] = (primary.reason, primary.detail)
        if req.shadow is None:
            return
        shadow = self.resolve(req.shadow)
        if shadow.heuristic is not None:
            decision = decide(req.state, shadow.heuristic, req.config)
            self.shadows[i] = ShadowOutcome(req.shadow, decision)
        elif shadow.onnx is not None:
            self.enqueue(shadow.onnx, _Slot(i, DecisionRun(req.state, req.config), shadow=True))
        else:
            reason = shadow.reason.value if shadow.reason is not None else None
            self.shadows[i] = ShadowOutcome(req.shadow, None, reason)

    def finish_slot(self, policy: OnnxPolicy, slot: _Slot) -> None:
        """Record a slot's result; the request is answered once its last slot is in."""
        req = self.requests[slot.index]
        if slot.abandoned:
            self.abandoned[slot.index] = True
        elif slot.shadow:
            if slot.failure is None:
                self.shadows[slot.index] = ShadowOutcome(
                    req.shadow or "", slot.run.result(policy.ref)
                )
            else:
                self.shadows[slot.index] = ShadowOutcome(req.shadow or "", None, slot.failure.value)
        elif slot.failure is None:
            self.outcomes[slot.index] = DecisionOutcome(
                req.request_id, slot.run.result(policy.ref), batch_size=max(1, slot.max_batch)
            )
        else:
            self.reasons[slot.index] = (slot.failure, slot.detail)
        self.open_slots[slot.index] -= 1
        if self.open_slots[slot.index] == 0:
            self.settle(slot.index)

    def run_groups(self, clock: Callable[[], float], reserve_s: float) -> None:
        for policy, slots in self.groups.values():
            live = [s for s in slots if not self.failed(s.index)]
            run_group = _rank_group if isinstance(policy, OnnxRankingPolicy) else _step_group
            done: set[int] = set()

            def finished(slot: _Slot, policy: OnnxPolicy = policy, done: set[int] = done) -> None:
                if id(slot) not in done:
                    done.add(id(slot))
                    self.finish_slot(policy, slot)

            try:
                run_group(policy, live, self.requests, clock, reserve_s, self.wanted, finished)
            except Exception as exc:  # e.g. an encoder failure: those requests fall back
                for slot in live:
                    if slot.failure is None and not slot.abandoned and not slot.run.done:
                        slot.failure, slot.detail = FallbackReason.INFERENCE_ERROR, repr(exc)
            for slot in live:
                finished(slot)

    def settle(self, i: int) -> None:
        """Request ``i`` is complete: compute its fallback if it needs one, and answer it."""
        if self.finals[i] is not None:
            return
        req = self.requests[i]
        if self.abandoned[i] or (self.outcomes[i] is None and not self.wanted(i)):
            # nobody waits for it: no fallback to compute, nothing to deliver
            self.finals[i] = _abandoned_outcome(req.request_id)
            return
        outcome = self.outcomes[i]
        if outcome is None:
            reason = self.reasons[i]
            assert reason is not None
            outcome = fallback_outcome(req, reason[0], reason[1])
        shadow = self.shadows[i]
        if shadow is not None and outcome.error is None:
            outcome = replace(outcome, shadow=shadow)
        self.finals[i] = outcome
        if self.deliver is not None:
            try:
                self.deliver(i, outcome)
            except Exception:  # e.g. the loop is closing: the returned list still carries it
                logger.warning("request %s: early delivery failed", req.request_id, exc_info=True)

    def release_runs(self) -> None:
        """Every slot's run is done with (its result taken): free it with the batch."""
        for _, slots in self.groups.values():
            for slot in slots:
                slot.run.release()

    def final(self, i: int) -> DecisionOutcome:
        self.settle(i)
        outcome = self.finals[i]
        assert outcome is not None
        return outcome


def _always(_index: int) -> bool:
    return True


def _abandoned_outcome(request_id: str) -> DecisionOutcome:
    return DecisionOutcome(
        request_id,
        None,
        error="the caller gave up before this request was decided",
        error_type=ABANDONED,
    )


def decide_many(
    requests: Sequence[DecisionRequest],
    registry: PolicyRegistry | None,
    *,
    clock: Callable[[], float] = time.time,
    fallback_reserve_s: float = DEFAULT_FALLBACK_RESERVE_S,
    wanted: Wanted | None = None,
    deliver: Deliver | None = None,
) -> list[DecisionOutcome]:
    """Decide every request; never raises for one request's fault (see the module docstring).

    ``deliver(i, outcome)``, if given, is called once per request as soon as its outcome is
    final (a heuristic primary at once, a ranked walk right after it ends, a stepping model when
    the request leaves the lock-step), so an early request of a large batch does not wait for
    the rest. ``wanted(i)`` is asked before each unit of a request's work (its start, each step,
    its ranked walk); once it is false the request is dropped: no more policy work, no fallback,
    no delivery, and its returned outcome is an error outcome of type :data:`ABANDONED`.
    """
    wanted = wanted or _always
    batch = _Batch(requests, registry, wanted, deliver)
    for i, req in enumerate(requests):
        try:
            batch.start(i)
        except Exception as exc:  # isolate this request from its batch-mates
            batch.outcomes[i] = _error_outcome(req.request_id, exc)
            batch.reasons[i] = None
        if batch.open_slots[i] == 0:
            batch.settle(i)
    try:
        batch.run_groups(clock, fallback_reserve_s)
        return [batch.final(i) for i in range(len(requests))]
    finally:
        batch.release_runs()


def fallback_outcome(
    req: DecisionRequest, reason: FallbackReason, detail: str | None
) -> DecisionOutcome:
    """The fallback heuristic's outcome for ``req`` (an error outcome if the snapshot is bad)."""
    try:
        heuristic = get_heuristic(req.fallback)
    except UnknownHeuristicError:
        heuristic = get_heuristic(DEFAULT_FALLBACK)
    try:
        decision = decide(req.state, heuristic, req.config)
    except Exception as exc:  # the snapshot itself is bad
        return _error_outcome(req.request_id, exc)
    return DecisionOutcome(
        request_id=req.request_id,
        decision=decision,
        fallback_used=True,
        fallback_reason=reason,
        fallback_detail=detail,
    )


__all__ = [
    "DEFAULT_FALLBACK_RESERVE_S",
    "decide_many",
    "fallback_outcome",
    "resolve",
]
