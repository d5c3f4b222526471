"""Pure helpers turning API schemas into what the templates show (no I/O, unit-testable)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from app.schemas.decision import DecisionDetail, DecisionRead
from app.schemas.policy import PolicyRead

REPORT_SUFFIXES = frozenset({".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"})
MAX_REPORT_FILES = 60


@dataclass(frozen=True, slots=True)
class Usage:
    """One resource of a node or cluster: how much of its capacity is allocated."""

    resource: str
    allocated: float
    capacity: float

    @property
    def percent(self) -> float:
        if self.capacity <= 0:
            return 0.0
        return max(0.0, min(100.0, 100.0 * self.allocated / self.capacity))

    @property
    def level(self) -> str:
        """CSS class: ``low`` < 60 % <= ``mid`` < 90 % <= ``high``."""
        if self.percent >= 90:
            return "high"
        if self.percent >= 60:
            return "mid"
        return "low"


def usage(
    capacity: Mapping[str, float], allocated: Mapping[str, float], resources: Iterable[str] = ()
) -> list[Usage]:
    """Utilisation per resource, in the cluster's resource order, then any others by name."""
    names = list(dict.fromkeys([*resources, *sorted(capacity), *sorted(allocated)]))
    return [
        Usage(name, float(allocated.get(name, 0.0)), float(capacity.get(name, 0.0)))
        for name in names
        if capacity.get(name, 0.0) > 0 or allocated.get(name, 0.0) > 0
    ]


@dataclass(frozen=True, slots=True)
class ShadowAgreement:
    """How often the shadow policy would have started the same jobs as the deciding policy."""

    policy: str
    decisions: int
    identical: int
    mean_jaccard: float

    @property
    def identical_percent(self) -> float:
        return 100.0 * self.identical / self.decisions if self.decisions else 0.0


def _jaccard(a: set[str], b: set[str]) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def shadow_agreement(decisions: Sequence[DecisionRead]) -> list[ShadowAgreement]:
    """Per shadow policy, over the decisions that carry a shadow choice: the share whose job set
    is identical and the mean Jaccard similarity of the two job sets."""
    by_policy: dict[str, list[float]] = {}
    for decision in decisions:
        if decision.shadow is None:
            continue
        primary = {a.job_id for a in decision.allocations}
        shadow = {a.job_id for a in decision.shadow.allocations}
        by_policy.setdefault(decision.shadow.policy, []).append(_jaccard(primary, shadow))
    return [
        ShadowAgreement(
            policy=policy,
            decisions=len(scores),
            identical=sum(1 for s in scores if s == 1.0),
            mean_jaccard=sum(scores) / len(scores),
        )
        for policy, scores in sorted(by_policy.items())
    ]


def report_files(reports_dir: Path) -> list[Path]:
    """Plot files under ``reports_dir`` (relative paths, sorted), at most ``MAX_REPORT_FILES``."""
    if not reports_dir.is_dir():
        return []
    found = sorted(
        p.relative_to(reports_dir)
        for p in reports_dir.rglob("*")
        if p.is_file() and p.suffix.lower() in REPORT_SUFFIXES and not p.name.startswith(".")
    )
    return found[:MAX_REPORT_FILES]


def safe_report_path(reports_dir: Path, relative: str) -> Path | None:
    """``reports_dir / relative`` if it is a plot file inside ``reports_dir``, else ``None``."""
    root = reports_dir.resolve()
    candidate = (root / relative).resolve()
    if not candidate.is_relative_to(root) or candidate.suffix.lower() not in REPORT_SUFFIXES:
        return None
    return candidate if candidate.is_file() else None


def format_time(ts: float | None) -> str:
    """ISO 8601 in UTC with its offset (``2026-01-01T00:00:00+00:00``); a dash for no time."""
    if ts is None:
        return "—"
    return dt.datetime.fromtimestamp(round(ts), tz=dt.UTC).isoformat()


def format_amount(value: float) -> str:
    return f"{value:g}" if value == int(value) or abs(value) >= 100 else f"{value:.2f}"


def format_resources(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {format_amount(v)}" for k, v in resources.items()) or "—"


# ---------------------------------------------------------------- paging

#: the trail's marker for "the first page" (a cursor is never empty)
FIRST_PAGE = "~"
#: how many earlier pages a table remembers for its "previous" link
MAX_TRAIL = 100


@dataclass(frozen=True, slots=True)
class PageLinks:
    """Next/previous links of one table. The API's cursors only go forward, so each link carries
    the trail of the cursors of the pages before it (``{name}_back``, comma-separated)."""

    next_href: str | None
    prev_href: str | None
    number: int


def page_state(query: Mapping[str, str], name: str) -> tuple[str | None, list[str]]:
    """This table's cursor (None: the first page) and the trail of the earlier pages' cursors."""
    cursor = query.get(name) or None
    back = [c for c in query.get(f"{name}_back", "").split(",") if c][-MAX_TRAIL:]
    return cursor, back


def page_links(
    path: str, query: Mapping[str, str], name: str, next_cursor: str | None
) -> PageLinks:
    """Links to the next and previous pages of table ``name``; other tables keep their page."""
    cursor, back = page_state(query, name)
    others = {k: v for k, v in query.items() if k not in (name, f"{name}_back") and k != "refresh"}

    def href(target: str | None, trail: list[str]) -> str:
        params = dict(others)
        if target is not None:
            params[name] = target
        if trail:
            params[f"{name}_back"] = ",".join(trail[-MAX_TRAIL:])
        encoded = urlencode(params)
        return f"{path}?{encoded}" if encoded else path

    next_href = (
        href(next_cursor, [*back, cursor or FIRST_PAGE]) if next_cursor is not None else None
    )
    prev_href: str | None = None
    if cursor is not None:
        previous = back[-1] if back else FIRST_PAGE
        prev_href = href(None if previous == FIRST_PAGE else previous, back[:-1])
    return PageLinks(next_href=next_href, prev_href=prev_href, number=len(back) + 1)


# ---------------------------------------------------------------- policies


def _trace_name(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    for suffix in (".gz", ".swf"):
        name = name.removesuffix(suffix)
    return name


def policy_about(policy: PolicyRead) -> str:
    """What a policy is: its description, or for a model a line drawn from its card (the site
    note, how it was trained, on which traces, for which backfilling mode)."""
    if policy.description:
        return policy.description
    card = policy.card or {}
    parts: list[str] = []
    mode = card.get("decision_mode")
    if mode:
        parts.append(f"learned {mode}ing policy" if mode == "rank" else f"learned policy ({mode})")
    arch = card.get("architecture")
    if isinstance(arch, Mapping) and arch.get("parameters"):
        parts.append(f"{arch['parameters']} parameters")
    training = card.get("training")
    if isinstance(training, Mapping):
        algorithm = str(training.get("algorithm", "")).split(" (", 1)[0].split(",", 1)[0]
        traces = [
            _trace_name(str(t.get("trace", "")))
            for t in training.get("traces", [])
            if isinstance(t, Mapping)
        ]
        trained = "trained"
        if algorithm:
            trained += f" by {algorithm}"
        if traces:
            trained += f" on {', '.join(traces)}"
        if training.get("backfill"):
            trained += f", backfill {training['backfill']}"
        if training.get("semantics"):
            trained += f", {training['semantics']} semantics"
        parts.append(trained)
    site = card.get("site")
    if isinstance(site, Mapping) and site.get("note"):
        parts.append(str(site["note"]))
    return "; ".join(parts)


# ---------------------------------------------------------------- one decision


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One pending job of a decision's input: what the decision did with it, and why."""

    job_id: str
    tasks: int
    per_task: Mapping[str, float]
    outcome: str  # started | reserved | not started | unschedulable
    reason: str
    shadow: str | None  # started | not started; None without a shadow policy


@dataclass(frozen=True, slots=True)
class DecisionBrief:
    """The input of a decision in brief."""

    nodes: int
    nodes_by_state: Mapping[str, int]
    capacity: Mapping[str, float]
    pending: int
    running: int
    finished: int


def decision_brief(decision: DecisionDetail) -> DecisionBrief:
    snapshot = decision.input
    nodes = [n for n in snapshot.get("nodes", []) if isinstance(n, Mapping)]
    by_state: dict[str, int] = {}
    capacity: dict[str, float] = {}
    for node in nodes:
        state = str(node.get("state", "up"))
        by_state[state] = by_state.get(state, 0) + 1
        if state == "up":
            for name, amount in dict(node.get("capacity", {})).items():
                capacity[name] = capacity.get(name, 0.0) + float(amount)
    return DecisionBrief(
        nodes=len(nodes),
        nodes_by_state=dict(sorted(by_state.items())),
        capacity=capacity,
        pending=len(snapshot.get("pending", [])),
        running=len(snapshot.get("running", [])),
        finished=len(snapshot.get("finished", [])),
    )


def _placements(placements: Iterable[Any]) -> str:
    return ", ".join(
        f"{p.node_id} ({p.tasks} task{'' if p.tasks == 1 else 's'})" for p in placements
    )


def job_outcomes(decision: DecisionDetail) -> list[JobOutcome]:
    """Every pending job of the input, in the policy's order when the decision was explained."""
    explain: Mapping[str, Any] = decision.explain or {}
    started = {a.job_id: a for a in decision.allocations}
    reserved = {r.job_id: r for r in decision.reservations}
    not_started: Mapping[str, Any] = explain.get("not_started") or {}
    unschedulable = set(explain.get("unschedulable") or [])
    shadow = {a.job_id for a in decision.shadow.allocations} if decision.shadow else None
    jobs = {str(j["id"]): j for j in decision.input.get("pending", []) if isinstance(j, Mapping)}
    order = [j for j in explain.get("order") or [] if j in jobs]
    order += [j for j in jobs if j not in set(order)]
    rows: list[JobOutcome] = []
    for job_id in order:
        job = jobs[job_id]
        if job_id in started:
            outcome = "started"
            reason = f"started on {_placements(started[job_id].placements)}"
        elif job_id in unschedulable:
            outcome, reason = "unschedulable", str(not_started.get(job_id, "can never run here"))
        elif job_id in reserved:
            outcome = "reserved"
            reason = str(
                not_started.get(job_id)
                or f"reserved to start at {format_time(reserved[job_id].start_at)}"
            )
        else:
            outcome = "not started"
            reason = str(
                not_started.get(job_id)
                or 'no explanation stored (schedule with "explain": true for one)'
            )
        rows.append(
            JobOutcome(
                job_id=job_id,
                tasks=int(job.get("tasks", 1)),
                per_task=dict(job.get("per_task", {})),
                outcome=outcome,
                reason=reason,
                shadow=None
                if shadow is None
                else ("started" if job_id in shadow else "not started"),
            )
        )
    return rows


# ---------------------------------------------------------------- charts from the decision log


@dataclass(frozen=True, slots=True)
class LogPoint:
    """One decision of the log as the charts plot it."""

    at: float
    queue: int
    utilisation: float  # percent of the size resource allocated on up nodes, before the round
    learned: bool  # made by a learned (ONNX) policy, not by a fallback


def log_points(decisions: Sequence[DecisionDetail], resource: str) -> list[LogPoint]:
    """Oldest first."""
    points: list[LogPoint] = []
    for d in sorted(decisions, key=lambda d: d.created_at):
        capacity = allocated = 0.0
        for node in d.input.get("nodes", []):
            if isinstance(node, Mapping) and node.get("state", "up") == "up":
                capacity += float(dict(node.get("capacity", {})).get(resource, 0.0))
                allocated += float(dict(node.get("allocated", {})).get(resource, 0.0))
        util = 100.0 * allocated / capacity if capacity > 0 else 0.0
        learned = d.policy.kind == "onnx" and not d.fallback.used
        points.append(LogPoint(d.created_at, d.queue_length, util, learned))
    return points


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(round(ts), tz=dt.UTC).strftime("%H:%M:%S")


def svg_chart(title: str, times: Sequence[float], values: Sequence[float], y_max: float,
              unit: str = "") -> str:  # fmt: skip
    """A small line chart as inline SVG; every text in it is built from numbers and ``title``
    (a fixed label), so nothing needs escaping."""
    width, height, left, right, top, bottom = 360, 130, 44, 10, 22, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    y_top = y_max if y_max > 0 else 1.0
    t0, t1 = (times[0], times[-1]) if times else (0.0, 1.0)
    span = t1 - t0 if t1 > t0 else 1.0

    def x(t: float) -> float:
        return left + plot_w * ((t - t0) / span if len(times) > 1 else 0.5)

    def y(v: float) -> float:
        return top + plot_h * (1 - min(max(v / y_top, 0.0), 1.0))

    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(times, values, strict=True))
    dots = "".join(
        f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2"/>'
        for t, v in zip(times, values, strict=True)
    )
    last = f"{values[-1]:.0f}{unit}" if values else "no decisions"
    labels = (
        f'<text x="{left}" y="14" class="t">{title}: {last}</text>'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{y_top:.0f}{unit}</text>'
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>'
    )
    if times:
        labels += (
            f'<text x="{left}" y="{height - 6}">{_clock(t0)}</text>'
            f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end">{_clock(t1)} UTC</text>'
        )
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{title}">'
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>'
        f'<polyline points="{path}" class="line"/><g class="dots">{dots}</g>{labels}</svg>'
    )


def log_charts(points: Sequence[LogPoint], window: int = 10) -> list[str]:
    """Queue length, utilisation and the share of the last ``window`` decisions made by the
    learned policy, each over the decisions' times."""
    times = [p.at for p in points]
    queue = [float(p.queue) for p in points]
    share = [
        100.0
        * sum(q.learned for q in points[max(0, i - window + 1) : i + 1])
        / len(points[max(0, i - window + 1) : i + 1])
        for i in range(len(points))
    ]
    return [
        svg_chart("queue length", times, queue, max(queue, default=0.0)),
        svg_chart("utilisation", times, [p.utilisation for p in points], 100.0, "%"),
        svg_chart(f"learned policy (last {window})", times, share, 100.0, "%"),
    ]
