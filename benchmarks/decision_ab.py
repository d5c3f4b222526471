"""A/B of one core decision: the working tree's ``app.domains.hpc.decision`` against a git
revision's,
interleaved in one process.

Usage: ``python -m benchmarks.decision_ab [REV] [--rounds N]`` (REV defaults to ``HEAD``).

Everything but ``DecisionRun`` is shared: the 16 snapshots of ``benchmarks/decide.py``, the
encoder and the ranking ONNX policy (the shipped ``hpc-kernel``, or a test model when
``models/`` has none). Each round decides every snapshot with both modules, alternating which
goes first, so that load from other processes hits both alike; the minimum ms per decision over
the rounds is printed with the ratio (new / old). Both must give equal decisions.

On a noisy host this is the way to measure a change to the core: separate runs of
``benchmarks.decide`` or ``benchmarks.core`` can differ by more than the change.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.domains.hpc import decision as current
from app.domains.hpc.encoding import encode_batch, rank_rows
from app.domains.hpc.types import ClusterState, Decision
from app.policy.onnx_policy import OnnxPolicy, RuntimeOptions
from app.policy.registry import PolicyRegistry
from app.policy.selector import resolve
from app.schemas.decision import DecideRequest
from app.services.hpc_rounds import state_from_request
from benchmarks.decide import ROOT, model_dir, snapshot


def module_at(rev: str) -> types.ModuleType:
    """``app/domains/hpc/decision.py`` as it was at ``rev``, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{rev}:app/domains/hpc/decision.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = "benchmarks._decision_at_rev"
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:app/domains/hpc/decision.py", "exec"), module.__dict__)
    return module


def decide_ranked(module: Any, state: ClusterState, policy: OnnxPolicy) -> Decision:
    """What ``decide_many`` does for one request of a ranking policy."""
    run = module.DecisionRun(state)
    view = run.view()
    encoded = encode_batch([view], max(1, len(view.candidates)))
    logits = policy.score(encoded.obs, encoded.mask)
    rows = rank_rows(logits[0], encoded.mask[0])
    assert rows is not None
    run.run_ranked(view, [encoded.candidate(0, row) for row in rows])
    result: Decision = run.result(policy.ref)
    return result


def measure(
    old: Any, states: Sequence[ClusterState], policy: OnnxPolicy, rounds: int
) -> tuple[float, float]:
    """Minimum ms per decision of ``old`` and of the working tree's module."""
    for state in states:
        if decide_ranked(old, state, policy) != decide_ranked(current, state, policy):
            raise SystemExit("the two revisions decide differently: not a like-for-like A/B")
    best = [float("inf"), float("inf")]
    modules = (old, current)
    for i in range(rounds):
        for k in (0, 1) if i % 2 else (1, 0):
            started = time.perf_counter()
            for state in states:
                decide_ranked(modules[k], state, policy)
            per = (time.perf_counter() - started) * 1000.0 / len(states)
            best[k] = min(best[k], per)
    return best[0], best[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decision_ab")
    parser.add_argument("rev", nargs="?", default="HEAD", help="git revision (default HEAD)")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kairos-ab-") as tmp:
        models, name = model_dir(Path(tmp))
        registry = PolicyRegistry(models, RuntimeOptions())
        registry.discover()
        policy = resolve(name, registry).onnx
        if policy is None:
            raise SystemExit(f"policy {name!r} did not load from {models}")
        states = [
            state_from_request(DecideRequest.model_validate(snapshot(name, seed)))
            for seed in range(16)
        ]
        old_ms, new_ms = measure(module_at(args.rev), states, policy, args.rounds)
    print(f"one {name} decision (16 nodes x 64 jobs: init, view, encoding, inference, walk)")
    print(f"  {args.rev:<12} {old_ms:7.3f} ms  (baseline, minimum of {args.rounds} rounds)")
    print(f"  {'working tree':<12} {new_ms:7.3f} ms  {new_ms / old_ms:.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
