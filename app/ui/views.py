"""Pure helpers turning API schemas into what the templates show (no I/O, unit-testable)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.schemas.decision import DecisionRead

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
    if ts is None:
        return "—"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_amount(value: float) -> str:
    return f"{value:g}" if value == int(value) or abs(value) >= 100 else f"{value:.2f}"


def format_resources(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {format_amount(v)}" for k, v in resources.items()) or "—"
