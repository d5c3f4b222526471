"""Evaluate an exported policy against the heuristics on the paper's protocol, in the training env.

Protocol (RLScheduler's, A.9 of the HPC reproduction spec): for each trace, the 10 sequences of
1024 jobs whose starts come from gym's legacy seeding with seed 1; each sequence starts on an empty
cluster; the table entry is the mean over the sequences of the per-sequence average bounded
slowdown. The learned policy is the exported ONNX file run by onnxruntime (the artifact the service
loads), decoded greedily (arg-max over the unmasked rows), so results are deterministic.

Semantics are Kairos's.  By default the sequences run in the training env
(``training/hpc_env.py`` over the engine env ``app/domains/hpc/env.py``); ``--service``
runs them through ``app.domains.hpc.simulate`` (the service's ``decide()``) with the service's
validating ``OnnxPolicy`` loader instead: the same numbers (tested), slower.

    python -m training.evaluate --model models/hpc-kernel/1 \\
        --trace data/lublin_256.swf.gz data/lublin_256_new2.swf.gz --json eval.json
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import tyro

from training.hpc_env import HEURISTIC_NAMES, HpcEpisode, JobTable
from training.ppo import evaluation_windows

Picker = Callable[[list[HpcEpisode]], list[int]]


def heuristic_picker(name: str) -> Picker:
    def pick(episodes: list[HpcEpisode]) -> list[int]:
        return [ep.teacher_pos(name) for ep in episodes]

    return pick


def onnx_picker(model_path: Path, max_candidates: int = 128) -> Picker:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])

    def pick(episodes: list[HpcEpisode]) -> list[int]:
        obs = [ep.observe(pad_to=max_candidates) for ep in episodes]
        width = max(int((o.index >= 0).sum()) for o in obs)
        (logits,) = session.run(
            ["logits"],
            {
                "obs": np.stack([o.obs[:width] for o in obs]),
                "action_mask": np.stack([o.mask[:width] for o in obs]),
            },
        )
        rows = np.where(np.stack([o.mask[:width] for o in obs]), logits, -np.inf).argmax(1)
        return [int(o.index[r]) for o, r in zip(obs, rows, strict=True)]

    return pick


def run_protocol(
    table: JobTable, starts: Sequence[int], length: int, pick: Picker, *, backfill: bool
) -> list[float]:
    """Per-sequence average bsld; all sequences advance in lock-step (one batched pick)."""
    episodes = []
    for s in starts:
        ep = HpcEpisode(table, backfill=backfill)
        ep.reset(int(s), length)
        episodes.append(ep)
    while live := [ep for ep in episodes if not ep.done]:
        for ep, pos in zip(live, pick(live), strict=True):
            ep.step_queue(pos)
    return [ep.avg_bsld() for ep in episodes]


def run_protocol_service(
    trace_path: str, starts: Sequence[int], length: int, policy: Any, *, backfill: bool
) -> list[float]:
    """Per-sequence average bsld through ``app.domains.hpc.simulate`` (the service's
    ``decide()``)."""
    from app.domains.hpc.decision import DecisionConfig
    from app.domains.hpc.metrics import avg_bounded_slowdown
    from app.domains.hpc.simulate import simulate_kairos
    from app.domains.hpc.swf import load_swf
    from app.domains.hpc.types import Backfill

    trace = load_swf(trace_path)
    config = DecisionConfig(backfill=Backfill.EASY if backfill else Backfill.NONE)
    return [
        avg_bounded_slowdown(
            simulate_kairos(trace, int(s), length, policy, config=config, pooled=True)
        )
        for s in starts
    ]


def service_policy(name: str, model_dir: Path | None = None) -> Any:
    """A heuristic of ``app.domains.hpc.heuristics`` or, with ``model_dir``, the service's
    ``OnnxPolicy`` loaded (and validated) from it."""
    if model_dir is not None:
        from app.policy.onnx_policy import OnnxPolicy

        return OnnxPolicy.load(model_dir)
    from app.domains.hpc.heuristics import get_heuristic

    return get_heuristic(name)


def evaluate(
    traces: Sequence[str],
    pickers: dict[str, Picker],
    *,
    seed: int = 1,
    sequences: int = 10,
    length: int = 1024,
    backfills: Sequence[bool] = (False, True),
    service_policies: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rows per (trace, backfill, policy).  ``pickers`` run in the training env;
    ``service_policies`` (name -> heuristic or OnnxPolicy) instead run
    through ``app.domains.hpc.simulate``, the
    service's code."""
    rows: list[dict[str, Any]] = []
    engines: dict[str, tuple[str, Any]] = {n: ("twin", p) for n, p in pickers.items()}
    engines.update({n: ("service", p) for n, p in (service_policies or {}).items()})
    for path in traces:
        table = JobTable.from_swf(path)
        starts = evaluation_windows(table.n_jobs, seed, sequences, length)
        for backfill in backfills:
            for name, (engine, pick) in engines.items():
                t0 = time.perf_counter()
                if engine == "twin":
                    values = run_protocol(table, starts, length, pick, backfill=backfill)
                else:
                    values = run_protocol_service(path, starts, length, pick, backfill=backfill)
                rows.append(
                    {
                        "trace": Path(path).name,
                        "policy": name,
                        "backfill": "easy" if backfill else "none",
                        "semantics": "kairos",
                        "engine": "training/hpc_env.py"
                        if engine == "twin"
                        else "app.domains.hpc.simulate (app.domains.hpc.decision.decide)",
                        "sequences": sequences,
                        "length": length,
                        "seed": seed,
                        "starts": [int(s) for s in starts],
                        "bsld": float(np.mean(values)),
                        "per_sequence_bsld": [round(v, 4) for v in values],
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    lines = [
        "| trace | backfill | " + " | ".join(policies) + " |",
        "|---|---|" + "---|" * len(policies),
    ]
    cells: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        cells.setdefault((r["trace"], r["backfill"]), {})[r["policy"]] = r["bsld"]
    for (trace, backfill), values in cells.items():
        best = min(values.values())
        shown = [
            f"**{values[p]:.2f}**" if values[p] == best else f"{values[p]:.2f}" for p in policies
        ]
        lines.append(f"| {trace} | {backfill} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


@dataclass
class EvalArgs:
    model: str | None = None
    """policy folder (``policy.onnx``) to evaluate beside the heuristics"""
    trace: tuple[str, ...] = ("data/lublin_256.swf.gz", "data/lublin_256_new2.swf.gz")
    """traces to evaluate on"""
    heuristics: tuple[str, ...] = HEURISTIC_NAMES
    """heuristics to compare with"""
    seed: int = 1
    """protocol seed (the paper's: 1)"""
    sequences: int = 10
    """sequences per trace"""
    length: int = 1024
    """jobs per sequence"""
    json: str | None = None
    """write the rows here"""
    service: bool = False
    """run through ``app.domains.hpc.simulate`` and the service's ``OnnxPolicy`` (slower) instead
    of the training env"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(EvalArgs, args=list(sys.argv[1:] if argv is None else argv))
    pickers: dict[str, Picker] = {}
    services: dict[str, Any] = {}
    model_name = None if args.model is None else Path(args.model).parent.name
    if args.service:
        services = {name: service_policy(name) for name in args.heuristics}
        if args.model is not None:
            services[str(model_name)] = service_policy(str(model_name), Path(args.model))
    else:
        pickers = {name: heuristic_picker(name) for name in args.heuristics}
        if args.model is not None:
            pickers[str(model_name)] = onnx_picker(Path(args.model) / "policy.onnx")
    rows = evaluate(
        args.trace,
        pickers,
        seed=args.seed,
        sequences=args.sequences,
        length=args.length,
        service_policies=services,
    )
    print(markdown(rows))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
