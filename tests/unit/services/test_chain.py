"""The HPC service's last guard (:mod:`app.services.chain`): the fallback's decision, or the
empty one when it breaks an invariant."""

from __future__ import annotations

import pytest

from app.services.chain import run_fallback


def _safe(decision: str) -> list[str]:
    return [] if decision.startswith("ok") else [f"{decision} breaks an invariant"]


@pytest.mark.parametrize(("answer", "expected"), [("ok-f", "ok-f"), ("bad", "empty")])
async def test_the_fallback_is_checked_and_degrades_to_the_empty_decision(
    answer: str, expected: str
) -> None:
    out = await run_fallback(lambda: answer, check=_safe, empty=lambda: "empty", label="f")
    assert out == expected
