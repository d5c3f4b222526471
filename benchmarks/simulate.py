"""Simulator speed: simulated jobs/s and environment steps/s.

Usage: ``python -m benchmarks.simulate [--kth PATH] [--repeat N] [--quick]``

* rlscheduler semantics (``app.domains.hpc.rlscheduler``) on Lublin-1 (the 10 x 1024-job
  sequences of the published tables) and on the whole KTH-SP2 trace (one sequence of every
  usable job), against
  (a) ``sim.rlscheduler_reference``, a straightforward list-sorting implementation of the same
  semantics measured in this run, and (b) RLScheduler's published speeds on this kind of machine
  (SJF 85k jobs/s without / 47k with backfilling, F1 16k / 29k; environment 4.1k steps/s);
* kairos semantics on Lublin-1 10 x 1024 through the core: the engine (the EASY rules of
  ``app.domains.hpc.easy`` on the pooled count model, what ``simulate_kairos(pooled=True)`` and
  ``kairos evaluate`` run for heuristics and ranking policies), beside the snapshot path
  (``decide()`` at every decision point), the in-run reference and RLScheduler's published
  rates; target 50k jobs/s for F1 and SJF with EASY;
* ``app.domains.hpc.env.SchedulingEnv`` and ``VectorSchedulingEnv`` steps/s (the engine's
  stepping API on the pooled count model and the encoder's one feature formula; target 41k
  steps/s at 64 envs).

Rates use process CPU time (the development machines are shared); wall time is printed too.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.domains.hpc.decision import DecisionConfig
from app.domains.hpc.env import SchedulingEnv, VectorSchedulingEnv
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.policy import OrderingPolicy
from app.domains.hpc.rlscheduler import sample_starts, simulate_sequence
from app.domains.hpc.simulate import KairosSimulator, simulate_kairos, workload_from_trace
from app.domains.hpc.swf import SwfTrace, load_swf
from app.domains.hpc.types import Backfill
from sim.rlscheduler_reference import reference_simulate

ROOT = Path(__file__).resolve().parents[1]
LUBLIN1 = ROOT / "data" / "lublin_256.swf.gz"
KTH_DEFAULT = ROOT / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"

#: RLScheduler's own simulator on this kind of machine (issue 4): jobs/s, steps/s
PUBLISHED = {("sjf", False): 85_000.0, ("sjf", True): 47_000.0, ("f1", False): 16_000.0,
             ("f1", True): 29_000.0}  # fmt: skip
PUBLISHED_ENV_STEPS = 4_100.0
TARGET_FACTOR = 10.0


@dataclass(frozen=True, slots=True)
class Timing:
    cpu_s: float
    wall_s: float


def _time(fn: Callable[[], object], repeat: int) -> Timing:
    best_cpu, best_wall = float("inf"), float("inf")
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return Timing(max(best_cpu, 1e-9), max(best_wall, 1e-9))


def _rls_runs(
    trace: SwfTrace, starts: list[int], length: int, policy: str, backfill: bool
) -> Callable[[], object]:
    return lambda: [simulate_sequence(trace, s, length, policy, backfill=backfill) for s in starts]


def _ref_runs(
    trace: SwfTrace, starts: list[int], length: int, policy: str, backfill: bool
) -> Callable[[], object]:
    return lambda: [reference_simulate(trace, s, length, policy, backfill=backfill) for s in starts]


def _fmt_rate(x: float) -> str:
    return f"{x / 1000:,.1f}k"


def bench_rlscheduler(
    name: str, trace: SwfTrace, starts: list[int], length: int, repeat: int, with_reference: bool
) -> None:
    jobs = len(starts) * length
    print(f"\n{name}: {len(starts)} x {length} jobs, rlscheduler semantics (rates per CPU second)")
    print(
        f"{'policy':<10}{'backfill':<10}{'jobs/s':>10}{'wall jobs/s':>13}"
        f"{'reference':>11}{'x ref':>8}{'x RLSched':>11}{'target':>9}"
    )
    for policy, backfill in [("sjf", True), ("sjf", False), ("f1", True), ("f1", False),
                             ("fcfs", False)]:  # fmt: skip
        t = _time(_rls_runs(trace, starts, length, policy, backfill), repeat)
        rate = jobs / t.cpu_s
        ref = "-"
        x_ref = "-"
        if with_reference:
            tr = _time(_ref_runs(trace, starts, length, policy, backfill), 1)
            ref = _fmt_rate(jobs / tr.cpu_s)
            x_ref = f"{tr.cpu_s / t.cpu_s:.1f}"
        published = PUBLISHED.get((policy, backfill))
        x_pub = f"{rate / published:.1f}" if published else "-"
        target = "-"
        if published:
            target = "met" if rate >= TARGET_FACTOR * published else "MISSED"
        print(
            f"{policy:<10}{'easy' if backfill else 'none':<10}{_fmt_rate(rate):>10}"
            f"{_fmt_rate(jobs / t.wall_s):>13}{ref:>11}{x_ref:>8}{x_pub:>11}{target:>9}"
        )


#: the kairos-semantics engine's target on Lublin-1 10 x 1024 (issue 19: the removed twin's rate)
KAIROS_TARGET = 50_000.0


def bench_kairos(trace: SwfTrace, starts: list[int], length: int, repeat: int) -> None:
    """Kairos semantics through the core: the engine (``simulate_kairos(pooled=True)``: the
    EASY rules of ``app.domains.hpc.easy`` on the pooled count model) on every sequence, the
    snapshot path (``decide()`` at every decision point) on the first, RLScheduler's simulator
    of this run (``sim.rlscheduler_reference``) and its published rates."""
    jobs = len(starts) * length
    print(
        f"\nkairos semantics, Lublin-1 {len(starts)} x {length} jobs through the core "
        "(rates per CPU second): engine = simulate_kairos(pooled=True); decide() = a snapshot "
        "and decide() at every decision point (first sequence); reference = "
        "sim.rlscheduler_reference in this run"
    )
    print(
        f"{'policy':<8}{'backfill':<10}{'engine':>10}{'wall':>10}{'decide()':>10}{'x':>6}"
        f"{'reference':>11}{'x ref':>7}{'x RLSched':>11}{'target':>9}"
    )
    cases = [
        ("f1", Backfill.EASY),
        ("sjf", Backfill.EASY),
        ("f1", Backfill.NONE),
        ("fcfs", Backfill.NONE),
    ]
    for policy, backfill in cases:
        config = DecisionConfig(backfill=backfill)
        heuristic = get_heuristic(policy)

        def engine(h: OrderingPolicy = heuristic, c: DecisionConfig = config) -> None:
            for s in starts:
                simulate_kairos(trace, s, length, h, config=c, pooled=True)

        def snapshot(h: OrderingPolicy = heuristic, b: Backfill = backfill) -> None:
            sim = KairosSimulator(
                workload_from_trace(trace, starts[0], length),
                config=DecisionConfig(backfill=b),
                pooled=True,
            )
            sim.run(h)

        t_engine = _time(engine, repeat)
        t_snapshot = _time(snapshot, 1)
        rate = jobs / t_engine.cpu_s
        snapshot_rate = length / t_snapshot.cpu_s
        easy = backfill is Backfill.EASY
        t_ref = _time(_ref_runs(trace, starts, length, policy, easy), 1)
        ref_rate = jobs / t_ref.cpu_s
        published = PUBLISHED.get((policy, easy))
        x_pub = f"{rate / published:.1f}" if published else "-"
        target = "met" if rate >= KAIROS_TARGET else "MISSED"
        print(
            f"{policy:<8}{backfill.value:<10}{_fmt_rate(rate):>10}"
            f"{_fmt_rate(jobs / t_engine.wall_s):>10}{_fmt_rate(snapshot_rate):>10}"
            f"{rate / snapshot_rate:>6.0f}{_fmt_rate(ref_rate):>11}{rate / ref_rate:>7.1f}"
            f"{x_pub:>11}{target if easy else '-':>9}"
        )


def bench_env(trace: SwfTrace, steps: int) -> None:
    env = SchedulingEnv(trace, sequence_length=256, backfill=Backfill.EASY)
    obs, info = env.reset(seed=0)
    done_steps = 0
    c0, w0 = time.process_time(), time.perf_counter()
    while done_steps < steps:
        action = int(np.flatnonzero(info["action_mask"])[0])
        obs, _, terminated, truncated, info = env.step(action)
        done_steps += 1
        if terminated or truncated:
            obs, info = env.reset()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rate = steps / cpu
    print(
        f"\nSchedulingEnv (kairos semantics, EASY, obs {obs['obs'].shape}): {rate:,.0f} steps/s "
        f"CPU ({steps / wall:,.0f} wall); x{rate / PUBLISHED_ENV_STEPS:.2f} RLScheduler's "
        f"{PUBLISHED_ENV_STEPS:,.0f}; target {TARGET_FACTOR * PUBLISHED_ENV_STEPS:,.0f}: "
        f"{'met' if rate >= TARGET_FACTOR * PUBLISHED_ENV_STEPS else 'MISSED'}"
    )


def bench_vector_env(trace: SwfTrace, steps: int, sizes: tuple[int, ...] = (1, 16, 64)) -> None:
    print("\nVectorSchedulingEnv (the engine's EpisodeBatch: PooledMachine + the one encoder)")
    target = TARGET_FACTOR * PUBLISHED_ENV_STEPS
    for num_envs in sizes:
        env = VectorSchedulingEnv(trace, num_envs, sequence_length=256, backfill=Backfill.EASY)
        _, info = env.reset(seed=0)
        done_steps = 0
        c0, w0 = time.process_time(), time.perf_counter()
        while done_steps < steps:
            actions = info["action_mask"].argmax(axis=1)  # first allowed row
            _, _, _, _, info = env.step(actions)
            done_steps += num_envs
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        rate = done_steps / cpu
        print(
            f"  {num_envs:>3} envs: {rate:>9,.0f} steps/s CPU ({done_steps / wall:,.0f} wall); "
            f"x{rate / PUBLISHED_ENV_STEPS:.1f} RLScheduler's; target {target:,.0f}: "
            f"{'met' if rate >= target else 'MISSED'}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.simulate")
    parser.add_argument("--kth", type=Path, default=KTH_DEFAULT, help="KTH-SP2 SWF trace")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the fast simulator")
    parser.add_argument("--quick", action="store_true", help="skip the slow reference on KTH")
    args = parser.parse_args(argv)

    lublin = load_swf(LUBLIN1)
    starts = sample_starts(lublin.n_jobs, 1024, 10, seed=1)
    bench_rlscheduler("Lublin-1", lublin, starts, 1024, args.repeat, with_reference=True)
    if args.kth.is_file():
        kth = load_swf(args.kth)
        bench_rlscheduler(
            f"KTH-SP2 whole trace ({kth.n_jobs} usable jobs)",
            kth,
            [0],
            kth.n_jobs,
            args.repeat,
            with_reference=not args.quick,
        )
    else:
        print(f"\nKTH-SP2 skipped: {args.kth} not found (pass --kth PATH)")
    bench_kairos(lublin, starts, 1024, args.repeat)
    bench_env(lublin, 2000)
    bench_vector_env(lublin, 12_000)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
