"""``api_router``: every ``/v1`` resource router; auth sits on the router."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.api.deps import get_tenant
from app.api.v1 import audit, clusters, dags, decisions, jobs, k8s, policies
from app.api.v1 import tunes as tunes

api_router = APIRouter(prefix="/v1", dependencies=[Depends(get_tenant)])
api_router.include_router(clusters.router)
api_router.include_router(clusters.nodes_router)
api_router.include_router(jobs.router)
api_router.include_router(dags.router)
api_router.include_router(decisions.router)
api_router.include_router(policies.router)
api_router.include_router(k8s.router)
api_router.include_router(audit.router)
api_router.include_router(tunes.router)
