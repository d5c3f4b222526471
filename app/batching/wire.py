"""JSON wire format of decision requests and outcomes between the API and ``kairos worker``.

Pure functions (no I/O).  A message carries its version; a worker refuses (answers with an error) a
message of a version it does not read instead of guessing.  Version 1 is an HPC request or reply;
version 2 adds ``domain`` and carries any domain's snapshot, round configuration and decision in
that domain's own codec (:class:`~app.kernel.domain.Domain`).  HPC messages are still written as
version 1, so a worker of an older release keeps deciding them; it refuses a version 2 message,
and the API then decides that request itself.  Messages are compact
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
from app.domains import DEFAULT_DOMAIN, UnknownDomainError, get_domain
from app.domains.hpc.codec import CodecError
from app.domains.hpc.codec import int_from_json as _int
from app.kernel.domain import Domain
from app.kernel.errors import DomainError
from app.kernel.types import PolicyRef
from app.outcomes import DecisionOutcome, DecisionRequest, FallbackReason, ShadowOutcome

#: the version of an HPC message (no ``domain``)
WIRE_VERSION: Final = 1
#: the version of a message that names its domain
DOMAIN_WIRE_VERSION: Final = 2
_READ: Final = (WIRE_VERSION, DOMAIN_WIRE_VERSION)
#: what a malformed message raises while it is read
_UNDECODABLE: Final = (
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    DomainError,
    UnknownDomainError,
)

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
    domain = get_domain(request.domain)
    extra: dict[str, Any] = {}
    if request.domain != DEFAULT_DOMAIN:
        extra["domain"] = request.domain
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
            "v": _version(request.domain),
            "request_id": request.request_id,
            "state": domain.state_to_json(request.state),
            "config": domain.config_to_json(request.config),
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
        name, domain = _domain_of(raw)
        request = DecisionRequest(
            request_id=str(raw["request_id"]),
            state=domain.state_from_json(raw["state"]),
            config=domain.config_from_json(raw["config"]),
            policy=str(raw["policy"]),
            fallback=str(raw["fallback"]),
            shadow=raw.get("shadow"),
            deadline=_time(raw, "deadline", from_redis),
            domain=name,
        )
        budget = raw.get("budget_s")
        return Budgeted(
            request,
            None if budget is None else _finite(float(budget)),
            _time(raw, "start_by", from_redis),
        )
    except WireError:
        raise
    except _UNDECODABLE as exc:
        raise WireError(f"undecodable request: {exc!r}") from exc


def request_id_of(text: str | bytes) -> str | None:
    """The ``request_id`` of a message that may not decode as a request (``None`` when even
    that cannot be read): a worker answers such a message with an error."""
    try:
        raw = jsonio.loads(text)
        request_id = raw.get("request_id") if isinstance(raw, dict) else None
    except ValueError:
        return None
    return request_id if isinstance(request_id, str) and request_id else None


def _version(domain: str) -> int:
    return WIRE_VERSION if domain == DEFAULT_DOMAIN else DOMAIN_WIRE_VERSION


def _domain_of(raw: Mapping[str, Any]) -> tuple[str, Domain[Any, Any, Any, Any]]:
    """The message's domain: ``hpc`` in version 1, its ``domain`` in version 2."""
    version = raw.get("v")
    if version not in _READ:
        raise WireError(f"wire version {version!r}, expected one of {_READ}")
    name = DEFAULT_DOMAIN if version == WIRE_VERSION else str(raw["domain"])
    return name, get_domain(name)


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
    domain = outcome.domain
    codec = get_domain(domain)
    extra: dict[str, Any] = {}
    if domain != DEFAULT_DOMAIN:
        ref = outcome.decided_by
        extra = {
            "domain": domain,
            "decided_by": None if ref is None else [ref.name, ref.version, ref.kind],
            "explanation": outcome.explanation,
        }
    return jsonio.dumps(
        {
            "v": _version(domain),
            "request_id": outcome.request_id,
            "decision": None
            if outcome.decision is None
            else codec.decision_to_json(outcome.decision),
            "fallback_used": outcome.fallback_used,
            "fallback_reason": None
            if outcome.fallback_reason is None
            else outcome.fallback_reason.value,
            "fallback_detail": outcome.fallback_detail,
            "shadow": None
            if shadow is None
            else {
                "policy": shadow.policy,
                "decision": None
                if shadow.decision is None
                else codec.decision_to_json(shadow.decision),
                "reason": shadow.reason,
            },
            "error": outcome.error,
            "error_type": outcome.error_type,
            "inference_batch": outcome.batch_size,
            "batch_size": batch_size,
            "leader": leader,
            **extra,
        }
    )


def outcome_from_json(text: str | bytes) -> tuple[DecisionOutcome, int, bool]:
    """The outcome, the worker batch size and whether this reply is the batch's leader."""
    try:
        raw = jsonio.loads(text)
        domain, codec = _domain_of(raw)
        shadow_raw = raw.get("shadow")
        shadow = None
        if shadow_raw is not None:
            shadow = ShadowOutcome(
                policy=str(shadow_raw["policy"]),
                decision=None
                if shadow_raw["decision"] is None
                else codec.decision_from_json(shadow_raw["decision"]),
                reason=shadow_raw.get("reason"),
            )
        reason = raw.get("fallback_reason")
        outcome = DecisionOutcome(
            request_id=str(raw["request_id"]),
            decision=None if raw["decision"] is None else codec.decision_from_json(raw["decision"]),
            fallback_used=bool(raw["fallback_used"]),
            fallback_reason=None if reason is None else FallbackReason(reason),
            fallback_detail=raw.get("fallback_detail"),
            shadow=shadow,
            error=raw.get("error"),
            error_type=raw.get("error_type"),
            batch_size=_int(raw.get("inference_batch", 1)),
            decided_by=_ref(raw.get("decided_by")),
            explanation=_explanation(raw.get("explanation")),
            domain=domain,
        )
        return outcome, _int(raw["batch_size"]), bool(raw["leader"])
    except WireError:
        raise
    except _UNDECODABLE as exc:
        raise WireError(f"undecodable reply: {exc!r}") from exc


def _ref(raw: Any) -> PolicyRef | None:
    if raw is None:
        return None
    name, version, kind = raw
    return PolicyRef(str(name), str(version), str(kind))


def _explanation(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(step, dict) for step in raw):
        raise WireError("explanation: not a list of objects")
    return raw
