"""``kairos train``: train the HPC kernel policy with PPO, export it to ONNX, evaluate it.

    kairos train --trace data/lublin_256.swf.gz data/lublin_256_new2.swf.gz \\
        --out models/hpc-kernel/1 --time-budget-s 3600

Every option of ``training/ppo.py`` is accepted (``kairos train --help``); ``--out`` adds the
export of the best checkpoint (``policy.onnx`` + ``card.json``) and, unless ``--no-evaluate``,
the evaluation table of the paper's protocol (``training/evaluate.py``) in the card.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tyro

from training.evaluate import evaluate, heuristic_picker, markdown, onnx_picker
from training.export_onnx import card_fields_from_meta, write_policy
from training.hpc_env import HEURISTIC_NAMES
from training.ppo import Args, load_checkpoint, train


@dataclass
class TrainCommand(Args):
    out: str | None = None
    """export the best checkpoint here (e.g. ``models/hpc-kernel/1``)"""
    name: str = "hpc-kernel"
    """policy name in the card and the ONNX metadata"""
    version: str = "1"
    """policy version in the card and the ONNX metadata"""
    evaluate: bool = True
    """evaluate the exported policy on the paper's protocol and record the table in the card"""
    progress: bool = True
    """show a progress bar"""


def export_and_evaluate(command: TrainCommand, run_path: Path) -> Path:
    """Export ``run_path/best.pt`` to ``command.out`` (with the evaluation table if asked)."""
    assert command.out is not None
    agent, meta = load_checkpoint(run_path / "best.pt")
    fields: dict[str, Any] = card_fields_from_meta(meta)
    fields["training"]["run"] = str(run_path)
    out = Path(command.out)
    onnx_path = write_policy(
        agent, out, name=command.name, version=command.version, card_fields=fields
    )
    if command.evaluate:
        pickers = {name: heuristic_picker(name) for name in HEURISTIC_NAMES}
        pickers[command.name] = onnx_picker(onnx_path, command.max_candidates)
        rows = evaluate(command.trace, pickers)
        print(markdown(rows))
        card = json.loads((out / "card.json").read_text())
        card["metrics"]["evaluation"] = {
            "protocol": "hpc-reproduction.md A.9: seed 1, 10 x 1024 jobs, kairos semantics, "
            "greedy decoding of the ONNX policy, training/evaluate.py",
            "rows": [{k: v for k, v in r.items() if k != "starts"} for r in rows],
            "starts": rows[0]["starts"] if rows else [],
        }
        (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return onnx_path


def main(argv: Sequence[str]) -> int:
    """Entry point of ``kairos train`` (``argv[0] == "train"``)."""
    args = list(argv)
    if args and args[0] == "train":
        args = args[1:]
    command = tyro.cli(TrainCommand, args=args, prog="kairos train")
    run_path = train(command)
    if command.out is not None:
        path = export_and_evaluate(command, run_path)
        print(f"exported {path}")
    return 0
