"""Learned GPU policies from ONNX: ``load_gpu_policy(model_dir)`` -> a
:class:`~app.domains.gpu.learned.ScoredPolicy` that :func:`app.domains.gpu.decide.decide`
accepts.

A model directory holds ``policy.onnx`` + ``card.json``. The model is refused
(:class:`~app.policy.onnx_policy.PolicyRefusedError`) unless:

* the card parses, names ``name``, ``version``, ``domain == "gpu"``,
  ``feature_schema_version ==`` :data:`~app.domains.gpu.encoding.FEATURE_SCHEMA_VERSION`, an
  ``encoding`` object of :class:`~app.domains.gpu.encoding.EncodingConstants` and a ``window``
  >= 1; the ONNX ``metadata_props["feature_schema_version"]``, when present, says the same;
* the graph's inputs are exactly ``obs: float32[B, K, NUM_FEATURES]`` and ``mask: bool[B, K]``
  (``B`` and ``K`` dynamic) and it has an output ``logits: float32[B, K]``;
* two probe inputs of different shapes give logits of their shape, finite where the mask is
  true.

The score callable runs one session call per decision; it is CPU-bound and thread-safe: call
``decide()`` with it off the event loop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxruntime as ort

from app.domains.gpu.encoding import (
    FEATURE_SCHEMA_VERSION,
    NUM_FEATURES,
    BoolArray,
    EncodingConstants,
    FloatArray,
)
from app.domains.gpu.learned import ScoredPolicy
from app.policy.onnx_policy import (
    PolicyRefusedError,
    RefusalReason,
    RuntimeOptions,
    open_session,
    parse_domain_card,
    read_model_dir,
    refuse,
)

__all__ = [
    "GPU_DOMAIN",
    "LOGITS_OUTPUT",
    "MASK_INPUT",
    "OBS_INPUT",
    "GpuOnnxModel",
    "is_gpu_card",
    "load_gpu_model",
    "load_gpu_policy",
]

GPU_DOMAIN: Final = "gpu"
OBS_INPUT: Final = "obs"
MASK_INPUT: Final = "mask"
LOGITS_OUTPUT: Final = "logits"
PROBE_SHAPES: Final = ((2, 5), (1, 1))
PROBE_SEED: Final = 20261202


def is_gpu_card(card: Any) -> bool:
    """Whether a parsed card says ``"domain": "gpu"``."""
    return isinstance(card, dict) and card.get("domain") == GPU_DOMAIN


def _parse_card(raw_bytes: bytes) -> tuple[dict[str, Any], EncodingConstants, int]:
    raw = parse_domain_card(raw_bytes, domain=GPU_DOMAIN, schema_version=FEATURE_SCHEMA_VERSION)
    encoding = raw.get("encoding")
    if not isinstance(encoding, dict):
        refuse("card.json needs an encoding object")
    try:
        constants = EncodingConstants.from_dict(encoding)
    except (TypeError, ValueError) as exc:
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, str(exc)) from None
    window = raw.get("window")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        refuse(f"card window must be an integer >= 1, got {window!r}")
    return raw, constants, window


def _check_signature(session: ort.InferenceSession) -> None:
    inputs = {a.name: a for a in session.get_inputs()}
    outputs = {a.name: a for a in session.get_outputs()}
    if sorted(inputs) != sorted([OBS_INPUT, MASK_INPUT]):
        refuse(
            f"inputs are {sorted(inputs)}, expected ['mask', 'obs']",
            RefusalReason.SIGNATURE_MISMATCH,
        )
    if LOGITS_OUTPUT not in outputs:
        refuse(f"outputs are {sorted(outputs)}, none is 'logits'", RefusalReason.SIGNATURE_MISMATCH)
    expected = {
        OBS_INPUT: ("tensor(float)", 3, inputs[OBS_INPUT]),
        MASK_INPUT: ("tensor(bool)", 2, inputs[MASK_INPUT]),
        LOGITS_OUTPUT: ("tensor(float)", 2, outputs[LOGITS_OUTPUT]),
    }
    for name, (dtype, rank, arg) in expected.items():
        shape = list(arg.shape)
        if arg.type != dtype or len(shape) != rank:
            refuse(
                f"{name} is {arg.type}{shape}, expected {dtype} of rank {rank}",
                RefusalReason.SIGNATURE_MISMATCH,
            )
        if any(isinstance(d, int) for d in shape[:2]):
            refuse(f"{name} has fixed batch/row axes {shape[:2]}", RefusalReason.SIGNATURE_MISMATCH)
        if name == OBS_INPUT and shape[2] != NUM_FEATURES:
            refuse(
                f"obs has {shape[2]!r} features, the encoder makes {NUM_FEATURES}",
                RefusalReason.SIGNATURE_MISMATCH,
            )


@dataclass(frozen=True, slots=True)
class GpuOnnxModel:
    """A validated GPU model: its session, card and digest."""

    session: ort.InferenceSession
    card: dict[str, Any]
    constants: EncodingConstants
    window: int
    sha256: str
    path: Path | None = None

    @property
    def name(self) -> str:
        return str(self.card["name"])

    @property
    def version(self) -> str:
        return str(self.card["version"])

    def logits(self, obs: FloatArray, mask: BoolArray) -> FloatArray:
        """``logits float32[B, K]`` of ``obs float32[B, K, F]`` and ``mask bool[B, K]``."""
        (out,) = self.session.run(
            [LOGITS_OUTPUT],
            {OBS_INPUT: np.ascontiguousarray(obs, dtype=np.float32), MASK_INPUT: mask},
        )
        return np.asarray(out, dtype=np.float32)

    def score(self, obs: FloatArray, mask: BoolArray) -> FloatArray:
        """One snapshot's rows: ``scores[k]`` for ``obs[k, F]``, ``mask[k]``."""
        out: FloatArray = self.logits(obs[None], np.asarray(mask, dtype=np.bool_)[None])[0]
        return out

    def policy(self, window: int | None = None) -> ScoredPolicy:
        """The policy ``decide()`` accepts; ``window`` (default: the card's, the one it was
        trained with) is how many candidates it scores per round: a cluster with more running
        jobs than that sees no pending job, so a large cluster raises it (rows are scored
        independently; the cost is one row per candidate)."""
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        return ScoredPolicy(
            name=self.name,
            version=self.version,
            score=self.score,
            constants=self.constants,
            window=self.window if window is None else window,
        )


def _probe(model: GpuOnnxModel) -> None:
    rng = np.random.default_rng(PROBE_SEED)
    for batch, rows in PROBE_SHAPES:
        obs = rng.random((batch, rows, NUM_FEATURES), dtype=np.float32)
        mask = np.ones((batch, rows), dtype=np.bool_)
        mask[0, -1] = rows == 1
        try:
            out = model.logits(obs, mask)
        except Exception as exc:  # onnxruntime raises assorted types
            raise PolicyRefusedError(
                RefusalReason.PROBE_FAILED, f"probe {batch}x{rows}: {exc}"
            ) from exc
        if out.shape != (batch, rows):
            refuse(f"probe {batch}x{rows} gave {list(out.shape)}", RefusalReason.PROBE_FAILED)
        if not bool(np.isfinite(out[mask]).all()):
            refuse(f"probe {batch}x{rows} gave non-finite logits", RefusalReason.NON_FINITE_PROBE)


def load_gpu_model(
    model: bytes, card: bytes, *, options: RuntimeOptions | None = None, path: Path | None = None
) -> GpuOnnxModel:
    """Validate and load a GPU model from memory; raises :class:`PolicyRefusedError`."""
    raw, constants, window = _parse_card(card)
    session = open_session(model, options, schema_version=FEATURE_SCHEMA_VERSION)
    _check_signature(session)
    loaded = GpuOnnxModel(session, raw, constants, window, hashlib.sha256(model).hexdigest(), path)
    _probe(loaded)
    return loaded


def load_gpu_policy(
    model_dir: Path, *, options: RuntimeOptions | None = None, window: int | None = None
) -> ScoredPolicy:
    """The learned GPU policy of ``model_dir`` (``policy.onnx`` + ``card.json``), named and
    versioned by its card, scoring ``window`` candidates (default: the card's; see
    :meth:`GpuOnnxModel.policy`); raises :class:`PolicyRefusedError`."""
    model, card = read_model_dir(model_dir)
    return load_gpu_model(model, card, options=options, path=model_dir).policy(window)
