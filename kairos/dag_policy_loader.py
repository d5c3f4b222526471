"""Learned DAG policies for ``kairos evaluate --domain dag``: ONNX models of
:mod:`app.policy.dag_onnx` by name or directory.

``sim`` may not import ``app.policy``, so :mod:`sim.dag_evaluate` resolves names it does not know
through a loader hook; this module provides it:

* a spec that is a path (it holds a path separator or starts with ``.`` or ``~``) is a model
  directory (``policy.onnx`` + ``card.json`` with ``"domain": "dag"``); one that is not such a
  directory, or whose model is refused, is an error naming the path and the reason;
* otherwise ``<name>`` (the newest version) or ``<name>@<version>`` is looked up as
  ``<MODELS_DIR>/<name>/<version>/`` and then, unless ``KAIROS_SHIPPED_MODELS`` is false, among
  the models installed with the package (the service's order, ADR 0089); a name with no
  directory is not a DAG model (``None``: the evaluator reports an unknown policy);
* the factory builds one :class:`~app.domains.dag.decima.DecimaPolicy` per episode, decoding in
  the card's mode with the episode seed as its sampling seed; the session is loaded once per
  process and directory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from app.domains.dag.policy import DagPolicy
from app.policy.dag_onnx import DagOnnxModel, read_dag_model
from app.policy.onnx_policy import CARD_FILE, MODEL_FILE, PolicyRefusedError
from app.policy.registry import PACKAGED_MODELS, split_name, version_key
from app.settings import Settings
from kairos.policy_loader import is_path_spec, runtime_options
from sim.dag_evaluate import DagPolicyRefusedError, register_dag_policy_loader

__all__ = ["dag_policy_loader", "load_dag_model_spec", "register"]

_lock = threading.Lock()
_models: dict[tuple[int, Path], DagOnnxModel] = {}


def _model_dir(spec: str, settings: Settings) -> Path | None:
    name, version = split_name(spec)
    bases = [Path(settings.MODELS_DIR)]
    if settings.SHIPPED_MODELS:
        bases.append(PACKAGED_MODELS)
    for base in bases:
        parent = base / name
        if not name or not parent.is_dir():
            continue
        if version is not None:
            return parent / version
        versions = sorted(
            (p for p in parent.iterdir() if p.is_dir() and (p / CARD_FILE).is_file()),
            key=lambda p: version_key(p.name),
        )
        if versions:
            return versions[-1]
    return None


def load_dag_model_spec(spec: str, *, settings: Settings | None = None) -> DagOnnxModel | None:
    """The DAG model ``spec`` names (see the module doc), ``None`` if no directory has it.

    Raises :class:`~sim.dag_evaluate.DagPolicyRefusedError` naming the directory when it is
    not a model directory or the model is refused."""
    conf = settings if settings is not None else Settings()
    spec = spec.strip()
    if not spec:
        return None
    directory = Path(spec).expanduser() if is_path_spec(spec) else _model_dir(spec, conf)
    if directory is None:
        return None
    missing = [f for f in (MODEL_FILE, CARD_FILE) if not (directory / f).is_file()]
    if not directory.is_dir() or missing:
        what = "no such model directory" if not directory.is_dir() else f"lacks {missing}"
        raise DagPolicyRefusedError(f"policy {spec!r}: {directory}: {what}")
    key = (os.getpid(), directory.resolve())
    with _lock:
        cached = _models.get(key)
    if cached is not None:
        return cached
    try:
        model = read_dag_model(directory, options=runtime_options(conf))
    except PolicyRefusedError as exc:
        raise DagPolicyRefusedError(
            f"policy {spec!r}: the model in {directory} was refused ({exc.reason.value}): "
            f"{exc.message}"
        ) from exc
    with _lock:
        return _models.setdefault(key, model)


def dag_policy_loader(spec: str) -> Callable[[int], DagPolicy] | None:
    """The :data:`sim.dag_evaluate.DagPolicyLoader` (settings read from the environment); the
    policies are named ``spec`` as given, so result rows say what was asked for."""
    model = load_dag_model_spec(spec)
    if model is None:
        return None

    def factory(seed: int) -> DagPolicy:
        policy = model.policy(seed=seed)
        policy.name = spec
        return policy

    return factory


def register() -> None:
    """Make ``kairos evaluate --domain dag --policies`` accept learned DAG models."""
    register_dag_policy_loader(dag_policy_loader)
