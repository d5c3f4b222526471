"""training/gpu_ppo.py under ``pollux-compat``: a recorded episode whose orders are a
heuristic's walk is that heuristic's ``simulate_pollux`` run (every JCT equal), its rewards add up
to the 60-s steps' job counts, and a sampled episode admits only what its sampled orders say."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

pytest.importorskip("torch")
pytest.importorskip("tyro")

from app.domains.gpu.encoding import EncodingConstants
from app.domains.gpu.simulate import Semantics, simulate
from sim.gpu_data import load_applications
from training.gpu_ppo import (
    CONFIG_COMPAT,
    Agent,
    Args,
    Data,
    compat_rollout,
    load_data,
    run_compat_episode,
    selection_metric,
    teacher_order,
)


@pytest.fixture(scope="module")
def data() -> Data:
    return load_data(
        Args(semantics="pollux-compat", train_workloads=2, val_workloads=1, jobs_per_workload=40)
    )


@pytest.mark.parametrize("teacher", ["tiresias-2dlas", "smallest-first", "las"])
def test_teacher_episode_is_the_heuristics_run(data: Data, teacher: str) -> None:
    apps = load_applications()
    args = Args(semantics="pollux-compat")

    def choose(
        obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], info: dict[str, Any]
    ) -> tuple[list[int], float]:
        del obs
        return teacher_order(info, mask, teacher, CONFIG_COMPAT), 0.0

    rows = data.train[0]
    steps, jcts = run_compat_episode(rows, apps, args, EncodingConstants(), choose)
    ref = simulate(rows, teacher, Semantics.POLLUX_COMPAT, apps=apps).jcts
    assert jcts == pytest.approx(ref, abs=0.0)
    assert steps
    assert steps[-1].done
    assert not any(s.done for s in steps[:-1])
    # every 60-s step after the first recorded decision charges its active jobs to a step
    total = -sum(s.reward for s in steps) * 3600.0 / 60.0
    assert total == pytest.approx(round(total))
    assert total > 0


def test_sampled_episodes_carry_log_probs(data: Data) -> None:
    import torch

    torch.manual_seed(0)
    args = Args(semantics="pollux-compat", episodes_per_update=1)
    episodes, finished = compat_rollout(
        Agent(), data, load_applications(), args, EncodingConstants(), np.random.default_rng(0)
    )
    (steps,) = episodes
    assert len(finished) == 1
    assert finished[0] > 0
    assert all(s.logp <= 0.0 and s.seq for s in steps)
    for s in steps:  # a sampled order never claims more GPUs than the walk may hand out
        assert sum(int(s.sizes[k]) for k in s.seq) <= s.capacity


def test_selection_is_the_mean_ratio_to_tiresias() -> None:
    heur = {"tiresias": [100.0, 200.0], "las": [1.0, 1.0]}
    assert selection_metric([50.0, 300.0], heur) == pytest.approx(1.0)
    assert selection_metric([50.0, 300.0], {"las": [1.0, 1.0]}) == pytest.approx(175.0)
