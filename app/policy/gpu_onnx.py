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
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

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
    CARD_FILE,
    METADATA_SCHEMA_KEY,
    MODEL_FILE,
    PolicyRefusedError,
    RefusalReason,
    RuntimeOptions,
    _make_session,
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


def _refuse(message: str, reason: RefusalReason = RefusalReason.INVALID_CARD) -> NoReturn:
    raise PolicyRefusedError(reason, message)


def _parse_card(raw_bytes: bytes) -> tuple[dict[str, Any], EncodingConstants, int]:
    try:
        raw = json.loads(raw_bytes)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, f"card.json: {exc}") from None
    if not isinstance(raw, dict):
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, "card.json must be a JSON object")
    for key in ("name", "version"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            _refuse(f"card.json needs a string {key}")
    if raw.get("domain") != GPU_DOMAIN:
        _refuse(f"card domain is {raw.get('domain')!r}, expected {GPU_DOMAIN!r}")
    if raw.get("feature_schema_version") != FEATURE_SCHEMA_VERSION:
        _refuse(
            f"card names feature schema {raw.get('feature_schema_version')!r}, "
            f"the encoder is {FEATURE_SCHEMA_VERSION!r}",
            RefusalReason.SCHEMA_VERSION_MISMATCH,
        )
    encoding = raw.get("encoding")
    if not isinstance(encoding, dict):
        _refuse("card.json needs an encoding object")
    try:
        constants = EncodingConstants.from_dict(encoding)
    except (TypeError, ValueError) as exc:
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, str(exc)) from None
    window = raw.get("window")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        _refuse(f"card window must be an integer >= 1, got {window!r}")
    return raw, constants, window


def _check_signature(session: ort.InferenceSession) -> None:
    inputs = {a.name: a for a in session.get_inputs()}
    outputs = {a.name: a for a in session.get_outputs()}
    if sorted(inputs) != sorted([OBS_INPUT, MASK_INPUT]):
        _refuse(
            f"inputs are {sorted(inputs)}, expected ['mask', 'obs']",
            RefusalReason.SIGNATURE_MISMATCH,
        )
    if LOGITS_OUTPUT not in outputs:
        _refuse(
            f"outputs are {sorted(outputs)}, none is 'logits'", RefusalReason.SIGNATURE_MISMATCH
        )
    expected = {
        OBS_INPUT: ("tensor(float)", 3, inputs[OBS_INPUT]),
        MASK_INPUT: ("tensor(bool)", 2, inputs[MASK_INPUT]),
        LOGITS_OUTPUT: ("tensor(float)", 2, outputs[LOGITS_OUTPUT]),
    }
    for name, (dtype, rank, arg) in expected.items():
        shape = list(arg.shape)
        if arg.type != dtype or len(shape) != rank:
            _refuse(
                f"{name} is {arg.type}{shape}, expected {dtype} of rank {rank}",
                RefusalReason.SIGNATURE_MISMATCH,
            )
        if any(isinstance(d, int) for d in shape[:2]):
            _refuse(
                f"{name} has fixed batch/row axes {shape[:2]}", RefusalReason.SIGNATURE_MISMATCH
            )
        if name == OBS_INPUT and shape[2] != NUM_FEATURES:
            _refuse(
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
            _refuse(f"probe {batch}x{rows} gave {list(out.shape)}", RefusalReason.PROBE_FAILED)
        if not bool(np.isfinite(out[mask]).all()):
            _refuse(f"probe {batch}x{rows} gave non-finite logits", RefusalReason.NON_FINITE_PROBE)


def load_gpu_model(
    model: bytes, card: bytes, *, options: RuntimeOptions | None = None, path: Path | None = None
) -> GpuOnnxModel:
    """Validate and load a GPU model from memory; raises :class:`PolicyRefusedError`."""
    raw, constants, window = _parse_card(card)
    session = _make_session(model, options or RuntimeOptions())
    meta = session.get_modelmeta().custom_metadata_map
    if METADATA_SCHEMA_KEY in meta and meta[METADATA_SCHEMA_KEY] != FEATURE_SCHEMA_VERSION:
        _refuse(
            f"ONNX metadata names feature schema {meta[METADATA_SCHEMA_KEY]!r}, "
            f"the encoder is {FEATURE_SCHEMA_VERSION!r}",
            RefusalReason.SCHEMA_VERSION_MISMATCH,
        )
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
    model_path, card_path = model_dir / MODEL_FILE, model_dir / CARD_FILE
    if not model_path.is_file() or not card_path.is_file():
        _refuse(f"{model_dir} lacks {MODEL_FILE} or {CARD_FILE}", RefusalReason.MODEL_MISSING)
    return load_gpu_model(
        model_path.read_bytes(), card_path.read_bytes(), options=options, path=model_dir
    ).policy(window)
