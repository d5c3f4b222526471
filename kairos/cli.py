"""``kairos <command>``: dispatch to the CLI that owns the command.

* ``serve``, ``migrate``, ``worker`` -> :mod:`app.cli` (the service; needs no torch)
* ``evaluate`` -> :mod:`sim.cli` (the trace-driven simulator), with the ONNX policy loader of
  :mod:`kairos.policy_loader` registered so ``--policies`` accepts model names
* ``train`` -> :mod:`training.cli` (needs the ``train`` extra)
* ``tune`` -> :mod:`kairos.tune` (site tuning, :mod:`app.tuning.procedure`; needs no torch)

Each module exposes ``main(argv: list[str]) -> int``; only the chosen one is imported.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import cast

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("app.cli", "run the HTTP API (uvicorn)"),
    "migrate": ("app.cli", "upgrade the database schema to the latest migration"),
    "worker": ("app.cli", "run a decision worker reading the Redis request stream"),
    "evaluate": ("sim.cli", "replay traces in the simulator and compare policies"),
    "train": (
        "training.cli",
        "train a learned policy of any domain (--domain hpc|gpu|dag, --algo ppo|es), export it",
    ),
    "tune": ("kairos.tune", "tune the learned HPC policy on a site's history, with a guard"),
}


def _usage() -> str:
    lines = ["usage: kairos <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `kairos <command> --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())  # noqa: T201
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"kairos: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)  # noqa: T201
        return 2
    if command == "evaluate":
        from kairos.dag_policy_loader import register as register_dag
        from kairos.policy_loader import register

        register()
        register_dag()
    module = importlib.import_module(COMMANDS[command][0])
    entry = cast(Callable[[list[str]], int], module.main)
    return entry([command, *rest])


if __name__ == "__main__":
    raise SystemExit(main())
