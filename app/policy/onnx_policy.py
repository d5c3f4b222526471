"""The ONNX policy runtime: load, validate, and score encoded views.

A model lives in ``<models_dir>/<name>/<version>/`` as ``policy.onnx`` plus ``card.json``.
:meth:`OnnxPolicy.load` refuses a model (raising :class:`PolicyRefusedError` with a machine-readable
:class:`RefusalReason`) unless:

* ``card.json`` parses and names ``domain``, ``feature_schema_version``, ``inputs``, ``outputs``,
  ``training``, ``seeds`` and ``metrics``, and its ``feature_schema_version`` (and the ONNX
  ``metadata_props["feature_schema_version"]`` when present) equals
  :data:`app.domains.hpc.encoding.FEATURE_SCHEMA_VERSION`;
* onnxruntime creates a session with exactly the requested providers (``CPUExecutionProvider``
  unless configured: older onnxruntime silently fell back to other providers, so we verify);
* the graph's inputs are exactly ``obs: float32[B, N, F]`` and ``action_mask: bool[B, N]`` with
  dynamic ``B`` and ``N`` and ``F == NUM_FEATURES``, and it has an output
  ``logits: float32[B, N]`` (the card's declared signature must say the same);
* probe inputs of two different shapes give logits of the right shape, finite wherever the mask
  is true;
* the card's optional ``decision_mode`` is ``"step"`` (default: the model is asked at every step
  of a decision, :class:`OnnxPolicy`) or ``"rank"`` (it scores the decision's first view once and
  the decision walks that order, :class:`OnnxRankingPolicy`; ADR 0065).

Thread counts are explicit (ADR 0043): ``intra_op_num_threads`` and ``inter_op_num_threads`` come
from the caller (settings), execution is sequential and intra-op spinning is off, so an idle
session does not burn the CPU that the event loop and the database driver need.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, NoReturn

import numpy as np
import onnxruntime as ort

from app.domains.hpc.encoding import (
    DEFAULT_MAX_CANDIDATES,
    FEATURE_SCHEMA_VERSION,
    NUM_FEATURES,
    LogitsArray,
    MaskArray,
    ObsArray,
    encode_view,
    masked_argmax,
    rank_rows,
)
from app.domains.hpc.policy import StepView
from app.domains.hpc.types import PolicyRef

MODEL_FILE: Final = "policy.onnx"
CARD_FILE: Final = "card.json"
OBS_INPUT: Final = "obs"
MASK_INPUT: Final = "action_mask"
LOGITS_OUTPUT: Final = "logits"
METADATA_SCHEMA_KEY: Final = "feature_schema_version"
REQUIRED_CARD_KEYS: Final = (
    "domain",
    "feature_schema_version",
    "inputs",
    "outputs",
    "training",
    "seeds",
    "metrics",
)
DEFAULT_PROVIDERS: Final = ("CPUExecutionProvider",)
#: (B, N) of the two probe inputs: two shapes prove the axes really are dynamic.
PROBE_SHAPES: Final = ((2, 5), (1, 1))
PROBE_SEED: Final = 20261130
MODE_KEY: Final = "decision_mode"
MODE_STEP: Final = "step"
MODE_RANK: Final = "rank"


class RefusalReason(StrEnum):
    MODEL_MISSING = "model_missing"
    CORRUPT_MODEL = "corrupt_model"
    INVALID_CARD = "invalid_card"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    SIGNATURE_MISMATCH = "signature_mismatch"
    SCHEMA_VERSION_MISMATCH = "schema_version_mismatch"
    PROBE_FAILED = "probe_failed"
    NON_FINITE_PROBE = "non_finite_probe"


class InferenceFailure(StrEnum):
    INFERENCE_ERROR = "inference_error"
    NON_FINITE_OUTPUT = "non_finite_output"
    ALL_MASKED = "all_masked"
    INVALID_OUTPUT = "invalid_output"


class PolicyRefusedError(Exception):
    """A model that failed validation; ``reason`` is machine-readable."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message


class PolicyInferenceError(Exception):
    """Scoring failed or gave no usable pick; ``reason`` is machine-readable."""

    def __init__(self, reason: InferenceFailure, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message


def refuse(message: str, reason: RefusalReason = RefusalReason.INVALID_CARD) -> NoReturn:
    """Raise :class:`PolicyRefusedError` (``invalid_card`` unless ``reason`` says otherwise)."""
    raise PolicyRefusedError(reason, message)


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """How sessions are created (from settings; see ADR 0043)."""

    intra_op_threads: int = 1
    inter_op_threads: int = 1
    providers: tuple[str, ...] = DEFAULT_PROVIDERS
    max_candidates: int = DEFAULT_MAX_CANDIDATES


@dataclass(frozen=True, slots=True)
class ModelCard:
    name: str
    version: str
    domain: str
    feature_schema_version: str
    raw: Mapping[str, Any] = field(default_factory=dict)
    #: ``"step"`` (asked at every step) or ``"rank"`` (scores once per decision)
    decision_mode: str = MODE_STEP


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_card(
    raw_bytes: bytes, *, name: str | None = None, version: str | None = None
) -> ModelCard:
    """Parse and check ``card.json``; ``name``/``version`` default to the card's own fields."""
    try:
        raw = json.loads(raw_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD, f"card.json is not JSON: {exc}"
        ) from exc
    except RecursionError:  # nesting past the interpreter's limit
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, "card.json nests too deeply") from None
    if not isinstance(raw, dict):
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, "card.json must be a JSON object")
    missing = [key for key in REQUIRED_CARD_KEYS if key not in raw]
    if missing:
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD, f"card.json lacks {', '.join(missing)}"
        )
    card_name = name if name is not None else raw.get("name")
    card_version = version if version is not None else raw.get("version")
    if not isinstance(card_name, str) or not isinstance(card_version, str):
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD, "card.json needs string name and version"
        )
    if not isinstance(raw["domain"], str) or not isinstance(raw["feature_schema_version"], str):
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD, "domain and feature_schema_version must be strings"
        )
    if raw["feature_schema_version"] != FEATURE_SCHEMA_VERSION:
        raise PolicyRefusedError(
            RefusalReason.SCHEMA_VERSION_MISMATCH,
            f"card names feature schema {raw['feature_schema_version']!r}, "
            f"the encoder is {FEATURE_SCHEMA_VERSION!r}",
        )
    _check_card_signature(raw)
    mode = raw.get(MODE_KEY, MODE_STEP)
    if mode not in (MODE_STEP, MODE_RANK):
        raise PolicyRefusedError(
            RefusalReason.INVALID_CARD,
            f"card {MODE_KEY} is {mode!r}; expected {MODE_STEP!r} or {MODE_RANK!r}",
        )
    return ModelCard(
        name=card_name,
        version=card_version,
        domain=raw["domain"],
        feature_schema_version=raw["feature_schema_version"],
        raw=raw,
        decision_mode=mode,
    )


def parse_domain_card(raw_bytes: bytes, *, domain: str, schema_version: str) -> dict[str, Any]:
    """The JSON object of a gpu or dag card: it names a non-empty string ``name`` and
    ``version``, ``domain == domain`` and ``feature_schema_version == schema_version``; the
    domain's own keys are the caller's to check."""
    try:
        raw = json.loads(raw_bytes)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PolicyRefusedError(RefusalReason.INVALID_CARD, f"card.json: {exc}") from None
    if not isinstance(raw, dict):
        refuse("card.json must be a JSON object")
    for key in ("name", "version"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            refuse(f"card.json needs a string {key}")
    if raw.get("domain") != domain:
        refuse(f"card domain is {raw.get('domain')!r}, expected {domain!r}")
    if raw.get("feature_schema_version") != schema_version:
        refuse(
            f"card names feature schema {raw.get('feature_schema_version')!r}, "
            f"the encoder is {schema_version!r}",
            RefusalReason.SCHEMA_VERSION_MISMATCH,
        )
    return raw


def _expected_signature() -> dict[str, tuple[str, int]]:
    return {OBS_INPUT: ("float32", 3), MASK_INPUT: ("bool", 2), LOGITS_OUTPUT: ("float32", 2)}


def _check_card_signature(raw: Mapping[str, Any]) -> None:
    """The card's declared ``inputs``/``outputs`` must agree with the encoder's contract."""
    declared: dict[str, Mapping[str, Any]] = {}
    for key in ("inputs", "outputs"):
        entries = raw[key]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise PolicyRefusedError(
                RefusalReason.INVALID_CARD, f"card {key} must be a list of objects"
            )
        for entry in entries:
            declared[str(entry.get("name"))] = entry
    if sorted(str(e.get("name")) for e in raw["inputs"]) != sorted([OBS_INPUT, MASK_INPUT]):
        raise PolicyRefusedError(
            RefusalReason.SIGNATURE_MISMATCH, "card inputs must be exactly obs and action_mask"
        )
    for tensor, (dtype, rank) in _expected_signature().items():
        entry = declared.get(tensor)
        if entry is None:
            raise PolicyRefusedError(
                RefusalReason.SIGNATURE_MISMATCH, f"card does not declare {tensor}"
            )
        shape = entry.get("shape")
        if entry.get("dtype") != dtype or not isinstance(shape, list) or len(shape) != rank:
            raise PolicyRefusedError(
                RefusalReason.SIGNATURE_MISMATCH,
                f"card declares {tensor} as {entry.get('dtype')}{shape}, "
                f"expected {dtype} of rank {rank}",
            )
        if tensor == OBS_INPUT and shape[2] != NUM_FEATURES:
            raise PolicyRefusedError(
                RefusalReason.SIGNATURE_MISMATCH,
                f"card declares obs with {shape[2]!r} features, the encoder makes {NUM_FEATURES}",
            )


def _is_dynamic(dim: object) -> bool:
    return dim is None or isinstance(dim, str)


def _check_graph_signature(session: ort.InferenceSession) -> None:
    inputs = {arg.name: arg for arg in session.get_inputs()}
    if sorted(inputs) != sorted([OBS_INPUT, MASK_INPUT]):
        raise PolicyRefusedError(
            RefusalReason.SIGNATURE_MISMATCH,
            f"inputs are {sorted(inputs)}, expected exactly ['action_mask', 'obs']",
        )
    outputs = {arg.name: arg for arg in session.get_outputs()}
    if LOGITS_OUTPUT not in outputs:
        raise PolicyRefusedError(
            RefusalReason.SIGNATURE_MISMATCH, f"outputs are {sorted(outputs)}, none is 'logits'"
        )
    ort_types = {"float32": "tensor(float)", "bool": "tensor(bool)"}
    for tensor, (dtype, rank) in _expected_signature().items():
        arg = inputs.get(tensor) or outputs[tensor]
        shape = list(arg.shape)
        if arg.type != ort_types[dtype] or len(shape) != rank:
            raise PolicyRefusedError(
                RefusalReason.SIGNATURE_MISMATCH,
                f"{tensor} is {arg.type}{shape}, expected {ort_types[dtype]} of rank {rank}",
            )
        if not (_is_dynamic(shape[0]) and _is_dynamic(shape[1])):
            raise PolicyRefusedError(
                RefusalReason.SIGNATURE_MISMATCH,
                f"{tensor} has fixed batch/queue axes {shape[:2]}; both must be dynamic",
            )
        if tensor == OBS_INPUT and shape[2] != NUM_FEATURES:
            raise PolicyRefusedError(
                RefusalReason.SIGNATURE_MISMATCH,
                f"obs has {shape[2]!r} features, the encoder makes {NUM_FEATURES}",
            )


def _probe(session: ort.InferenceSession) -> None:
    rng = np.random.default_rng(PROBE_SEED)
    for batch, queue in PROBE_SHAPES:
        obs = rng.random((batch, queue, NUM_FEATURES), dtype=np.float32)
        mask = np.ones((batch, queue), dtype=np.bool_)
        mask[0, -1] = queue == 1  # one masked row when there is room, none when N == 1
        try:
            (logits,) = session.run([LOGITS_OUTPUT], {OBS_INPUT: obs, MASK_INPUT: mask})
        except Exception as exc:  # onnxruntime raises assorted types
            raise PolicyRefusedError(
                RefusalReason.PROBE_FAILED, f"probe {batch}x{queue}: {exc}"
            ) from exc
        array = np.asarray(logits)
        if array.shape != (batch, queue) or array.dtype != np.float32:
            raise PolicyRefusedError(
                RefusalReason.PROBE_FAILED,
                f"probe {batch}x{queue} gave {array.dtype}{list(array.shape)}",
            )
        if not bool(np.isfinite(array[mask]).all()):
            raise PolicyRefusedError(
                RefusalReason.NON_FINITE_PROBE, f"probe {batch}x{queue} gave non-finite logits"
            )


def _make_session(model: bytes, options: RuntimeOptions) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.intra_op_threads
    so.inter_op_num_threads = options.inter_op_threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    available = set(ort.get_available_providers())
    missing = [p for p in options.providers if p not in available]
    if missing or not options.providers:
        raise PolicyRefusedError(
            RefusalReason.PROVIDER_UNAVAILABLE,
            f"providers {missing or '[]'} unavailable; this onnxruntime has {sorted(available)}",
        )
    try:
        session = ort.InferenceSession(model, sess_options=so, providers=list(options.providers))
    except Exception as exc:  # onnxruntime raises assorted types
        raise PolicyRefusedError(RefusalReason.CORRUPT_MODEL, str(exc)) from exc
    obtained = list(session.get_providers())
    if obtained != list(options.providers):
        raise PolicyRefusedError(
            RefusalReason.PROVIDER_UNAVAILABLE,
            f"asked for providers {list(options.providers)}, onnxruntime gave {obtained}",
        )
    return session


def open_session(
    model: bytes, options: RuntimeOptions | None, *, schema_version: str
) -> ort.InferenceSession:
    """A session on exactly the requested providers (:func:`_make_session`) whose ONNX
    ``metadata_props["feature_schema_version"]``, when present, is ``schema_version``."""
    session = _make_session(model, options or RuntimeOptions())
    metadata = session.get_modelmeta().custom_metadata_map
    if METADATA_SCHEMA_KEY in metadata and metadata[METADATA_SCHEMA_KEY] != schema_version:
        refuse(
            f"ONNX metadata names feature schema {metadata[METADATA_SCHEMA_KEY]!r}, "
            f"the encoder is {schema_version!r}",
            RefusalReason.SCHEMA_VERSION_MISMATCH,
        )
    return session


def read_model_dir(directory: Path) -> tuple[bytes, bytes]:
    """The ``(policy.onnx, card.json)`` bytes of a model directory (``model_missing`` when
    either file is absent)."""
    model_path, card_path = directory / MODEL_FILE, directory / CARD_FILE
    if not model_path.is_file() or not card_path.is_file():
        refuse(f"{directory} lacks {MODEL_FILE} or {CARD_FILE}", RefusalReason.MODEL_MISSING)
    return model_path.read_bytes(), card_path.read_bytes()


class OnnxPolicy:
    """A validated ONNX policy: batched :meth:`score` and single-view :meth:`pick`.

    Create it once per process (:meth:`load` at startup, or on upload); ``score`` is safe to call
    from several threads (onnxruntime sessions are), and is CPU-bound: never call it on the event
    loop.
    """

    def __init__(
        self,
        *,
        session: ort.InferenceSession,
        card: ModelCard,
        sha256: str,
        path: Path | None,
        options: RuntimeOptions,
    ) -> None:
        self._session = session
        self.card = card
        self.sha256 = sha256
        self.path = path
        self.options = options
        self._ref = PolicyRef(name=card.name, version=card.version, kind="onnx")

    @property
    def ref(self) -> PolicyRef:
        return self._ref

    @property
    def max_candidates(self) -> int:
        return self.options.max_candidates

    @classmethod
    def from_bytes(
        cls,
        model: bytes,
        card_bytes: bytes,
        *,
        options: RuntimeOptions | None = None,
        name: str | None = None,
        version: str | None = None,
        path: Path | None = None,
    ) -> OnnxPolicy:
        """Validate and load a model from memory; raises :class:`PolicyRefusedError`."""
        opts = options or RuntimeOptions()
        card = parse_card(card_bytes, name=name, version=version)
        session = open_session(model, opts, schema_version=card.feature_schema_version)
        _check_graph_signature(session)
        _probe(session)
        kind = OnnxRankingPolicy if card.decision_mode == MODE_RANK else OnnxPolicy
        return kind(
            session=session,
            card=card,
            sha256=hashlib.sha256(model).hexdigest(),
            path=path,
            options=opts,
        )

    @classmethod
    def load(cls, directory: Path, *, options: RuntimeOptions | None = None) -> OnnxPolicy:
        """Load ``<directory>/policy.onnx`` + ``card.json``; name and version come from the path."""
        model, card = read_model_dir(directory)
        return cls.from_bytes(
            model,
            card,
            options=options,
            name=directory.parent.name,
            version=directory.name,
            path=directory,
        )

    def score(self, obs: ObsArray, mask: MaskArray) -> LogitsArray:
        """``logits float32[B, N]`` for ``obs float32[B, N, F]`` and ``mask bool[B, N]``.

        Raises :class:`PolicyInferenceError` (``inference_error``/``invalid_output``) when
        onnxruntime raises or returns the wrong shape; non-finite values are left for the caller
        to judge per request.
        """
        if obs.ndim != 3 or mask.shape != obs.shape[:2]:
            raise PolicyInferenceError(
                InferenceFailure.INVALID_OUTPUT, f"bad input shapes {obs.shape} / {mask.shape}"
            )
        try:
            (logits,) = self._session.run([LOGITS_OUTPUT], {OBS_INPUT: obs, MASK_INPUT: mask})
        except Exception as exc:  # onnxruntime raises assorted types
            raise PolicyInferenceError(InferenceFailure.INFERENCE_ERROR, str(exc)) from exc
        array = np.asarray(logits, dtype=np.float32)
        if array.shape != mask.shape:
            raise PolicyInferenceError(
                InferenceFailure.INVALID_OUTPUT,
                f"logits shape {array.shape}, expected {mask.shape}",
            )
        return array

    def pick(self, view: StepView) -> int:
        """SteppingPolicy: score one view and return a candidate index (a pickable one)."""
        encoded = encode_view(view, self.options.max_candidates)
        if not bool(encoded.mask.any()):
            raise PolicyInferenceError(InferenceFailure.ALL_MASKED, "every candidate is masked")
        logits = self.score(encoded.obs[None], encoded.mask[None])[0]
        row = masked_argmax(logits, encoded.mask)
        if row is None:
            raise PolicyInferenceError(InferenceFailure.NON_FINITE_OUTPUT, "non-finite logits")
        return encoded.candidate(row)


class OnnxRankingPolicy(OnnxPolicy):
    """A model whose card says ``decision_mode: rank``: a
    :class:`~app.domains.hpc.policy.RankingPolicy`.

    It scores every candidate of the decision's first view once (no candidate window: the whole
    eligible queue), and the decision walks the candidates by descending logit, ties in FCFS order
    (:func:`~app.domains.hpc.encoding.rank_rows`).  One inference per decision instead of one per
    step.
    """

    def rank(self, view: StepView) -> list[int]:
        width = max(1, len(view.candidates))
        encoded = encode_view(view, width)
        logits = self.score(encoded.obs[None], encoded.mask[None])[0]
        rows = rank_rows(logits, encoded.mask)
        if rows is None:
            raise PolicyInferenceError(InferenceFailure.NON_FINITE_OUTPUT, "non-finite logits")
        return [encoded.candidate(row) for row in rows]


def describe_signature() -> dict[str, list[dict[str, object]]]:
    """The ``inputs``/``outputs`` entries a card must carry (used by training's exporter)."""
    return {
        "inputs": [
            {"name": OBS_INPUT, "dtype": "float32", "shape": ["B", "N", NUM_FEATURES]},
            {"name": MASK_INPUT, "dtype": "bool", "shape": ["B", "N"]},
        ],
        "outputs": [{"name": LOGITS_OUTPUT, "dtype": "float32", "shape": ["B", "N"]}],
    }


__all__ = [
    "CARD_FILE",
    "MODEL_FILE",
    "InferenceFailure",
    "ModelCard",
    "OnnxPolicy",
    "OnnxRankingPolicy",
    "PolicyInferenceError",
    "PolicyRefusedError",
    "RefusalReason",
    "RuntimeOptions",
    "describe_signature",
    "file_sha256",
    "open_session",
    "parse_card",
    "parse_domain_card",
    "read_model_dir",
    "refuse",
]
