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
* a model that exists but is refused is an error naming the reason, not "unknown policy".

:func:`register` is called by :mod:`kairos.cli` before it dispatches ``evaluate``.  Sessions are
cached per process (a forked ``--workers`` child loads its own instead of reusing its parent's).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from app.policy.onnx_policy import OnnxPolicy, RuntimeOptions
from app.policy.registry import PACKAGED_MODELS, PolicyRegistry
from app.settings import Settings
from sim.evaluate import UnknownPolicyError, register_policy_loader

_lock = threading.Lock()
_registries: dict[tuple[int, Path, RuntimeOptions, Path | None], PolicyRegistry] = {}


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


def load_policy(
    name: str, *, models_dir: Path | None = None, settings: Settings | None = None
) -> OnnxPolicy | None:
    """The ONNX policy ``name`` / ``name@version`` names, ``None`` if no such model exists.

    Raises :class:`~sim.evaluate.UnknownPolicyError` when the model exists but was refused.
    """
    conf = settings if settings is not None else Settings()
    directory = models_dir if models_dir is not None else Path(conf.MODELS_DIR)
    spec = name.strip()
    if not spec:
        return None
    packaged = PACKAGED_MODELS if conf.SHIPPED_MODELS else None
    registry = _registry(directory, runtime_options(conf), packaged)
    entry = registry.find_or_load(spec, retry_after_s=0.0)
    if entry is None:
        return None
    if entry.policy is None:
        reason = entry.reason.value if entry.reason is not None else "refused"
        raise UnknownPolicyError(
            f"policy {name!r}: the model {entry.name}@{entry.version} in {entry.path} was "
            f"refused ({reason}): {entry.message}"
        )
    return entry.policy


def onnx_policy_loader(name: str) -> OnnxPolicy | None:
    """The :data:`sim.evaluate.PolicyLoader` (settings read from the environment at each call)."""
    return load_policy(name)


def register() -> None:
    """Make ``kairos evaluate --policies`` accept ONNX policy names (idempotent)."""
    register_policy_loader(onnx_policy_loader)
