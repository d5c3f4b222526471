"""The policy catalogue, as the decision service knows it."""

from __future__ import annotations

from app.schemas.policy import PolicyRead
from app.services.decision import DecisionService, PolicyInfo
from app.services.errors import not_found


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
