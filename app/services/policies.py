"""The policy catalogue as one tenant sees it (ADR 0088): every heuristic, every shipped model,
and the tenant's own uploads; another tenant's upload is unknown (404, absent from lists)."""

from __future__ import annotations

from app.db.repositories.audit_repository import AuditRepository
from app.policy.onnx_policy import PolicyRefusedError, RefusalReason
from app.policy.registry import ModelExistsError, ReservedNameError
from app.schemas.policy import PolicyRead
from app.services.context import Ctx
from app.services.decision import DecisionService, PolicyInfo
from app.services.errors import ConflictError, ErrorItem, UnprocessableError, not_found

#: the audit action of an accepted upload
POLICY_UPLOAD = "policy.upload"

_CARD_REASONS = frozenset({RefusalReason.INVALID_CARD, RefusalReason.SCHEMA_VERSION_MISMATCH})


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
        scope=info.scope,
    )


def list_policies(decisions: DecisionService, tenant: str | None = None) -> list[PolicyRead]:
    """What ``tenant`` may decide with (``None``: heuristics and shipped models only)."""
    return [_read(p) for p in decisions.policies(tenant)]


def get_policy(decisions: DecisionService, name: str, tenant: str | None = None) -> PolicyRead:
    info = decisions.get_policy(name, tenant)
    if info is None:
        raise not_found("policy", name)
    return _read(info)


async def upload_policy(
    ctx: Ctx, decisions: DecisionService, model: bytes, card: bytes
) -> PolicyRead:
    """Validate and install an ONNX model as the tenant's own, and audit it. The card's
    ``domain`` picks the checks (an hpc, gpu or dag model: ``PolicyRegistry.prepare``); a gpu or
    dag upload then decides that domain's clusters of the tenant only.

    422 with the refusal reason as the error code, 422 ``reserved_policy_name`` for a
    heuristic's or shipped model's name, 409 ``policy_exists`` for a name@version the tenant
    has. The audit event is flushed before the model is written, so an upload the database
    cannot record is not installed either."""
    try:
        prepared = await decisions.prepare_policy(model, card, tenant=ctx.tenant)
        spec = f"{prepared.name}@{prepared.version}"
        await AuditRepository(ctx.session).record(
            ctx.tenant,
            POLICY_UPLOAD,
            spec,
            {
                "name": prepared.name,
                "version": prepared.version,
                "sha256": prepared.sha256,
                "domain": prepared.domain,
            },
        )
        info = await decisions.commit_policy(prepared, tenant=ctx.tenant)
    except PolicyRefusedError as exc:
        field = "body.card" if exc.reason in _CARD_REASONS else "body.model"
        raise UnprocessableError(
            f"the model was refused: {exc.reason.value}: {exc.message}",
            code=exc.reason.value,
            details=[ErrorItem(field, exc.message, exc.reason.value)],
        ) from None
    except ReservedNameError as exc:
        raise UnprocessableError(
            f"{exc}; upload it under another name",
            code="reserved_policy_name",
            details=[ErrorItem("body.card", f"name {exc.name!r} is reserved", "reserved")],
        ) from None
    except ModelExistsError as exc:
        raise ConflictError(str(exc), code="policy_exists") from None
    return _read(info)
