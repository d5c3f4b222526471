"""``kairos train``: train a policy of any domain, export it to ONNX, evaluate it.

``--domain`` (default ``hpc``) picks the domain, ``--algo`` (default ``ppo``) the algorithm; every
other option belongs to that trainer (``kairos train --domain D --algo A --help`` lists them):

* ``--domain gpu``: ``ppo`` (``training/gpu_ppo.py``) or ``es`` (``training/gpu_es.py``, how the
  shipped ``gpu-v1`` was trained);
* ``--domain dag``: ``ppo`` (``training/dag_ppo.py``, the Decima recipe on the DAG env) or ``es``
  (``training/dag_es.py``);
``--domain hpc`` (the default) has two:

* ``ppo`` (``training/ppo.py``): the stepping kernel policy, RLScheduler's design, trained with
  PPO in the Gymnasium env on the engine (ADR 0093); every option of ``training/ppo.py`` is
  accepted (``kairos train --help``)::

      kairos train --trace data/lublin_256.swf.gz data/lublin_256_new2.swf.gz \\
          --out models/hpc-kernel/1 --time-budget-s 3600

  ``--out`` adds the export of the best checkpoint (``policy.onnx`` + ``card.json``) and, unless
  ``--no-evaluate``, the evaluation table of the paper's protocol in the card.
* ``es`` (``training/es.py``): the ranking kernel policy (``decision_mode: rank``, ADR 0065),
  trained with evolution strategies on the simulator's engine against the metric itself
  (``kairos train --algo es --help``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import tyro

from training.export_onnx import export_policy
from training.ppo import Args, train


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
    """show a progress bar on stderr when it is a terminal (never in CI or a pipe)"""


#: the trainer module of each (domain, algorithm) but HPC's, whose ``main(argv)`` takes the rest
_TRAINERS: Final = {
    ("gpu", "ppo"): "training.gpu_ppo",
    ("gpu", "es"): "training.gpu_es",
    ("dag", "ppo"): "training.dag_ppo",
    ("dag", "es"): "training.dag_es",
}
DOMAINS: Final = ("hpc", "gpu", "dag")
ALGOS: Final = ("ppo", "es")


def _take(args: list[str], option: str, default: str) -> str:
    """The value of ``option`` (``--x v`` or ``--x=v``), removed from ``args``."""
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if arg.startswith(f"{option}="):
            del args[i]
            return arg.split("=", 1)[1]
    return default


def main(argv: Sequence[str]) -> int:
    """Entry point of ``kairos train`` (``argv[0] == "train"``)."""
    args = list(argv)
    if args and args[0] == "train":
        args = args[1:]
    domain = _take(args, "--domain", "hpc")
    algo = _take(args, "--algo", "ppo")
    if domain not in DOMAINS:
        raise SystemExit(f"kairos train: unknown --domain {domain!r} (choose {', '.join(DOMAINS)})")
    if algo not in ALGOS:
        raise SystemExit(f"kairos train: unknown --algo {algo!r} (choose {' or '.join(ALGOS)})")
    if domain != "hpc":
        trainer: int = importlib.import_module(_TRAINERS[(domain, algo)]).main(args)
        return trainer
    if algo == "es":
        from training.es import main as es_main

        return es_main(args)
    command = tyro.cli(TrainCommand, args=args, prog="kairos train")
    run_path = train(command)
    if command.out is not None:
        path = export_policy(
            run_path / "best.pt",
            Path(command.out),
            name=command.name,
            version=command.version,
            evaluate_traces=command.trace if command.evaluate else (),
        )
        print(f"exported {path}")
    return 0
