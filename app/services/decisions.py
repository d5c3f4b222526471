"""Reading the decision log.

A decision's stored input (:func:`app.db.decision_input.stored_input`: the compressed
``input_blob``, or ``input_snapshot`` of older rows) is an object ``{"codec": "hpc-state/1",
"state": <state_to_json>, "policy", "fallback", "backfill", "placement", "explain"}``; the
oldest rows hold the ``/v1/decide`` request itself. Either way ``GET /v1/decisions/{id}``
answers the input in ``/v1/decide`` request shape, so it replays as it is
(:func:`replayable_input`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.db.decision_input import stored_input
from app.db.orm import DecisionRecord
from app.db.repositories.decision_repository import DecisionRepository
from app.schemas.common import Page
from app.schemas.decision import DecisionDetail, DecisionRead
from app.services.clusters import require_cluster
from app.services.context import Ctx
from app.services.convert import decision_read
from app.services.errors import not_found
from app.services.paging import cursor_arg

#: The key and value that mark a stored input written through the HPC codec.
SNAPSHOT_CODEC_KEY: Final = "codec"
SNAPSHOT_CODEC: Final = "hpc-state/1"


def _placement(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):  # already request-shaped
        return {"node_id": raw["node_id"], "tasks": raw["tasks"]}
    node_id, tasks = raw
    return {"node_id": node_id, "tasks": tasks}


def replayable_input(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored decision input in ``/v1/decide`` request shape.

    The codec's form differs from the request only in its running jobs (placements as
    ``[node_id, tasks]`` pairs, the start time as ``start``); a stored request (older rows) is
    returned as it is.
    """
    if stored.get(SNAPSHOT_CODEC_KEY) != SNAPSHOT_CODEC:
        return dict(stored)
    state: Mapping[str, Any] = stored["state"]
    body: dict[str, Any] = {
        "now": state["now"],
        "nodes": state["nodes"],
        "running": [
            {
                "job": r["job"],
                "placements": [_placement(p) for p in r["placements"]],
                "start_time": r["start"] if "start" in r else r["start_time"],
            }
            for r in state["running"]
        ],
        "pending": state["pending"],
        "finished": state["finished"],
    }
    for key in ("policy", "fallback", "backfill", "placement", "explain"):
        if key in stored:
            body[key] = stored[key]
    return body


def decision_detail(record: DecisionRecord) -> DecisionDetail:
    """The decision with its input, replayable through ``POST /v1/decide``."""
    read = decision_read(record)
    return DecisionDetail.model_construct(
        **{name: getattr(read, name) for name in DecisionRead.model_fields},
        input=replayable_input(stored_input(record)),
    )


async def get_decision(ctx: Ctx, decision_id: str) -> DecisionDetail:
    record = await DecisionRepository(ctx.session).get(ctx.tenant, decision_id)
    if record is None:
        raise not_found("decision", decision_id)
    return decision_detail(record)


async def list_decisions(
    ctx: Ctx, cluster_id: str, *, limit: int, cursor: str | None
) -> Page[DecisionRead]:
    """Newest first."""
    cluster = await require_cluster(ctx, cluster_id)
    page = await DecisionRepository(ctx.session).page(
        ctx.tenant, cluster.pk, after_pk=cursor_arg(cursor), limit=limit
    )
    return Page[DecisionRead](
        items=[decision_read(d) for d in page.items], next_cursor=page.next_cursor
    )


async def recent_details(ctx: Ctx, cluster_id: str, *, limit: int) -> list[DecisionDetail]:
    """The cluster's last ``limit`` decisions with their inputs, newest first."""
    cluster = await require_cluster(ctx, cluster_id)
    page = await DecisionRepository(ctx.session).page(
        ctx.tenant, cluster.pk, after_pk=None, limit=limit
    )
    return [decision_detail(d) for d in page.items]
