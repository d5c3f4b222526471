"""The fallback chain every domain's round runs (:mod:`app.services.chain`): the primary's
decision when it answers in time and safely, else ``None`` and the reason in the one vocabulary;
the fallback's decision, or the empty one when it breaks an invariant."""

from __future__ import annotations

import time

import pytest

from app.outcomes import FallbackReason
from app.services.chain import run_fallback, run_primary


def _safe(decision: str) -> list[str]:
    return [] if decision.startswith("ok") else [f"{decision} breaks an invariant"] * 7


async def test_a_safe_primary_decides() -> None:
    out = await run_primary(lambda: "ok-1", check=_safe, deadline_s=5.0, label="p")
    assert (out.decision, out.reason, out.detail) == ("ok-1", None, None)


async def test_a_primary_without_a_deadline_decides() -> None:
    out = await run_primary(lambda: "ok-2", check=_safe, deadline_s=None, label="p")
    assert out.decision == "ok-2"


async def test_a_primary_that_raises_is_classified() -> None:
    def boom() -> str:
        raise KeyError("x")

    out = await run_primary(boom, check=_safe, deadline_s=5.0, label="p")
    assert (out.decision, out.reason) == (None, FallbackReason.INFERENCE_ERROR)
    assert out.detail == "KeyError: 'x'"
    out = await run_primary(
        boom,
        check=_safe,
        deadline_s=5.0,
        classify=lambda exc: FallbackReason.INVALID_PICK,
        label="p",
    )
    assert out.reason is FallbackReason.INVALID_PICK


async def test_a_late_primary_misses_its_deadline() -> None:
    def slow() -> str:
        time.sleep(0.3)
        return "ok-late"

    out = await run_primary(slow, check=_safe, deadline_s=0.02, label="p")
    assert (out.decision, out.reason) == (None, FallbackReason.DEADLINE_EXCEEDED)
    assert out.detail == "no answer in 20 ms"


async def test_an_unsafe_primary_gives_way_quoting_its_first_problems() -> None:
    out = await run_primary(lambda: "bad", check=_safe, deadline_s=5.0, label="p")
    assert (out.decision, out.reason) == (None, FallbackReason.INVALID_DECISION)
    assert out.detail is not None
    assert out.detail.count("breaks an invariant") == 5


@pytest.mark.parametrize(("answer", "expected"), [("ok-f", "ok-f"), ("bad", "empty")])
async def test_the_fallback_is_checked_and_degrades_to_the_empty_decision(
    answer: str, expected: str
) -> None:
    out = await run_fallback(lambda: answer, check=_safe, empty=lambda: "empty", label="f")
    assert out == expected
