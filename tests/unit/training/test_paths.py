"""Model cards record repository-relative paths."""

from __future__ import annotations

from pathlib import Path

from training.paths import ROOT, repo_relative


def test_a_path_inside_the_repository_is_recorded_relative_to_its_root() -> None:
    assert repo_relative(ROOT / "models" / "dag-v1" / "1") == "models/dag-v1/1"
    assert repo_relative(ROOT / "data" / ".." / "models") == "models"


def test_a_path_outside_the_repository_is_kept_as_given(tmp_path: Path) -> None:
    assert repo_relative(tmp_path / "run") == str(tmp_path / "run")
