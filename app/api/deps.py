"""Dependencies as named ``Annotated`` aliases, declared once."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.decision_writer import DecisionWriter
from app.db.session import Database
from app.observability import Metrics
from app.services.context import Ctx
from app.services.decision import DecisionService
from app.services.errors import UnauthorizedError
from app.settings import DEFAULT_TENANT, Settings

_bearer = HTTPBearer(auto_error=False, description="An API key from KAIROS_API_KEYS")
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


async def get_decision_service(request: Request) -> DecisionService:
    service: DecisionService = request.app.state.decisions
    return service


async def get_decision_writer(request: Request) -> DecisionWriter:
    writer: DecisionWriter = request.app.state.decision_writer
    return writer


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]
DecisionServiceDep = Annotated[DecisionService, Depends(get_decision_service)]
DecisionWriterDep = Annotated[DecisionWriter, Depends(get_decision_writer)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


def tenant_for_key(keys: Mapping[str, str], token: str | None) -> str | None:
    """The tenant owning ``token`` (constant-time compare), or None."""
    if token is None:
        return None
    found: str | None = None
    for key, tenant in keys.items():
        if secrets.compare_digest(key.encode(), token.encode()):
            found = tenant
    return found


def resolve_tenant(request: Request, token: str | None) -> str:
    keys: Mapping[str, str] = request.app.state.api_keys
    if not keys:
        return DEFAULT_TENANT
    tenant = tenant_for_key(keys, token)
    if tenant is None:
        message = "missing API key" if token is None else "unknown API key"
        raise UnauthorizedError(message, headers={"WWW-Authenticate": "Bearer"})
    return tenant


async def get_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    token = credentials.credentials if credentials is not None else None
    return resolve_tenant(request, token)


TenantDep = Annotated[str, Depends(get_tenant)]


async def get_session(request: Request, database: DatabaseDep) -> AsyncIterator[AsyncSession]:
    """The request's one transaction: committed when the operation returns, before the response
    is sent (``scope="function"``), rolled back on any error."""
    async with database.transaction(write=request.method not in _READ_METHODS) as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


async def get_ctx(tenant: TenantDep, session: SessionDep) -> Ctx:
    return Ctx(session=session, tenant=tenant)


CtxDep = Annotated[Ctx, Depends(get_ctx)]
