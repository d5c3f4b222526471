from __future__ import annotations

from kairos_client._models import BaseModel


class Placement(BaseModel):
    """``tasks`` of a job's gang placed on one node."""

    node_id: str
    tasks: int
