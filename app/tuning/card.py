"""The card of a tune whose winner is a heuristic: ``card.json`` alone, no ``policy.onnx``.

::

    {"name": "...", "version": "...", "domain": "hpc", "kind": "heuristic",
     "recommendation": "<a heuristic of app.domains.hpc.heuristics>", "tuning": {...}}

Such a directory is served as the heuristic it recommends: the model registry loads it as an
entry that decides with that heuristic, and ``kairos evaluate --policies DIR`` runs it. This
module only reads the card (no simulator), so serving code may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.domains.hpc.heuristics import HEURISTIC_CLASSES

HEURISTIC_KIND = "heuristic"
RECOMMENDATION_KEY = "recommendation"


class HeuristicCardError(ValueError):
    """A ``"kind": "heuristic"`` card that names no known heuristic or lacks a field."""


def is_heuristic_card(card: Mapping[str, Any]) -> bool:
    return card.get("kind") == HEURISTIC_KIND


def recommended_heuristic(card: Mapping[str, Any]) -> str:
    """The heuristic a heuristic card recommends; :class:`HeuristicCardError` says what is
    wrong with the card otherwise."""
    if not is_heuristic_card(card):
        raise HeuristicCardError(f"card kind is {card.get('kind')!r}, not {HEURISTIC_KIND!r}")
    if not isinstance(card.get("name"), str) or not isinstance(card.get("version"), str):
        raise HeuristicCardError("a heuristic card needs string name and version")
    if card.get("domain") != "hpc":
        raise HeuristicCardError(
            f"a heuristic card's domain must be 'hpc', not {card.get('domain')!r}"
        )
    name = card.get(RECOMMENDATION_KEY)
    if not isinstance(name, str) or name.lower() not in HEURISTIC_CLASSES:
        raise HeuristicCardError(
            f"{RECOMMENDATION_KEY} {name!r} is not a heuristic ({', '.join(HEURISTIC_CLASSES)})"
        )
    return name.lower()
