"""The program one service tune runs as: ``python -m app.tune_worker REQUEST.json``.

The serving process never imports the tuning procedure (it simulates; see the import
contracts): :mod:`app.services.tunes` starts this program as a child process, at a lower CPU
priority, and reads what it prints. The request names an SWF history file (the cluster's
export, ``GET /v1/clusters/{id}/history``) and the procedure's arguments. Standard output
carries one JSON object a line:

* ``{"progress": {"fraction": f, "message": m}}`` as work completes;
* last, ``{"result": {"winner", "kind", "table", "card", "model_dir"}}`` or
  ``{"error": {"code", "message"}}`` (``code``: ``tune_error`` when the procedure refused,
  ``bad_history`` when the history file is not SWF).

The exit status is 0 with a result, 2 with an error line; anything else is a crash.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.domains.hpc.swf import SwfFormatError, load_swf
from app.domains.hpc.types import Backfill
from app.tuning.procedure import TuneConfig, TuneError, tune

#: added to the child's niceness: the serving process keeps the CPU it needs
NICE_INCREMENT = 10


def _emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _progress(fraction: float, message: str) -> None:
    _emit({"progress": {"fraction": float(fraction), "message": str(message)}})


def run(request: dict[str, Any]) -> int:
    """Tune as ``request`` says and print the outcome (see the module docstring)."""
    try:
        trace = load_swf(request["history"])
    except (OSError, SwfFormatError) as exc:
        _emit({"error": {"code": "bad_history", "message": str(exc)}})
        return 2
    from_model = request.get("from_model")
    try:
        result = tune(
            trace,
            backfill=Backfill(request["backfill"]),
            from_model=None if from_model is None else Path(from_model),
            time_budget_s=float(request["time_budget_s"]),
            workers=int(request["workers"]),
            seed=int(request["seed"]),
            out_dir=Path(request["out_dir"]),
            progress=_progress,
            name=str(request["name"]),
            version=str(request["version"]),
            command=request.get("command"),
            config=TuneConfig(window_length=int(request["window_length"])),
        )
    except TuneError as exc:
        _emit({"error": {"code": "tune_error", "message": exc.reason}})
        return 2
    _emit(
        {
            "result": {
                "winner": result.winner,
                "kind": result.kind,
                "table": [asdict(row) for row in result.table],
                "card": result.card,
                "model_dir": str(result.model_dir),
            }
        }
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m app.tune_worker REQUEST.json\n")
        return 64
    if hasattr(os, "nice"):
        os.nice(NICE_INCREMENT)
    request = json.loads(Path(args[0]).read_text())
    return run(request)


if __name__ == "__main__":
    raise SystemExit(main())
