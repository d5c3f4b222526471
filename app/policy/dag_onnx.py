"""Learned DAG policies from ONNX: ``load_dag_policy(model_dir)`` -> a
:class:`~app.domains.dag.decima.DecimaPolicy` that :func:`app.domains.dag.decision.decide` (and
the simulator) accepts, its logits computed by onnxruntime.

A model directory holds ``policy.onnx`` + ``card.json`` (the export of
``training/dag_export.py``: the dense Decima network of spec 4.3).  The model is refused
(:class:`~app.policy.onnx_policy.PolicyRefusedError`) unless:

* the card parses, names ``name``, ``version``, ``domain == "dag"``,
  ``feature_schema_version ==`` :data:`~app.domains.dag.domain.FEATURE_SCHEMA_VERSION` and a
  ``decoding`` object whose ``mode`` is ``"sample"`` or ``"argmax"`` (``seed``: an integer >= 0,
  default 0); the ONNX ``metadata_props["feature_schema_version"]``, when present, says the same;
* the graph's inputs are exactly ``x float32[J, S, 5]``, ``adj float32[J, S, S]``,
  ``stage_mask``/``select_mask bool[J, S]``, ``job_mask bool[J]``, ``exec_mask bool[J, E]`` and
  its outputs include ``stage_logits float32[J, S]`` and ``exec_logits float32[J, E]``;
* two probe observations of different shapes give logits of their shapes, finite where the masks
  are true.

A model whose graph has the dense network's two pooled summaries (the stage-masked sum per job,
``h_dag``, and the job-masked sum, ``h_glob``: found by their structure, not their names) is also
split at load into a stage graph (every input but ``exec_mask`` -> the stage logits and both
summaries) and an executor graph (``x``, the summaries and ``exec_mask`` of one job -> its
executor logits), kept only when the probes give the same logits as the whole graph. A decision
step then scores the executor head for the chosen job alone: the head over every job is ``J x
E`` rows, most of a step's inference in a cluster of many executors.

The decoding mode is the card's: ``sample`` draws from the softmaxes with a generator seeded by
the card's seed at every ``decide()`` (so a snapshot always gets the same decision), ``argmax``
is greedy.  A :class:`DecimaPolicy` holds that generator: use one per concurrent ``decide()``
(:meth:`DagOnnxModel.policy` is cheap; the session is shared and thread-safe).  Inference is
CPU-bound: call ``decide()`` off the event loop.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort

from app.domains.dag.decima import F32, DecimaObs, DecimaPolicy
from app.domains.dag.domain import FEATURE_SCHEMA_VERSION
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
    "DAG_DOMAIN",
    "DECODING_MODES",
    "INPUTS",
    "OUTPUTS",
    "DagOnnxModel",
    "is_dag_card",
    "load_dag_model",
    "load_dag_policy",
    "read_dag_model",
]

DAG_DOMAIN: Final = "dag"
DECODING_MODES: Final = ("sample", "argmax")
#: input name -> (onnxruntime type, rank)
INPUTS: Final = {
    "x": ("tensor(float)", 3),
    "adj": ("tensor(float)", 3),
    "stage_mask": ("tensor(bool)", 2),
    "select_mask": ("tensor(bool)", 2),
    "job_mask": ("tensor(bool)", 1),
    "exec_mask": ("tensor(bool)", 2),
}
OUTPUTS: Final = {"stage_logits": ("tensor(float)", 2), "exec_logits": ("tensor(float)", 2)}
#: (jobs, stages, executors) of the two probe observations
PROBE_SHAPES: Final = ((2, 3, 4), (1, 1, 1))
PROBE_SEED: Final = 20261202
#: the inputs of the stage graph of a split model (:func:`_split`)
STAGE_INPUTS: Final = ("x", "adj", "stage_mask", "select_mask", "job_mask")

logger = logging.getLogger(__name__)


def is_dag_card(card: Any) -> bool:
    """Whether a parsed card says ``"domain": "dag"``."""
    return isinstance(card, dict) and card.get("domain") == DAG_DOMAIN


def _parse_card(raw_bytes: bytes) -> tuple[dict[str, Any], Literal["sample", "argmax"], int]:
    raw = parse_domain_card(raw_bytes, domain=DAG_DOMAIN, schema_version=FEATURE_SCHEMA_VERSION)
    decoding = raw.get("decoding")
    if not isinstance(decoding, dict):
        refuse("card.json needs a decoding object ({'mode': 'sample' | 'argmax'})")
    mode = decoding.get("mode")
    if mode not in DECODING_MODES:
        refuse(f"card decoding.mode must be one of {list(DECODING_MODES)}, got {mode!r}")
    seed = decoding.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        refuse(f"card decoding.seed must be an integer >= 0, got {seed!r}")
    return raw, cast(Literal["sample", "argmax"], mode), seed


def _check_signature(session: ort.InferenceSession) -> None:
    inputs = {a.name: a for a in session.get_inputs()}
    outputs = {a.name: a for a in session.get_outputs()}
    if sorted(inputs) != sorted(INPUTS):
        refuse(
            f"inputs are {sorted(inputs)}, expected {sorted(INPUTS)}",
            RefusalReason.SIGNATURE_MISMATCH,
        )
    missing = [name for name in OUTPUTS if name not in outputs]
    if missing:
        refuse(
            f"outputs are {sorted(outputs)}, missing {missing}", RefusalReason.SIGNATURE_MISMATCH
        )
    for name, (dtype, rank) in {**INPUTS, **OUTPUTS}.items():
        arg = inputs[name] if name in inputs else outputs[name]
        shape = list(arg.shape)
        if arg.type != dtype or len(shape) != rank:
            refuse(
                f"{name} is {arg.type}{shape}, expected {dtype} of rank {rank}",
                RefusalReason.SIGNATURE_MISMATCH,
            )
    if list(inputs["x"].shape)[-1] != 5:
        refuse(
            f"x has {list(inputs['x'].shape)[-1]!r} features per stage, the encoder makes 5",
            RefusalReason.SIGNATURE_MISMATCH,
        )


@dataclass(frozen=True, slots=True)
class SplitGraphs:
    """A model's two heads as two sessions (:func:`_split`)."""

    stage: ort.InferenceSession
    exec: ort.InferenceSession
    #: the names of the two pooled summaries, outputs of ``stage`` and inputs of ``exec``
    h_dag: str
    h_glob: str

    def stage_logits(self, obs: DecimaObs) -> tuple[F32, object]:
        stage, h_dag, h_glob = self.stage.run(
            ["stage_logits", self.h_dag, self.h_glob],
            {
                "x": np.ascontiguousarray(obs.x, dtype=np.float32),
                "adj": np.ascontiguousarray(obs.adj, dtype=np.float32),
                "stage_mask": obs.stage_mask,
                "select_mask": obs.select_mask,
                "job_mask": obs.job_mask,
            },
        )
        return np.asarray(stage, dtype=np.float32), (h_dag, h_glob)

    def exec_row(self, obs: DecimaObs, j: int, context: object) -> F32:
        h_dag, h_glob = cast(tuple[Any, Any], context)
        (row,) = self.exec.run(
            ["exec_logits"],
            {
                "x": np.ascontiguousarray(obs.x[j : j + 1], dtype=np.float32),
                self.h_dag: h_dag[j : j + 1],
                self.h_glob: h_glob,
                "exec_mask": obs.exec_mask[j : j + 1],
            },
        )
        out: F32 = np.asarray(row, dtype=np.float32)[0]
        return out


@dataclass(frozen=True, slots=True)
class _Staged:
    """:class:`~app.domains.dag.decima.StagedScorer` of a split model."""

    graphs: SplitGraphs

    def stage(self, obs: DecimaObs) -> tuple[F32, object]:
        return self.graphs.stage_logits(obs)

    def exec_row(self, obs: DecimaObs, j: int, context: object) -> F32:
        return self.graphs.exec_row(obs, j, context)


@dataclass(frozen=True, slots=True)
class DagOnnxModel:
    """A validated DAG model: its session, card, decoding mode and digest, and its two heads
    as separate graphs when the model could be split (:func:`_split`)."""

    session: ort.InferenceSession
    card: dict[str, Any]
    mode: Literal["sample", "argmax"]
    seed: int
    sha256: str
    path: Path | None = None
    split: SplitGraphs | None = None

    @property
    def name(self) -> str:
        return str(self.card["name"])

    @property
    def version(self) -> str:
        return str(self.card["version"])

    def logits(self, obs: DecimaObs) -> tuple[F32, F32]:
        """``(stage_logits [J, S], exec_logits [J, E])`` of one ``dag-v1`` observation."""
        stage, execs = self.session.run(
            list(OUTPUTS),
            {
                "x": np.ascontiguousarray(obs.x, dtype=np.float32),
                "adj": np.ascontiguousarray(obs.adj, dtype=np.float32),
                "stage_mask": obs.stage_mask,
                "select_mask": obs.select_mask,
                "job_mask": obs.job_mask,
                "exec_mask": obs.exec_mask,
            },
        )
        return np.asarray(stage, dtype=np.float32), np.asarray(execs, dtype=np.float32)

    def policy(self, *, seed: int | None = None) -> DecimaPolicy:
        """A policy deciding with this model in the card's decoding mode (``seed``: the
        sampling seed, default the card's)."""
        return DecimaPolicy(
            mode=self.mode,
            seed=self.seed if seed is None else seed,
            name=self.name,
            scorer=self.logits,
            staged=None if self.split is None else _Staged(self.split),
        )


def _probe_obs(jobs: int, stages: int, execs: int, rng: np.random.Generator) -> DecimaObs:
    adj = np.zeros((jobs, stages, stages), np.float32)
    if stages > 1:
        adj[:, 0, 1:] = 1.0  # stage 0 the parent of the others
    select = np.zeros((jobs, stages), bool)
    select[:, -1] = True
    return DecimaObs(
        x=rng.random((jobs, stages, 5), dtype=np.float32),
        adj=adj,
        stage_mask=np.ones((jobs, stages), bool),
        select_mask=select,
        job_mask=np.ones(jobs, bool),
        exec_mask=np.ones((jobs, execs), bool),
    )


def _probe(model: DagOnnxModel) -> None:
    rng = np.random.default_rng(PROBE_SEED)
    for jobs, stages, execs in PROBE_SHAPES:
        obs = _probe_obs(jobs, stages, execs, rng)
        label = f"probe {jobs}x{stages}x{execs}"
        try:
            stage, exec_ = model.logits(obs)
        except Exception as exc:  # onnxruntime raises assorted types
            raise PolicyRefusedError(RefusalReason.PROBE_FAILED, f"{label}: {exc}") from exc
        if stage.shape != (jobs, stages) or exec_.shape != (jobs, execs):
            refuse(
                f"{label} gave {list(stage.shape)} and {list(exec_.shape)}",
                RefusalReason.PROBE_FAILED,
            )
        finite = np.isfinite(stage[obs.select_mask]).all() and np.isfinite(exec_).all()
        if not finite:
            refuse(f"{label} gave non-finite logits", RefusalReason.NON_FINITE_PROBE)


def load_dag_model(
    model: bytes, card: bytes, *, options: RuntimeOptions | None = None, path: Path | None = None
) -> DagOnnxModel:
    """Validate and load a DAG model from memory; raises :class:`PolicyRefusedError`."""
    raw, mode, seed = _parse_card(card)
    session = open_session(model, options, schema_version=FEATURE_SCHEMA_VERSION)
    _check_signature(session)
    loaded = DagOnnxModel(session, raw, mode, seed, hashlib.sha256(model).hexdigest(), path)
    _probe(loaded)
    split = _split(model, options)
    if split is not None and _same_logits(loaded, split):
        loaded = dataclasses.replace(loaded, split=split)
    return loaded


def _pooled(graph: onnx.GraphProto) -> tuple[str, str] | None:
    """``(h_dag, h_glob)``: the outputs of the ``ReduceSum`` over a ``Where`` masked by
    ``Unsqueeze(stage_mask)`` and by ``Unsqueeze(job_mask)``, when the graph has exactly one
    of each."""
    made = {out: node for node in graph.node for out in node.output}
    found: dict[str, list[str]] = {"stage_mask": [], "job_mask": []}
    for node in graph.node:
        where = made.get(node.input[0]) if node.op_type == "ReduceSum" and node.input else None
        if where is None or where.op_type != "Where" or not where.input:
            continue
        cond = made.get(where.input[0])
        if cond is not None and cond.op_type == "Unsqueeze" and cond.input[0] in found:
            found[cond.input[0]].append(node.output[0])
    if len(found["stage_mask"]) != 1 or len(found["job_mask"]) != 1:
        return None
    return found["stage_mask"][0], found["job_mask"][0]


def _split(model: bytes, options: RuntimeOptions | None) -> SplitGraphs | None:
    """The stage and executor graphs of ``model`` (see the module doc), or ``None`` when it
    does not have the dense network's shape."""
    try:
        proto = onnx.load_from_string(model)
        names = _pooled(proto.graph)
        if names is None:
            return None
        h_dag, h_glob = names
        known = {v.name for v in proto.graph.value_info}
        for name in names:
            if name not in known:
                proto.graph.value_info.append(
                    onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                )
        extractor = onnx.utils.Extractor(proto)
        stage = extractor.extract_model(list(STAGE_INPUTS), ["stage_logits", h_dag, h_glob])
        exec_ = extractor.extract_model(["x", h_dag, h_glob, "exec_mask"], ["exec_logits"])
        return SplitGraphs(
            open_session(stage.SerializeToString(), options, schema_version=FEATURE_SCHEMA_VERSION),
            open_session(exec_.SerializeToString(), options, schema_version=FEATURE_SCHEMA_VERSION),
            h_dag,
            h_glob,
        )
    except Exception as exc:  # onnx and onnxruntime raise assorted types; the whole graph serves
        logger.warning("DAG model not split, the whole graph decides: %r", exc)
        return None


def _same_logits(model: DagOnnxModel, split: SplitGraphs) -> bool:
    """The split graphs give the whole graph's logits on the probe observations (every job's
    executor row)."""
    rng = np.random.default_rng(PROBE_SEED)
    for jobs, stages, execs in PROBE_SHAPES:
        obs = _probe_obs(jobs, stages, execs, rng)
        stage, exec_ = model.logits(obs)
        got, context = split.stage_logits(obs)
        if got.shape != stage.shape or not np.allclose(got, stage, atol=1e-6):
            return False
        for j in range(jobs):
            if not np.allclose(split.exec_row(obs, j, context), exec_[j], atol=1e-6):
                return False
    return True


def read_dag_model(model_dir: Path, *, options: RuntimeOptions | None = None) -> DagOnnxModel:
    """The validated model of ``model_dir`` (``policy.onnx`` + ``card.json``)."""
    model, card = read_model_dir(model_dir)
    return load_dag_model(model, card, options=options, path=model_dir)


def load_dag_policy(
    model_dir: Path, *, options: RuntimeOptions | None = None, seed: int | None = None
) -> DecimaPolicy:
    """The learned DAG policy of ``model_dir``, named by its card and decoding in the card's
    mode; raises :class:`PolicyRefusedError`."""
    return read_dag_model(model_dir, options=options).policy(seed=seed)
