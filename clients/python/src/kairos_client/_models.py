"""Base class of every response model."""

from __future__ import annotations

from pydantic import BaseModel as _PydanticBaseModel
from pydantic import ConfigDict


class BaseModel(_PydanticBaseModel):
    """A response object. Fields the SDK does not know yet are kept (``model_extra``), not dropped,
    so a newer service never breaks an older SDK."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
