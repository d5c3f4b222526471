"""Path and query parameters shared by routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from app.schemas.common import ID_PATTERN, MAX_PAGE_LIMIT

ClusterId = Annotated[
    str, Path(pattern=ID_PATTERN, description="Cluster id", examples=["gpu-east"])
]
NodeId = Annotated[str, Path(pattern=ID_PATTERN, description="Node id", examples=["n1"])]
JobId = Annotated[str, Path(pattern=ID_PATTERN, description="Job id", examples=["train-42"])]
DecisionId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_\-]{1,64}$", description="Decision id", examples=["dec_0f3a"]),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE_LIMIT, description="Page size")]
Cursor = Annotated[
    str | None, Query(max_length=128, description="`next_cursor` of the previous page")
]
