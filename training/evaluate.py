"""Evaluate an exported policy against the heuristics on the paper's protocol, in the training twin.

Protocol (hpc-reproduction.md A.9): for each trace, the 10 sequences of 1024 jobs whose starts
come from gym's legacy seeding with seed 1; each sequence starts on an empty cluster; the table
entry is the mean over the sequences of the per-sequence average bounded slowdown.  The learned
policy is the exported ONNX file run by onnxruntime (the artifact the service loads), decoded
greedily (arg-max over the unmasked rows), so results are deterministic.

Semantics are Kairos's (``training/hpc_env.py``, tested step by step against the service's
``DecisionRun``); ``kairos evaluate`` (``sim/``) gives the same numbers through the service's own
decision code, only slower.

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


def evaluate(
    traces: Sequence[str],
    pickers: dict[str, Picker],
    *,
    seed: int = 1,
    sequences: int = 10,
    length: int = 1024,
    backfills: Sequence[bool] = (False, True),
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in traces:
        table = JobTable.from_swf(path)
        starts = evaluation_windows(table.n_jobs, seed, sequences, length)
        for backfill in backfills:
            for name, pick in pickers.items():
                t0 = time.perf_counter()
                values = run_protocol(table, starts, length, pick, backfill=backfill)
                rows.append(
                    {
                        "trace": Path(path).name,
                        "policy": name,
                        "backfill": "easy" if backfill else "none",
                        "semantics": "kairos",
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


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(EvalArgs, args=list(sys.argv[1:] if argv is None else argv))
    pickers = {name: heuristic_picker(name) for name in args.heuristics}
    if args.model is not None:
        pickers[Path(args.model).parent.name] = onnx_picker(Path(args.model) / "policy.onnx")
    rows = evaluate(
        args.trace, pickers, seed=args.seed, sequences=args.sequences, length=args.length
    )
    print(markdown(rows))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
