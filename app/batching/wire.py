"""JSON wire format of decision requests and outcomes between the API and ``kairos worker``.

Pure functions (no I/O).  Version ``WIRE_VERSION`` is carried in every message; a worker refuses
(answers with an error) a message of another version instead of guessing.  Messages are compact
UTF-8 JSON written and read with orjson (:mod:`app.jsonio`): a 64-job request is ~13 kB, and
``json.dumps`` of it was the largest single cost of the API process in Redis mode.  A non-finite
float (which validated input never holds) is written as ``null``, so the reader refuses the
message (:class:`WireError`) instead of deciding on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from app import jsonio
from app.domains.hpc.codec import (
    CodecError,
    decision_from_json,
    decision_to_json,
    state_from_json,
    state_to_json,
)
from app.domains.hpc.codec import (
    int_from_json as _int,
)
from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.types import (
    Backfill,
    PlacementStrategy,
)
from app.outcomes import DecisionOutcome, DecisionRequest, FallbackReason, ShadowOutcome

WIRE_VERSION: Final = 1

#: a message that cannot be decoded
WireError = CodecError


Convert = Callable[[float], float]


def request_to_json(request: DecisionRequest, to_redis: Convert | None = None) -> bytes:
    """The request as one stream entry. With ``to_redis`` (the sender's
    :meth:`~app.batching.redis_clock.RedisClock.to_redis`), the deadline also travels as
    ``deadline_redis``, on the Redis server's clock (ADR 0074); ``deadline`` stays, on the
    sender's clock, for readers that do not know the field."""
    cfg = request.config
    extra: dict[str, float] = {}
    if to_redis is not None and request.deadline is not None:
        extra["deadline_redis"] = to_redis(request.deadline)
    return jsonio.dumps(
        {
            "v": WIRE_VERSION,
            "request_id": request.request_id,
            "state": state_to_json(request.state),
            "config": {
                "backfill": cfg.backfill.value,
                "placement": cfg.placement.value,
                "max_allocations": cfg.max_allocations,
                "explain": cfg.explain,
            },
            "policy": request.policy,
            "fallback": request.fallback,
            "shadow": request.shadow,
            "deadline": request.deadline,
            **extra,
        }
    )


def request_from_json(text: str | bytes, from_redis: Convert | None = None) -> DecisionRequest:
    """The request of a stream entry. With ``from_redis`` (the reader's
    :meth:`~app.batching.redis_clock.RedisClock.from_redis`) and a ``deadline_redis`` in the
    entry, the deadline is converted to the reader's clock; otherwise it is taken as sent."""
    try:
        raw = jsonio.loads(text)
        if raw.get("v") != WIRE_VERSION:
            raise WireError(f"wire version {raw.get('v')!r}, expected {WIRE_VERSION}")
        cfg = raw["config"]
        return DecisionRequest(
            request_id=str(raw["request_id"]),
            state=state_from_json(raw["state"]),
            config=DecisionConfig(
                backfill=Backfill(cfg["backfill"]),
                placement=PlacementStrategy(cfg["placement"]),
                max_allocations=cfg.get("max_allocations"),
                explain=bool(cfg.get("explain", False)),
            ),
            policy=str(raw["policy"]),
            fallback=str(raw["fallback"]),
            shadow=raw.get("shadow"),
            deadline=_deadline(raw, from_redis),
        )
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise WireError(f"undecodable request: {exc!r}") from exc


def _deadline(raw: Mapping[str, Any], from_redis: Convert | None) -> float | None:
    if from_redis is not None and raw.get("deadline_redis") is not None:
        return from_redis(float(raw["deadline_redis"]))
    return None if raw.get("deadline") is None else float(raw["deadline"])


def outcome_to_json(outcome: DecisionOutcome, *, batch_size: int, leader: bool) -> bytes:
    """``batch_size``/``leader``: the worker's batch, observed once (by the leader's requester)."""
    shadow = outcome.shadow
    return jsonio.dumps(
        {
            "v": WIRE_VERSION,
            "request_id": outcome.request_id,
            "decision": None if outcome.decision is None else decision_to_json(outcome.decision),
            "fallback_used": outcome.fallback_used,
            "fallback_reason": None
            if outcome.fallback_reason is None
            else outcome.fallback_reason.value,
            "fallback_detail": outcome.fallback_detail,
            "shadow": None
            if shadow is None
            else {
                "policy": shadow.policy,
                "decision": None if shadow.decision is None else decision_to_json(shadow.decision),
                "reason": shadow.reason,
            },
            "error": outcome.error,
            "error_type": outcome.error_type,
            "inference_batch": outcome.batch_size,
            "batch_size": batch_size,
            "leader": leader,
        }
    )


def outcome_from_json(text: str | bytes) -> tuple[DecisionOutcome, int, bool]:
    """The outcome, the worker batch size and whether this reply is the batch's leader."""
    try:
        raw = jsonio.loads(text)
        if raw.get("v") != WIRE_VERSION:
            raise WireError(f"wire version {raw.get('v')!r}, expected {WIRE_VERSION}")
        shadow_raw = raw.get("shadow")
        shadow = None
        if shadow_raw is not None:
            shadow = ShadowOutcome(
                policy=str(shadow_raw["policy"]),
                decision=None
                if shadow_raw["decision"] is None
                else decision_from_json(shadow_raw["decision"]),
                reason=shadow_raw.get("reason"),
            )
        reason = raw.get("fallback_reason")
        outcome = DecisionOutcome(
            request_id=str(raw["request_id"]),
            decision=None if raw["decision"] is None else decision_from_json(raw["decision"]),
            fallback_used=bool(raw["fallback_used"]),
            fallback_reason=None if reason is None else FallbackReason(reason),
            fallback_detail=raw.get("fallback_detail"),
            shadow=shadow,
            error=raw.get("error"),
            error_type=raw.get("error_type"),
            batch_size=_int(raw.get("inference_batch", 1)),
        )
        return outcome, _int(raw["batch_size"]), bool(raw["leader"])
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise WireError(f"undecodable reply: {exc!r}") from exc
