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
from app.batching.budget import Budgeted
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


def request_to_json(
    request: DecisionRequest,
    to_redis: Convert | None = None,
    *,
    budget_s: float | None = None,
    start_by: float | None = None,
) -> bytes:
    """The request as one stream entry. With ``to_redis`` (the sender's
    :meth:`~app.batching.redis_clock.RedisClock.to_redis`), the deadline also travels as
    ``deadline_redis``, on the Redis server's clock (ADR 0074); ``deadline`` stays, on the
    sender's clock, for readers that do not know the field.

    ``budget_s`` and ``start_by`` (sender's clock; ``start_by_redis`` beside it as for the
    deadline) let the reader count the deadline from its batch's start
    (:mod:`app.batching.budget`); a reader that does not know them keeps ``deadline``."""
    cfg = request.config
    extra: dict[str, float] = {}
    if to_redis is not None and request.deadline is not None:
        extra["deadline_redis"] = to_redis(request.deadline)
    if budget_s is not None:
        extra["budget_s"] = budget_s
        if start_by is not None:
            extra["start_by"] = start_by
            if to_redis is not None:
                extra["start_by_redis"] = to_redis(start_by)
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
    return queued_from_json(text, from_redis).request


def queued_from_json(text: str | bytes, from_redis: Convert | None = None) -> Budgeted:
    """:func:`request_from_json` with the entry's budget and latest start (reader's clock,
    converted like the deadline); an entry without them has ``budget_s`` ``None``."""
    try:
        raw = jsonio.loads(text)
        if raw.get("v") != WIRE_VERSION:
            raise WireError(f"wire version {raw.get('v')!r}, expected {WIRE_VERSION}")
        cfg = raw["config"]
        request = DecisionRequest(
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
            deadline=_time(raw, "deadline", from_redis),
        )
        budget = raw.get("budget_s")
        return Budgeted(
            request,
            None if budget is None else _finite(float(budget)),
            _time(raw, "start_by", from_redis),
        )
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise WireError(f"undecodable request: {exc!r}") from exc


def _finite(value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise WireError(f"non-finite number {value!r}")
    return value


def _time(raw: Mapping[str, Any], key: str, from_redis: Convert | None) -> float | None:
    """``key`` on the reader's clock: ``<key>_redis`` converted when both are there."""
    on_redis = raw.get(f"{key}_redis")
    if from_redis is not None and on_redis is not None:
        return from_redis(float(on_redis))
    return None if raw.get(key) is None else float(raw[key])


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
