"""The ranking scorer of the ES-trained HPC policies, in numpy and as an ONNX graph (no torch).

One per-job scorer (RLScheduler's shared "kernel", A.8; ``decision_mode: rank``, ADR 0065)::

    score = w3 . tanh(W2 tanh(W1 x + b1) + b2) + b3 + v . x

over the encoder's feature rows ``obs[B, N, F]``. A parameter vector ``theta`` is the
concatenation of the arrays of :attr:`Shapes.sizes` in that order. :class:`NumpyRanker` and the
graph of :func:`build_onnx` compute the same float32 operations, so a model scores in the
simulator's engine exactly as the service's ``OnnxRankingPolicy`` scores it (to float32
rounding); :func:`theta_from_onnx` reads the parameters back from such a graph. Used by the ES
trainer (``training/es.py``) and by site tuning (:mod:`app.tuning.procedure`), which must run
where torch is not installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, LogitsArray
from app.domains.hpc.policy import StepView
from app.domains.hpc.types import PolicyRef

FloatArray = npt.NDArray[np.float32]
MASKED_LOGIT = -1.0e9
OPSET = 17
WALLTIME = 1  # column of the walltime feature (encoding.FEATURE_NAMES)


@dataclass(frozen=True)
class Shapes:
    features: int
    hidden: tuple[int, int]

    @property
    def sizes(self) -> list[tuple[str, tuple[int, ...]]]:
        f, (h1, h2) = self.features, self.hidden
        return [
            ("w1", (f, h1)),
            ("b1", (h1,)),
            ("w2", (h1, h2)),
            ("b2", (h2,)),
            ("w3", (h2, 1)),
            ("b3", (1,)),
            ("v", (f, 1)),
        ]

    @property
    def size(self) -> int:
        return sum(math.prod(shape) for _, shape in self.sizes)

    def unpack(self, theta: npt.NDArray[np.float64]) -> dict[str, FloatArray]:
        out: dict[str, FloatArray] = {}
        offset = 0
        for name, shape in self.sizes:
            n = math.prod(shape)
            out[name] = theta[offset : offset + n].reshape(shape).astype(np.float32)
            offset += n
        return out

    def decayed(self) -> npt.NDArray[np.bool_]:
        """Which parameters weight decay applies to (the MLP's, not the linear skip)."""
        flags = [np.full(math.prod(s), name != "v", dtype=np.bool_) for name, s in self.sizes]
        return np.concatenate(flags)


def initial_theta(shapes: Shapes, seed: int) -> npt.NDArray[np.float64]:
    """SJF through the skip (``v = -e_walltime``), a random hidden MLP with a zero output layer."""
    rng = np.random.default_rng(seed)
    parts: list[npt.NDArray[np.float64]] = []
    for name, shape in shapes.sizes:
        if name in ("w1", "w2"):
            parts.append(rng.normal(0.0, 1.0 / math.sqrt(shape[0]), size=shape).ravel())
        elif name == "v":
            v = np.zeros(shape)
            v[WALLTIME, 0] = -1.0
            parts.append(v.ravel())
        else:
            parts.append(np.zeros(math.prod(shape)))
    return np.concatenate(parts)


def shrink_toward_sjf(
    shapes: Shapes, theta: npt.NDArray[np.float64], alpha: float
) -> npt.NDArray[np.float64]:
    """The scorer ``alpha * f(x) + (1 - alpha) * sjf(x)``: the MLP's output layer and the skip
    are blended with SJF's (``v = -e_walltime``), so ``alpha`` = 1 is ``theta`` and 0 is SJF.

    A one-parameter family between a trained model and the heuristic it started from: it trades
    the model's gains for less variance where validation says the model over-reaches.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    sjf = initial_theta(shapes, seed=0)
    out = theta.copy()
    offset = 0
    for name, shape in shapes.sizes:
        n = math.prod(shape)
        part = slice(offset, offset + n)
        if name in ("w3", "b3", "v"):
            out[part] = alpha * theta[part] + (1.0 - alpha) * sjf[part]
        offset += n
    return out


class NumpyRanker:
    """The scorer in numpy (float32, the exported graph's operations) for the simulator engine."""

    def __init__(self, shapes: Shapes, theta: npt.NDArray[np.float64], name: str = "es") -> None:
        self.p = shapes.unpack(theta)
        self._ref = PolicyRef(name=name, version="0", kind="onnx")

    @property
    def ref(self) -> PolicyRef:
        return self._ref

    def rank(self, view: StepView) -> list[int]:  # pragma: no cover - the engine calls score()
        raise NotImplementedError("NumpyRanker runs in the simulator engine only")

    def score(self, obs: FloatArray, mask: npt.NDArray[np.bool_]) -> LogitsArray:
        p = self.p
        h = np.tanh(obs @ p["w1"] + p["b1"])
        h = np.tanh(h @ p["w2"] + p["b2"])
        s = (h @ p["w3"] + p["b3"]) + obs @ p["v"]
        return np.where(mask, s[..., 0], np.float32(MASKED_LOGIT)).astype(np.float32)


def build_onnx(shapes: Shapes, theta: npt.NDArray[np.float64], metadata: dict[str, str]) -> bytes:
    """The scorer as an ONNX graph with the encoder's contract (dynamic ``B`` and ``N``)."""
    p = shapes.unpack(theta)
    init = [numpy_helper.from_array(value, key) for key, value in p.items()]
    init += [
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis"),
        numpy_helper.from_array(np.array(MASKED_LOGIT, dtype=np.float32), "masked"),
    ]
    nodes = [
        helper.make_node("MatMul", ["obs", "w1"], ["a1"]),
        helper.make_node("Add", ["a1", "b1"], ["z1"]),
        helper.make_node("Tanh", ["z1"], ["h1"]),
        helper.make_node("MatMul", ["h1", "w2"], ["a2"]),
        helper.make_node("Add", ["a2", "b2"], ["z2"]),
        helper.make_node("Tanh", ["z2"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w3"], ["a3"]),
        helper.make_node("Add", ["a3", "b3"], ["z3"]),
        helper.make_node("MatMul", ["obs", "v"], ["skip"]),
        helper.make_node("Add", ["z3", "skip"], ["s3"]),
        helper.make_node("Squeeze", ["s3", "last_axis"], ["raw"]),
        helper.make_node("Where", ["action_mask", "raw", "masked"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "hpc_rank_kernel",
        [
            helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["B", "N", shapes.features]),
            helper.make_tensor_value_info("action_mask", TensorProto.BOOL, ["B", "N"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "N"])],
        initializer=init,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kairos-training-es"
    )
    model.ir_version = 8
    helper.set_model_props(model, {"feature_schema_version": FEATURE_SCHEMA_VERSION, **metadata})
    onnx.checker.check_model(model, full_check=True)
    return bytes(model.SerializeToString())


def theta_from_onnx(shapes: Shapes, path: str | Path) -> npt.NDArray[np.float64]:
    """The parameter vector of a ranking model that :func:`build_onnx` exported (float32 exact)."""
    model = onnx.load(str(path))
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    parts: list[npt.NDArray[np.float64]] = []
    for name, shape in shapes.sizes:
        if name not in found:
            raise ValueError(f"{path}: no initializer {name!r}; not an ES ranking model")
        value = found[name]
        if value.shape != shape:
            raise ValueError(f"{path}: {name} has shape {value.shape}, expected {shape}")
        parts.append(value.astype(np.float64).ravel())
    return np.concatenate(parts)


def load_init_params(shapes: Shapes, spec: str) -> npt.NDArray[np.float64]:
    """``best.npz``, a model folder or a ``policy.onnx`` -> the parameter vector (checked size)."""
    path = Path(spec)
    if path.is_dir():
        path = path / "policy.onnx"
    if path.suffix == ".onnx":
        theta = theta_from_onnx(shapes, path)
    else:
        theta = np.load(path)["theta"].astype(np.float64)
    if theta.shape != (shapes.size,):
        raise ValueError(f"{spec}: {theta.shape}, expected ({shapes.size},)")
    return theta
