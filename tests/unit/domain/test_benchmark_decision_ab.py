"""``python -m benchmarks.decision_ab``: the core at a git revision against the working tree."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import decision_ab


def test_a_revision_is_timed_against_the_working_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert decision_ab.main(["HEAD", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "HEAD" in out
    assert "working tree" in out
    assert out.rstrip().endswith(" x")


def test_the_revision_is_a_module_of_its_own() -> None:
    old = decision_ab.module_at("HEAD")
    assert old.DecisionRun is not decision_ab.current.DecisionRun
    with pytest.raises(subprocess.CalledProcessError, match="no-such-revision"):
        decision_ab.module_at("no-such-revision")
