"""The policy catalogue, as the decision service knows it."""

from __future__ import annotations

from app.policy.onnx_policy import PolicyRefusedError
from app.policy.registry import ModelExistsError
from app.schemas.policy import PolicyRead
from app.services.decision import DecisionService, PolicyInfo
from app.services.errors import ConflictError, ErrorItem, UnprocessableError, not_found


def _read(info: PolicyInfo) -> PolicyRead:
    return PolicyRead(
        name=info.name,
        version=info.version,
        kind=info.kind,
        domain=info.domain,
        sha256=info.sha256,
        card=info.card,
        loaded=info.loaded,
        description=info.description,
    )


def list_policies(decisions: DecisionService) -> list[PolicyRead]:
    return [_read(p) for p in decisions.policies()]


def get_policy(decisions: DecisionService, name: str) -> PolicyRead:
    info = decisions.get_policy(name)
    if info is None:
        raise not_found("policy", name)
    return _read(info)


async def upload_policy(decisions: DecisionService, model: bytes, card: bytes) -> PolicyRead:
    """Validate and install an ONNX model; 422 with the refusal reason as the error code."""
    try:
        info = await decisions.install_policy(model, card)
    except PolicyRefusedError as exc:
        field = "body.card" if exc.reason in {"invalid_card", "schema_version_mismatch"} else None
        raise UnprocessableError(
            f"the model was refused: {exc.reason.value}: {exc.message}",
            code=exc.reason.value,
            details=[ErrorItem(field or "body.model", exc.message, exc.reason.value)],
        ) from None
    except ModelExistsError as exc:
        raise ConflictError(str(exc), code="policy_exists") from None
    return _read(info)
