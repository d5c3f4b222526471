"""Policies that can decide: every heuristic (and, with the pipeline, every ONNX model)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Path, UploadFile

from app.api.deps import DecisionServiceDep
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
    description="Every policy this service can decide with: heuristics and loaded models.",
)
async def list_policies(decisions: DecisionServiceDep) -> list[PolicyRead]:
    return policy_service.list_policies(decisions)


@router.get(
    "/{name}",
    response_model=PolicyRead,
    summary="Get a policy",
    description="One policy, with its model card when it is a learned one.",
)
async def get_policy(name: PolicyName, decisions: DecisionServiceDep) -> PolicyRead:
    return policy_service.get_policy(decisions, name)


@router.post(
    "",
    response_model=PolicyRead,
    status_code=201,
    summary="Upload an ONNX policy",
    description=(
        "Multipart: `model` (the .onnx file) and `card` (card.json). The model is validated like "
        "at startup (CPU provider, `obs`/`action_mask` -> `logits` signature, feature-schema "
        "version, finite probe) and refused with 422 whose error code is the reason "
        "(`corrupt_model`, `signature_mismatch`, `schema_version_mismatch`, `non_finite_probe`, "
        "...). Name and version come from the card; an existing name@version is a 409."
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
    decisions: DecisionServiceDep,
) -> PolicyRead:
    return await policy_service.upload_policy(decisions, await model.read(), await card.read())
