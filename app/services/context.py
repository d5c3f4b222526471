"""What every use-case receives: the caller's tenant and the open transaction."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True, slots=True)
class Ctx:
    session: AsyncSession
    tenant: str
