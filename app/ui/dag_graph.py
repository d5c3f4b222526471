"""A DAG's stages and their progress drawn as a graph (inline SVG, no script).

Layout: a stage's column is its depth (the longest path from a source), its row its order among
the stages of that depth (spec order); every edge runs from a parent's right side to a child's
left side. Each stage is a box with its id, a bar of finished (solid) and running (light) tasks
out of ``tasks``, and its counts; its border colour is its state. Text is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Final

from app.schemas.dag import DagRead, StageRead

__all__ = ["dag_svg", "depths"]

BOX_W: Final = 168
BOX_H: Final = 58
GAP_X: Final = 64
GAP_Y: Final = 22
PAD: Final = 12
STATE_COLOURS: Final = {
    "pending": "#8a8f98",
    "running": "#1f6feb",
    "finished": "#1a7f37",
    "cancelled": "#9a6700",
    "failed": "#cf222e",
}


def depths(stages: list[StageRead]) -> dict[str, int]:
    """Per stage id, the longest path (in edges) from a source to it."""
    by_id = {s.id: s for s in stages}
    memo: dict[str, int] = {}

    def depth(stage_id: str, seen: frozenset[str]) -> int:
        if stage_id in memo:
            return memo[stage_id]
        parents = [p for p in by_id[stage_id].depends_on if p in by_id and p not in seen]
        d = 1 + max((depth(p, seen | {p}) for p in parents), default=-1)
        memo[stage_id] = d
        return d

    return {s.id: depth(s.id, frozenset({s.id})) for s in stages}


def _box(stage: StageRead, x: int, y: int) -> str:
    colour = STATE_COLOURS.get(stage.state, "#8a8f98")
    inner = BOX_W - 16
    done = inner * stage.finished / max(stage.tasks, 1)
    running = inner * stage.running_slots / max(stage.tasks, 1)
    label = escape(stage.id if len(stage.id) <= 20 else stage.id[:19] + "…")
    counts = f"{stage.finished}/{stage.tasks} done · {stage.running_slots} running"
    title = escape(
        f"{stage.job_id}: {stage.state}; launched {stage.launched}, finished {stage.finished} "
        f"of {stage.tasks}; {stage.running_slots} slot(s) running"
        + (f"; {stage.reserved_slots} reserved" if stage.reserved_slots else "")
    )
    return (
        f'<g class="stage" data-stage="{escape(stage.id)}" data-state="{escape(stage.state)}">'
        f"<title>{title}</title>"
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="#fff" '
        f'stroke="{colour}" stroke-width="2"/>'
        f'<text x="{x + 8}" y="{y + 17}" font-size="13" font-weight="600">{label}</text>'
        f'<rect x="{x + 8}" y="{y + 25}" width="{inner}" height="8" fill="#eaeef2"/>'
        f'<rect x="{x + 8}" y="{y + 25}" width="{done:.1f}" height="8" fill="{colour}"/>'
        f'<rect x="{x + 8 + done:.1f}" y="{y + 25}" width="{running:.1f}" height="8" '
        f'fill="{colour}" fill-opacity="0.35"/>'
        f'<text x="{x + 8}" y="{y + 50}" font-size="11" fill="#57606a">{escape(counts)}</text>'
        "</g>"
    )


def dag_svg(dag: DagRead) -> str:
    """The DAG as an SVG element."""
    stages = list(dag.stages)
    level = depths(stages)
    rows: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    for s in stages:
        col = level[s.id]
        row = rows.get(col, 0)
        rows[col] = row + 1
        where[s.id] = (PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    width = PAD * 2 + (max(level.values(), default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values(), default=1) * (BOX_H + GAP_Y) - GAP_Y
    edges = []
    for s in stages:
        cx, cy = where[s.id]
        for p in s.depends_on:
            if p not in where:
                continue
            px, py = where[p]
            x1, y1, x2, y2 = px + BOX_W, py + BOX_H // 2, cx, cy + BOX_H // 2
            mid = (x1 + x2) / 2
            edges.append(
                f'<path class="edge" data-from="{escape(p)}" data-to="{escape(s.id)}" '
                f'd="M{x1},{y1} C{mid:.1f},{y1} {mid:.1f},{y2} {x2 - 6},{y2}" fill="none" '
                'stroke="#8c959f" stroke-width="1.5" marker-end="url(#dag-arrow)"/>'
            )
    boxes = [_box(s, *where[s.id]) for s in stages]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag-graph" role="img" '
        f'aria-label="stages of DAG {escape(dag.id)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" data-testid="dag-graph">'
        '<defs><marker id="dag-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#8c959f"/></marker></defs>' + "".join(edges) + "".join(boxes) + "</svg>"
    )
