"""Learned policies for ``kairos evaluate``: ONNX models from the models directory.

``sim`` may not import ``app.policy`` (onnxruntime, the model registry), so :mod:`sim.evaluate`
resolves non-heuristic names through a policy-loader hook.  This module, in the ``kairos``
dispatcher package (which may import both), provides that loader:

* a name is ``<name>`` (the newest loaded version) or ``<name>@<version>``, looked up in
  ``<models_dir>/<name>/<version>/`` (``policy.onnx`` + ``card.json``) exactly as the service's
  :class:`~app.policy.registry.PolicyRegistry` does, with the same validation;
* ``models_dir`` is ``KAIROS_MODELS_DIR`` (the service's setting, default ``models``), and the
  models installed with the package are read beneath it unless ``KAIROS_SHIPPED_MODELS`` is
  false (ADR 0089);
* the result is the service's :class:`~app.policy.onnx_policy.OnnxPolicy`, a ``SteppingPolicy``
  that ``app.domains.hpc.simulate`` drives through ``app.domains.hpc.decision`` (the service's
  decision code and
  feature encoder), with the service's runtime options (threads, ``MAX_CANDIDATES``);
* a spec that is a path (it holds a path separator, starts with ``.`` or ``~``, or names no
  model but an existing directory) is a **model directory**: ``policy.onnx`` + ``card.json``,
  validated as the service validates an upload (card depth, card, ONNX contract), named and
  versioned by its card; a path that is not such a directory is an error naming the path;
* a directory whose ``card.json`` is a heuristic card (``kairos tune``'s output when a heuristic
  won, :mod:`app.tuning.card`) is the heuristic it recommends;
* a model that exists but is refused is an error naming the reason, not "unknown policy";
* ``kairos evaluate --domain gpu`` resolves learned GPU policies through
  :func:`gpu_policy_loader` the same way (a ``"domain": "gpu"`` model by name or directory,
  :func:`app.policy.gpu_onnx.load_gpu_model`'s validation), giving the
  :class:`~app.domains.gpu.learned.ScoredPolicy` that ``app.domains.gpu.decide`` walks.

:func:`register` is called by :mod:`kairos.cli` before it dispatches ``evaluate``.  Sessions are
cached per process (a forked ``--workers`` child loads its own instead of reusing its parent's).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from app.domains.gpu.learned import ScoredPolicy
from app.domains.hpc.heuristics import get_heuristic
from app.domains.hpc.policy import OrderingPolicy
from app.policy.gpu_onnx import is_gpu_card, load_gpu_model
from app.policy.onnx_policy import (
    CARD_FILE,
    MODEL_FILE,
    OnnxPolicy,
    PolicyRefusedError,
    RuntimeOptions,
)
from app.policy.registry import PACKAGED_MODELS, PolicyRegistry, check_card_depth
from app.settings import Settings
from app.tuning.card import HeuristicCardError, is_heuristic_card, recommended_heuristic
from sim.evaluate import UnknownPolicyError, register_policy_loader
from sim.gpu_evaluate import GpuPolicyRefusedError, register_gpu_policy_loader

_lock = threading.Lock()
_registries: dict[tuple[int, Path, RuntimeOptions, Path | None], PolicyRegistry] = {}
_directories: dict[tuple[int, Path, RuntimeOptions], OnnxPolicy] = {}


def runtime_options(settings: Settings) -> RuntimeOptions:
    """The service's onnxruntime options (ADR 0043) and candidate window."""
    return RuntimeOptions(
        intra_op_threads=settings.ONNX_INTRA_OP_THREADS,
        inter_op_threads=settings.ONNX_INTER_OP_THREADS,
        max_candidates=settings.MAX_CANDIDATES,
    )


def _registry(
    models_dir: Path, options: RuntimeOptions, packaged: Path | None = None
) -> PolicyRegistry:
    key = (os.getpid(), models_dir.resolve(), options, packaged)
    with _lock:
        registry = _registries.get(key)
        if registry is None:
            registry = _registries[key] = PolicyRegistry(key[1], options, packaged=packaged)
        return registry


def is_path_spec(spec: str) -> bool:
    """Whether ``spec`` can only be a path (no model name holds a separator or starts so)."""
    separators = {"/", os.sep, *([os.altsep] if os.altsep else [])}
    return spec.startswith((".", "~")) or any(sep in spec for sep in separators)


def _heuristic_dir(path: Path) -> OrderingPolicy | None:
    """The heuristic that ``path``'s heuristic card recommends; ``None`` when the directory
    holds no heuristic card (an unreadable card is left for the model checks to refuse)."""
    try:
        card = json.loads((path / CARD_FILE).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(card, dict) or not is_heuristic_card(card):
        return None
    try:
        return get_heuristic(recommended_heuristic(card))
    except HeuristicCardError as exc:
        raise UnknownPolicyError(
            f"policy {str(path)!r}: the heuristic card in {path}: {exc}"
        ) from exc


def load_model_dir(path: Path, options: RuntimeOptions) -> OnnxPolicy | OrderingPolicy:
    """The model in directory ``path`` (``policy.onnx`` + ``card.json``), validated as the
    service validates an upload and named by its card; one session per process and directory.
    A directory with a heuristic card is the heuristic it recommends.

    Raises :class:`~sim.evaluate.UnknownPolicyError` naming ``path`` when it is not a model
    directory or the model is refused.
    """
    if not path.is_dir():
        raise UnknownPolicyError(f"policy {str(path)!r}: no such model directory: {path}")
    heuristic = _heuristic_dir(path)
    if heuristic is not None:
        return heuristic
    missing = [f for f in (MODEL_FILE, CARD_FILE) if not (path / f).is_file()]
    if missing:
        raise UnknownPolicyError(
            f"policy {str(path)!r}: the model directory {path} lacks {' and '.join(missing)}"
        )
    key = (os.getpid(), path.resolve(), options)
    with _lock:
        cached = _directories.get(key)
    if cached is not None:
        return cached
    model, card = (path / MODEL_FILE).read_bytes(), (path / CARD_FILE).read_bytes()
    try:
        check_card_depth(card)
        policy = OnnxPolicy.from_bytes(model, card, options=options, path=path)
    except PolicyRefusedError as exc:
        raise UnknownPolicyError(
            f"policy {str(path)!r}: the model in {path} was refused "
            f"({exc.reason.value}): {exc.message}"
        ) from exc
    with _lock:
        return _directories.setdefault(key, policy)


def load_policy(
    name: str, *, models_dir: Path | None = None, settings: Settings | None = None
) -> OnnxPolicy | OrderingPolicy | None:
    """The ONNX policy ``name`` / ``name@version`` / a model directory path names, ``None`` if
    no such model exists.

    Raises :class:`~sim.evaluate.UnknownPolicyError` when the model exists but was refused, or
    when a path is not a model directory.
    """
    conf = settings if settings is not None else Settings()
    directory = models_dir if models_dir is not None else Path(conf.MODELS_DIR)
    spec = name.strip()
    if not spec:
        return None
    options = runtime_options(conf)
    if is_path_spec(spec):
        return load_model_dir(Path(spec).expanduser(), options)
    packaged = PACKAGED_MODELS if conf.SHIPPED_MODELS else None
    registry = _registry(directory, options, packaged)
    entry = registry.find_or_load(spec, retry_after_s=0.0)
    if entry is None:
        return load_model_dir(Path(spec), options) if Path(spec).is_dir() else None
    if entry.policy is None:
        reason = entry.reason.value if entry.reason is not None else "refused"
        raise UnknownPolicyError(
            f"policy {name!r}: the model {entry.name}@{entry.version} in {entry.path} was "
            f"refused ({reason}): {entry.message}"
        )
    return entry.policy


def onnx_policy_loader(name: str) -> OnnxPolicy | OrderingPolicy | None:
    """The :data:`sim.evaluate.PolicyLoader` (settings read from the environment at each call)."""
    return load_policy(name)


def _gpu_model_dir(path: Path, options: RuntimeOptions) -> ScoredPolicy:
    missing = [f for f in (MODEL_FILE, CARD_FILE) if not (path / f).is_file()]
    if not path.is_dir() or missing:
        what = "no such model directory" if not path.is_dir() else f"lacks {' and '.join(missing)}"
        raise GpuPolicyRefusedError(f"policy {str(path)!r}: {what}")
    model, card = (path / MODEL_FILE).read_bytes(), (path / CARD_FILE).read_bytes()
    try:
        check_card_depth(card)
        return load_gpu_model(model, card, options=options, path=path).policy()
    except PolicyRefusedError as exc:
        raise GpuPolicyRefusedError(
            f"policy {str(path)!r}: the model in {path} was refused ({exc.reason.value}): "
            f"{exc.message}"
        ) from exc


def load_gpu_policy_spec(
    name: str, *, models_dir: Path | None = None, settings: Settings | None = None
) -> ScoredPolicy | None:
    """The learned GPU policy ``name`` / ``name@version`` / a model directory path names,
    ``None`` if no such model exists (or it is an HPC model).

    Raises :class:`~sim.gpu_evaluate.GpuPolicyRefusedError` when a GPU model exists but was
    refused, or when a path is not a GPU model directory."""
    conf = settings if settings is not None else Settings()
    spec = name.strip()
    if not spec:
        return None
    options = runtime_options(conf)
    if is_path_spec(spec):
        return _gpu_model_dir(Path(spec).expanduser(), options)
    directory = models_dir if models_dir is not None else Path(conf.MODELS_DIR)
    packaged = PACKAGED_MODELS if conf.SHIPPED_MODELS else None
    entry = _registry(directory, options, packaged).find_or_load(spec, retry_after_s=0.0)
    if entry is None:
        return _gpu_model_dir(Path(spec), options) if Path(spec).is_dir() else None
    if entry.gpu is not None:
        return entry.gpu.policy()
    if is_gpu_card(entry.card):
        reason = entry.reason.value if entry.reason is not None else "refused"
        raise GpuPolicyRefusedError(
            f"policy {name!r}: the model {entry.name}@{entry.version} in {entry.path} was "
            f"refused ({reason}): {entry.message}"
        )
    return None


def gpu_policy_loader(name: str) -> ScoredPolicy | None:
    """The :data:`sim.gpu_evaluate.GpuPolicyLoader` (settings read from the environment)."""
    return load_gpu_policy_spec(name)


def register() -> None:
    """Make ``kairos evaluate --policies`` accept ONNX policy names, HPC and GPU (idempotent)."""
    register_policy_loader(onnx_policy_loader)
    register_gpu_policy_loader(gpu_policy_loader)
