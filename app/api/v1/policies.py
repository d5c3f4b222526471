"""Policies that can decide: every heuristic, every shipped ONNX model and the caller's uploads
(ADR 0088)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Path, UploadFile

from app.api.deps import CtxDep, DecisionServiceDep, TenantDep
from app.api.errors import ERROR_RESPONSES
from app.schemas.policy import PolicyRead
from app.services import policies as policy_service

router = APIRouter(prefix="/policies", tags=["policies"], responses=ERROR_RESPONSES)

PolicyName = Annotated[
    str,
    Path(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}(@[A-Za-z0-9_.\-]{1,63})?$",
        description="`name` or `name@version`",
        examples=["f1"],
    ),
]


@router.get(
    "",
    response_model=list[PolicyRead],
    summary="List policies",
    description=(
        "Every policy the caller can decide with: the heuristics and shipped models (`scope: "
        "shared`) and the caller's own uploads (`scope: tenant`). Another tenant's uploads are "
        "never listed."
    ),
)
async def list_policies(decisions: DecisionServiceDep, tenant: TenantDep) -> list[PolicyRead]:
    return policy_service.list_policies(decisions, tenant)


@router.get(
    "/{name}",
    response_model=PolicyRead,
    summary="Get a policy",
    description=(
        "One policy, with its model card when it is a learned one. Another tenant's upload is a "
        "404, as a name that does not exist."
    ),
)
async def get_policy(
    name: PolicyName, decisions: DecisionServiceDep, tenant: TenantDep
) -> PolicyRead:
    return policy_service.get_policy(decisions, name, tenant)


@router.post(
    "",
    response_model=PolicyRead,
    status_code=201,
    summary="Upload an ONNX policy",
    description=(
        "Multipart: `model` (the .onnx file) and `card` (card.json). The card's `domain` "
        "(`hpc`, `gpu`, `dag`) says which clusters the policy decides and how it is checked: "
        "the model is validated like at startup by that domain's loader (CPU provider, the "
        "domain's input/output signature, e.g. hpc's `obs`/`action_mask` -> `logits`, its "
        "feature-schema version, a finite probe) and refused with 422 whose error code is the "
        "reason (`corrupt_model`, `signature_mismatch`, `schema_version_mismatch`, "
        "`non_finite_probe`, ...), a card nesting deeper than 32 levels with `invalid_card`. "
        "Name and version come from the card. The upload is the caller's tenant's own: visible "
        "and usable by it alone; another tenant may upload its own policy of the same name. A "
        "name that is a heuristic's or a shipped model's (in any case) is refused with 422 "
        "`reserved_policy_name` on `body.card`; a name@version the tenant already has is 409 "
        "`policy_exists`. Each upload is recorded in the audit log (`GET /v1/audit`, action "
        "`policy.upload`)."
    ),
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "examples": {
                        "upload": {
                            "summary": "policy.onnx and its card.json",
                            "value": {
                                "model": "<contents of policy.onnx>",
                                "card": '{"name": "my-policy", "version": "1", "kind": "onnx", '
                                '"domain": "hpc", "feature_schema_version": "kairos-hpc-v1"}',
                            },
                        }
                    }
                }
            }
        }
    },
)
async def upload_policy(
    model: Annotated[UploadFile, File(description="policy.onnx")],
    card: Annotated[UploadFile, File(description="card.json")],
    ctx: CtxDep,
    decisions: DecisionServiceDep,
) -> PolicyRead:
    return await policy_service.upload_policy(ctx, decisions, await model.read(), await card.read())
