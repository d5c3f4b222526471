"""WfCommons workflow instances for ``kairos evaluate --domain dag --workflows``: reading them
with the ``wfcommons`` library and generating the repository's instances with its recipes.

Reading: :class:`wfcommons.wfinstances.Instance` parses and validates the file (JSON syntax
against ``data/dag/workflows/schema/wfformat-kairos.json``, the part of WfFormat 1.5/1.6 read
here, so no schema is fetched from the network; then its semantic checks: declared parents,
no cycle, unique ids).  Each task becomes one one-task stage whose duration is the task's
``runtimeInSeconds`` (:func:`app.domains.dag.workflow.workflow_dag`); a task takes one executor
whatever its ``coreCount``.  Any refusal is a :class:`WorkflowFileError` naming the file and,
where the library or the conversion says which, the task.

Generating (``python -m sim.dag_workflows generate``): the recipes of :data:`RECIPES`, each
with Python's and NumPy's global generators seeded first (the recipes draw from both), written
as compact JSON into ``data/dag/workflows/``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from app.domains.dag.workflow import WorkflowDag, WorkflowError, WorkflowTask, workflow_dag

__all__ = [
    "DEFAULT_SCHEMA",
    "RECIPES",
    "WORKFLOW_DIR",
    "WorkflowFileError",
    "generate",
    "load_workflows",
    "read_workflow",
]

#: the repository's generated instances (see data/dag/workflows/README.md)
WORKFLOW_DIR: Final = Path(__file__).resolve().parents[1] / "data" / "dag" / "workflows"
DEFAULT_SCHEMA: Final = WORKFLOW_DIR / "schema" / "wfformat-kairos.json"

#: file stem -> (wfcommons recipe class, requested task count, seed)
RECIPES: Final[dict[str, tuple[str, int, int]]] = {
    "montage-s1": ("MontageRecipe", 120, 1),
    "epigenomics-s2": ("EpigenomicsRecipe", 100, 2),
    "cycles-s3": ("CyclesRecipe", 150, 3),
    "blast-s4": ("BlastRecipe", 60, 4),
    "seismology-s5": ("SeismologyRecipe", 110, 5),
    "genome-s6": ("GenomeRecipe", 80, 6),
}

#: the most error messages of the library quoted in one :class:`WorkflowFileError`
_MAX_MESSAGES: Final = 3


class WorkflowFileError(ValueError):
    """A workflow file that cannot be read as a DAG job."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message


class _Errors(logging.Handler):
    """Collects the error records wfcommons logs while it validates an instance."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _instance(path: Path, schema: Path) -> Any:
    from wfcommons.wfinstances import Instance  # type: ignore[import-untyped]

    errors = _Errors()
    logger = logging.getLogger(f"kairos.wfcommons.{path.name}")
    logger.propagate = False
    logger.setLevel(logging.ERROR)
    logger.addHandler(errors)
    try:
        return Instance(path, schema_file=str(schema), logger=logger)
    except json.JSONDecodeError as exc:
        raise WorkflowFileError(path, f"not JSON: {exc}") from exc
    except OSError as exc:
        raise WorkflowFileError(path, f"cannot read: {exc.strerror or exc}") from exc
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        said = errors.messages[:_MAX_MESSAGES] or [f"{type(exc).__name__}: {exc}"]
        more = len(errors.messages) - len(said)
        tail = f" (and {more} more)" if more > 0 else ""
        raise WorkflowFileError(
            path, "not a valid WfCommons instance: " + "; ".join(said) + tail
        ) from exc
    finally:
        logger.removeHandler(errors)


def read_workflow(path: Path | str, schema: Path = DEFAULT_SCHEMA) -> WorkflowDag:
    """The DAG job of one WfCommons instance, labelled by the file name without ``.json``."""
    path = Path(path)
    if not path.is_file():
        raise WorkflowFileError(path, "no such file")
    inst = _instance(path, schema)
    wf = inst.workflow
    executed = {str(t["id"]) for t in inst.instance["workflow"]["execution"]["tasks"]}
    tasks: list[WorkflowTask] = []
    for task_id in wf.nodes:
        if task_id not in executed:
            raise WorkflowFileError(
                path, f"task {task_id!r} has no runtime (no entry in workflow.execution.tasks)"
            )
        task = wf.tasks[task_id]
        tasks.append(
            WorkflowTask(
                id=str(task_id),
                runtime_s=float(task.runtime),
                parents=tuple(str(p) for p in wf.predecessors(task_id)),
            )
        )
    label = path.name.removesuffix(".json")
    try:
        return workflow_dag(label, tasks)
    except WorkflowError as exc:
        raise WorkflowFileError(path, str(exc)) from exc


@functools.lru_cache(maxsize=8)
def load_workflows(paths: tuple[str, ...]) -> tuple[WorkflowDag, ...]:
    """The DAG jobs of the files, in order, read once per process."""
    return tuple(read_workflow(p) for p in paths)


def generate(out_dir: Path = WORKFLOW_DIR, names: Sequence[str] | None = None) -> list[Path]:
    """Write the instances of :data:`RECIPES` (or those named) into ``out_dir``."""
    from wfcommons import WorkflowGenerator  # type: ignore[import-untyped]
    from wfcommons.wfchef import recipes  # type: ignore[import-untyped]

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in names or list(RECIPES):
        recipe_name, num_tasks, seed = RECIPES[name]
        random.seed(seed)
        np.random.seed(seed)  # noqa: TID251 - the recipes draw from NumPy's global generator
        recipe = getattr(recipes, recipe_name).from_num_tasks(num_tasks)
        workflow = WorkflowGenerator(recipe).build_workflow()
        path = out_dir / f"{name}.json"
        workflow.write_json(path)
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
        read_workflow(path)  # what is written must read back
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sim.dag_workflows",
        description="Generate the repository's WfCommons workflow instances.",
    )
    p.add_argument("command", choices=["generate"])
    p.add_argument("--out", type=Path, default=WORKFLOW_DIR)
    p.add_argument("--only", nargs="+", choices=list(RECIPES), help="these instances only")
    args = p.parse_args(argv)
    for path in generate(args.out, args.only):
        dag = read_workflow(path)
        print(f"{path}: {len(dag.stages)} tasks, {len(dag.edges)} edges")  # noqa: T201
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
