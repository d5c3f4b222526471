"""Paths as model cards record them: relative to the repository root when they lie inside it,
so a card names no machine's checkout."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def repo_relative(path: Path) -> str:
    """``path`` relative to the repository root when it lies inside it, else as given."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
