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
    behaviour_cloning,
    compat_rollout,
    greedy_order,
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


#: passes of the linear stage over the few recorded decisions of the two small workloads
EPOCHS = 300


def test_linear_term_alone_learns_a_linear_key(data: Data) -> None:
    """With ``skip``, cloning the linear term alone (the ``skip_epochs`` stage) reproduces the
    walk of a teacher whose key is linear in the features (2D-LAS: queue, running, arrival) on
    nearly every recorded decision, where the untrained scorer (the canonical pre-order) does
    not."""
    import torch

    teacher = "tiresias-2dlas"
    torch.manual_seed(0)
    apps = load_applications()
    args = Args(semantics="pollux-compat", skip=True, las_threshold_gpu_s=57600.0)
    constants = EncodingConstants(las_threshold_gpu_s=57600.0)

    def choose(
        obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], info: dict[str, Any]
    ) -> tuple[list[int], float]:
        del obs
        return teacher_order(info, mask, teacher, CONFIG_COMPAT), 0.0

    steps = [
        s for rows in data.train for s in run_compat_episode(rows, apps, args, constants, choose)[0]
    ]
    agent = Agent(skip=True)

    def agreement() -> float:
        same = 0
        for s in steps:
            with torch.no_grad():
                logits = agent.logits(torch.from_numpy(s.obs)[None], torch.from_numpy(s.mask)[None])
            same += greedy_order(logits[0].numpy(), s.mask, s.sizes, s.capacity) == s.seq
        return same / len(steps)

    before = agreement()
    assert agent.skip is not None
    opt = torch.optim.Adam(agent.skip.parameters(), lr=args.skip_learning_rate)
    behaviour_cloning(agent, opt, list(steps), args, epochs=EPOCHS)
    after = agreement()
    assert after >= 0.9, (before, after)
    assert after > before


def test_init_key_starts_at_the_heuristic_and_linear_only_moves_the_linear_term(
    data: Data,
) -> None:
    """``--init-key tiresias-2dlas`` (any scale): the greedy policy at update 0 is 2D-LAS under
    pollux-compat, workload for workload; a ``--linear-only`` PPO update moves the linear term
    and the critic and leaves the MLP as it started."""
    import torch

    from training.gpu_ppo import gae_all, make_agent, ppo_update, validate_compat

    args = Args(
        semantics="pollux-compat",
        las_threshold_gpu_s=57600.0,
        init_key="tiresias-2dlas",
        init_scale=8.0,
        linear_only=True,
        episodes_per_update=1,
        learning_rate=0.05,
    )
    apps = load_applications()
    constants = EncodingConstants(las_threshold_gpu_s=57600.0)
    torch.manual_seed(0)
    agent, trained = make_agent(args)
    heur = [
        float(np.mean(simulate(w, "tiresias-2dlas", Semantics.POLLUX_COMPAT, apps=apps).jcts))
        for w in data.train
    ]
    probe = Data(data.train, data.train, [], [], 0, 0)
    assert validate_compat(agent, args, probe, constants, apps) == pytest.approx(heur, abs=0.0)
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    rng = np.random.default_rng(0)
    episodes, _ = compat_rollout(agent, data, apps, args, constants, rng)
    flat, adv, ret = gae_all(episodes, [0.0] * len(episodes), args)
    opt = torch.optim.Adam(trained, lr=args.learning_rate)
    ppo_update(agent, opt, flat, adv, ret, args, rng)
    after = agent.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith("actor."))
    assert not torch.equal(after["skip.weight"], before["skip.weight"])
    assert not all(torch.equal(after[k], before[k]) for k in before if k.startswith("critic."))
    with pytest.raises(ValueError, match="linear term"):
        make_agent(Args(linear_only=True))


def _steps(times: list[float], rewards: list[float]) -> list[Any]:
    from training.gpu_ppo import Step

    z = np.zeros(1, dtype=np.float32)
    out = []
    for t, r in zip(times, rewards, strict=True):
        s = Step(z[None], np.ones(1, dtype=np.bool_), np.ones(1, dtype=np.int64), 1, [0], 0.0, 0.0)
        s.now, s.reward = t, r
        out.append(s)
    return out


def test_group_advantages_score_a_decision_against_the_groups_other_episodes() -> None:
    """Leave-one-out, time-aligned: two episodes of one workload that differ only after t=120
    get advantages of opposite sign there and none before; a third episode of another
    workload is not compared with them."""
    from training.gpu_ppo import group_advantages, returns_to_go

    h = 1e12  # no discount: returns are plain sums
    good = _steps([0, 60, 120], [-1.0, -1.0, -1.0])
    bad = _steps([0, 60, 120], [-1.0, -1.0, -3.0])
    other = _steps([0, 60], [-5.0, -5.0])
    assert returns_to_go(good, h).tolist() == pytest.approx([-3.0, -2.0, -1.0])
    decayed = returns_to_go(_steps([0, 3600], [-1.0, -1.0]), 3600.0)
    assert decayed.tolist() == pytest.approx([-1.0 - np.exp(-1.0), -1.0])
    flat, adv, _ = group_advantages([good, bad, other], 2, h)
    assert flat[:3] == good
    assert adv[:3].tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert adv[3:6].tolist() == pytest.approx([-2.0, -2.0, -2.0])
    assert adv[6:].tolist() == pytest.approx([-10.0, -5.0])  # a group of one: no baseline
    # a decision at a time the other episode has no decision: its return from the next one,
    # discounted to that time
    late = _steps([30], [-4.0])
    _, adv2, _ = group_advantages([late, good], 2, 60.0)
    assert adv2[0] == pytest.approx(-4.0 - np.exp(-0.5) * returns_to_go(good, 60.0)[1])


def test_select_rigid_adds_the_philly_rigid_ratio_to_the_bar(data: Data) -> None:
    """``--select-rigid``: a checkpoint's metric is its ``pollux-compat`` ratio to Tiresias
    plus its ``philly-rigid`` ratio to tiresias-2dlas on the same validation workloads; the bar
    is that heuristic's ``philly-rigid`` run and the policy's rigid JCTs are its greedy
    ``philly-rigid`` run."""
    from training.gpu_ppo import (
        checkpoint_validation,
        make_agent,
        mean_ratio,
        rigid_bar_validation,
        validate,
    )

    args = Args(
        semantics="pollux-compat",
        las_threshold_gpu_s=57600.0,
        init_key="tiresias-2dlas",
        init_scale=8.0,
        select_rigid=True,
    )
    apps = load_applications()
    constants = EncodingConstants(las_threshold_gpu_s=57600.0)
    agent, _ = make_agent(args)
    probe = Data(data.train, data.train, [], [], 0, 0)
    bar = rigid_bar_validation(args, probe)
    assert bar == [
        float(np.mean(simulate(w, "tiresias-2dlas", Semantics.PHILLY_RIGID).jcts))
        for w in data.train
    ]
    heur = {
        "tiresias": [
            float(np.mean(simulate(w, "tiresias", Semantics.POLLUX_COMPAT, apps=apps).jcts))
            for w in data.train
        ]
    }
    metric, val, rigid = checkpoint_validation(agent, args, probe, constants, apps, heur, bar)
    assert rigid == validate(agent, args, probe, constants, Semantics.PHILLY_RIGID)
    assert rigid != val  # two semantics, two runs
    assert metric == pytest.approx(selection_metric(val, heur) + mean_ratio(rigid, bar))
    own, _, _ = checkpoint_validation(agent, args, probe, constants, apps, heur, rigid)
    assert own == pytest.approx(selection_metric(val, heur) + 1.0)
    plain = Args(semantics="pollux-compat", las_threshold_gpu_s=57600.0)
    assert checkpoint_validation(agent, plain, probe, constants, apps, heur, [])[0] == (
        pytest.approx(selection_metric(val, heur))
    )
    with pytest.raises(ValueError, match="select-rigid"):
        checkpoint_validation(agent, Args(select_rigid=True), probe, constants, None, heur, bar)


def test_train_pool_fixes_the_training_workloads_across_seeds(data: Data) -> None:
    """``--train-pool P``: the training workloads are generated from seeds ``P x 100,000 + i``
    whatever the run's seed; by default the pool is the seed (the module's data: seed 1)."""
    assert data.train_seeds == [100_000, 100_001]
    pooled = load_data(
        Args(
            semantics="pollux-compat",
            seed=2,
            train_pool=1,
            train_workloads=2,
            val_workloads=1,
            jobs_per_workload=40,
        )
    )
    assert pooled.train_seeds == data.train_seeds
    assert pooled.train == data.train
    assert pooled.val == data.val
    own = load_data(
        Args(
            semantics="pollux-compat",
            seed=2,
            train_workloads=1,
            val_workloads=1,
            jobs_per_workload=40,
        )
    )
    assert own.train_seeds == [200_000]
    assert own.train[0] != data.train[0]


def test_select_rigid_outside_pollux_compat_is_refused_with_the_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command line refuses the combination before any data is read."""
    from training.gpu_ppo import main

    with pytest.raises(SystemExit) as exit_:
        main(["--select-rigid", "--philly", "/nonexistent/philly.csv"])
    assert exit_.value.code != 0
    assert "--select-rigid is for --semantics pollux-compat" in capsys.readouterr().err
    with pytest.raises(ValueError, match="select-rigid"):
        Args(select_rigid=True)
