"""Training sequences never overlap the evaluation windows of the paper's protocol."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from training.ppo import complement, evaluation_windows, merge_ranges, training_starts

PUBLISHED_STARTS = [1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085]


def test_protocol_windows_are_the_published_starts() -> None:
    assert evaluation_windows(10_000, seed=1, sequences=10, length=1024) == PUBLISHED_STARTS


def test_training_starts_avoid_every_evaluation_window() -> None:
    windows = merge_ranges([(s, s + 1024) for s in PUBLISHED_STARTS])
    assert windows == [(1981, 6252), (7085, 8786), (8850, 9874)]
    starts = training_starts(10_000, 256, windows)
    assert len(starts) == 2_304
    covered = np.zeros(10_000, dtype=bool)
    for s in starts:
        covered[s : s + 256] = True
    for a, b in windows:
        assert not covered[a:b].any()
    # every job outside the windows that can host a whole episode is used
    assert complement(windows, 10_000) == [(0, 1981), (6252, 7085), (8786, 8850), (9874, 10_000)]
    assert covered[:1981].all()
    assert covered[6252:7085].all()


def test_train_fraction_limits_the_starts() -> None:
    starts = training_starts(1_000, 100, [], train_fraction=0.7)
    assert starts.min() == 0
    assert starts.max() == 600  # [600, 700) is the last episode inside the first 70 %
