"""Decima (spark-sched-sim's shipped ``model.pt``): weight conversion, the PyTorch reference
forward pass and the ONNX export of the dense network of :mod:`app.domains.dag.decima`.

* :func:`convert`: the state dict -> ``.npz`` of float32 arrays under the state-dict names (what
  the torch-free simulator and service read);
* :func:`reference_forward`: the port's own procedure in torch, message passing one topological
  generation at a time over the active stages with its per-generation edge masks (the check
  for the dense form);
* :func:`build_onnx`: the dense form written node by node with the ``onnx`` helper API (the
  project's export convention, ADR 0061), ``K`` synchronous iterations unrolled (exact for DAGs
  of height <= K).  Inputs ``x [J, S, 5]``, ``adj [J, S, S]``, ``stage_mask``/``select_mask``
  ``[J, S]`` bool, ``job_mask [J]`` bool, ``exec_mask [J, E]`` bool (E = N, the executor count
  the levels k / N are computed from); outputs ``stage_logits [J, S]``, ``exec_logits [J, E]``.

    python -m training.dag_export --model data/dag/spark_sched_sim_decima_model.pt \
        --npz data/dag/spark_sched_sim_decima.npz --onnx /tmp/decima.onnx
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from app.domains.dag.decima import _MLPS, MASKED_LOGIT, DecimaObs
from app.domains.dag.domain import FEATURE_SCHEMA_VERSION

__all__ = [
    "DEFAULT_K",
    "build_onnx",
    "convert",
    "load_state_dict",
    "reference_forward",
    "weights_from_onnx",
]

OPSET: Final = 17
DEFAULT_K: Final = 16
_LEAK: Final = 0.2


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    sd = torch.load(path, map_location="cpu", weights_only=True)
    return {str(k): v.detach().to(torch.float32) for k, v in sd.items()}


def convert(model_pt: Path, out_npz: Path) -> dict[str, npt.NDArray[np.float32]]:
    """Write the state dict's tensors as float32 arrays (same names) into ``out_npz``."""
    arrays = {k: v.numpy().astype(np.float32) for k, v in load_state_dict(model_pt).items()}
    out_npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out_npz, **arrays)  # type: ignore[arg-type]
    return arrays


def _mlp_t(
    sd: Mapping[str, torch.Tensor], prefix: str, x: torch.Tensor, tanh: bool
) -> torch.Tensor:
    for i in (0, 2, 4):
        x = torch.nn.functional.linear(x, sd[f"{prefix}.{i}.weight"], sd[f"{prefix}.{i}.bias"])
        if i < 4:
            x = torch.tanh(x) if tanh else torch.nn.functional.leaky_relu(x, _LEAK)
    return x


def _generations(num: int, edges: list[tuple[int, int]]) -> list[list[int]]:
    indeg = [0] * num
    succ: list[list[int]] = [[] for _ in range(num)]
    for p, c in edges:
        indeg[c] += 1
        succ[p].append(c)
    level = [v for v in range(num) if indeg[v] == 0]
    out: list[list[int]] = []
    while level:
        out.append(level)
        nxt: list[int] = []
        for v in level:
            for c in succ[v]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    nxt.append(c)
        level = sorted(nxt)
    return out


@torch.no_grad()
def reference_forward(
    sd: Mapping[str, torch.Tensor], obs: DecimaObs
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The port's forward pass on the flattened active stages of ``obs``; logits padded like
    :func:`app.domains.dag.decima.decima_forward`'s."""
    num_j, num_s = obs.stage_mask.shape
    index: list[tuple[int, int]] = [
        (j, s) for j in range(num_j) for s in range(num_s) if obs.stage_mask[j, s]
    ]
    flat = {js: i for i, js in enumerate(index)}
    x = torch.from_numpy(np.stack([obs.x[j, s] for j, s in index]))
    edges = [
        (flat[(j, v)], flat[(j, c)])
        for j in range(num_j)
        for v in range(num_s)
        for c in range(num_s)
        if obs.adj[j, v, c] > 0
    ]
    prep, msg, upd = (_MLPS[k] for k in ("prep", "msg", "update"))
    h_init = _mlp_t(sd, prep, x, tanh=False)
    n = len(index)
    if not edges:
        h = h_init
    else:
        h = torch.zeros_like(h_init)
        parents = {p for p, _ in edges}
        leaves = [v for v in range(n) if v not in parents]
        h[leaves] = _mlp_t(sd, upd, h_init[leaves], tanh=False)
        gens = _generations(n, edges)
        masks = []
        for level in gens[:-1]:
            succ = {c for p, c in edges if p in level}
            keep = set(level) | succ
            masks.append([(p, c) for p, c in edges if p in keep and c in keep])
        for masked in reversed(masks):
            src = sorted({c for _, c in masked})  # children send
            dst = sorted({p for p, _ in masked})  # parents receive
            m = torch.zeros_like(h)
            m[src] = _mlp_t(sd, msg, h[src], tanh=False)
            agg = torch.zeros_like(h)
            for p, c in masked:
                agg[p] += m[c]
            h[dst] = h_init[dst] + _mlp_t(sd, upd, agg[dst], tanh=False)
    job_of = torch.tensor([j for j, _ in index])
    d = _mlp_t(sd, _MLPS["dag"], torch.cat([x, h], 1), tanh=False)
    h_dag = torch.zeros((num_j, d.shape[1])).index_add_(0, job_of, d)
    live = torch.from_numpy(obs.job_mask)
    h_glob = _mlp_t(sd, _MLPS["glob"], h_dag[live], tanh=False).sum(0, keepdim=True)
    stage_in = torch.cat([x, h, h_dag[job_of], h_glob.expand(n, -1)], 1)
    scores = _mlp_t(sd, _MLPS["stage"], stage_in, tanh=True).squeeze(-1)
    stage_logits = np.full((num_j, num_s), MASKED_LOGIT, np.float32)
    for i, (j, s) in enumerate(index):
        if obs.select_mask[j, s]:
            stage_logits[j, s] = float(scores[i])
    e = obs.exec_mask.shape[1]
    first = [
        next(i for i, (jj, _) in enumerate(index) if jj == j)
        for j in range(num_j)
        if any(jj == j for jj, _ in index)
    ]
    exec_logits = np.full((num_j, e), MASKED_LOGIT, np.float32)
    levels = (torch.arange(e, dtype=torch.float32) / e).unsqueeze(1)
    for j, i0 in zip(
        [j for j in range(num_j) if any(jj == j for jj, _ in index)], first, strict=True
    ):
        inp = torch.cat([x[i0, :3], h_dag[j], h_glob[0]]).expand(e, -1)
        sc = _mlp_t(sd, _MLPS["exec"], torch.cat([inp, levels], 1), tanh=True).squeeze(-1)
        exec_logits[j] = np.where(obs.exec_mask[j], sc.numpy(), MASKED_LOGIT)
    return stage_logits, exec_logits


class _Graph:
    def __init__(self, weights: Mapping[str, npt.NDArray[np.float32]]) -> None:
        self.w = weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.count = 0
        self.done: set[str] = set()

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, name: str, value: npt.NDArray[np.generic]) -> str:
        if name not in self.done:
            self.inits.append(numpy_helper.from_array(value, name))
            self.done.add(name)
        return name

    def op(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def mlp(self, mlp: str, x: str, tanh: bool) -> str:
        prefix = _MLPS[mlp]
        for i in (0, 2, 4):
            wt = self.const(f"{prefix}.{i}.wt", self.w[f"{prefix}.{i}.weight"].T.copy())
            b = self.const(f"{prefix}.{i}.bias", self.w[f"{prefix}.{i}.bias"])
            x = self.op("Add", [self.op("MatMul", [x, wt]), b])
            if i < 4:
                x = self.op("Tanh", [x]) if tanh else self.op("LeakyRelu", [x], alpha=_LEAK)
        return x


#: the ``source`` metadata of the shipped weights' export
DECIMA_SOURCE: Final = "spark-sched-sim models/decima/model.pt (MIT)"


def build_onnx(
    weights: Mapping[str, npt.NDArray[np.float32]],
    k: int = DEFAULT_K,
    *,
    source: str = DECIMA_SOURCE,
) -> onnx.ModelProto:
    """The dense graph of ``weights`` (state-dict names); ``source`` says where they come from
    (ONNX metadata)."""
    g = _Graph(weights)
    i64 = np.int64
    zero = g.const("zero_f", np.array(0.0, np.float32))
    masked = g.const("masked_logit", np.array(MASKED_LOGIT, np.float32))
    ax_last = g.const("ax_last", np.array([-1], i64))
    ax1 = g.const("ax1", np.array([1], i64))
    ax0 = g.const("ax0", np.array([0], i64))
    h_init = g.mlp("prep", "x", tanh=False)
    nonleaf = g.op("Greater", [g.op("ReduceSum", ["adj", ax_last], keepdims=1), zero])
    h = g.op("Where", [nonleaf, zero, g.mlp("update", h_init, tanh=False)])
    for _ in range(k):
        agg = g.op("MatMul", ["adj", g.mlp("msg", h, tanh=False)])
        h = g.op("Where", [nonleaf, g.op("Add", [h_init, g.mlp("update", agg, tanh=False)]), h])
    any_edge = g.op("Greater", [g.op("ReduceSum", ["adj"], keepdims=0), zero])
    h = g.op("Where", [any_edge, h, h_init])
    xh = g.op("Concat", ["x", h], axis=-1)
    smask = g.op("Unsqueeze", ["stage_mask", ax_last])
    d = g.op("Where", [smask, g.mlp("dag", xh, tanh=False), zero])
    h_dag = g.op("ReduceSum", [d, ax1], keepdims=0)  # [J, 16]
    jmask = g.op("Unsqueeze", ["job_mask", ax_last])
    gl = g.op("Where", [jmask, g.mlp("glob", h_dag, tanh=False), zero])
    h_glob = g.op("ReduceSum", [gl, ax0], keepdims=1)  # [1, 16]
    shape_h = g.op("Shape", [h])  # [J, S, 16]
    dag_rep = g.op("Expand", [g.op("Unsqueeze", [h_dag, ax1]), shape_h])
    glob_rep = g.op("Expand", [g.op("Unsqueeze", [h_glob, ax0]), shape_h])
    stage_in = g.op("Concat", ["x", h, dag_rep, glob_rep], axis=-1)
    scores = g.op("Squeeze", [g.mlp("stage", stage_in, tanh=True), ax_last])
    g.nodes.append(helper.make_node("Where", ["select_mask", scores, masked], ["stage_logits"]))
    # executor head
    x0 = g.op("Gather", ["x", g.const("idx0", np.array(0, i64))], axis=1)  # [J, 5]
    x0 = g.op(
        "Slice", [x0, g.const("s0", np.array([0], i64)), g.const("s3", np.array([3], i64)), ax_last]
    )
    job_in = g.op("Concat", [x0, h_dag], axis=-1)  # [J, 19]
    mshape = g.op("Shape", ["exec_mask"])  # [J, E]
    e = g.op("Gather", [mshape, g.const("idx1", np.array(1, i64))])
    e_f = g.op("Cast", [e], to=TensorProto.FLOAT)
    levels = g.op(
        "Div",
        [
            g.op(
                "Cast",
                [
                    g.op(
                        "Range",
                        [g.const("r0", np.array(0, i64)), e, g.const("r1", np.array(1, i64))],
                    )
                ],
                to=TensorProto.FLOAT,
            ),
            e_f,
        ],
    )
    j_e = mshape
    shape_je1 = g.op("Concat", [j_e, g.const("one", np.array([1], i64))], axis=0)
    lev = g.op(
        "Expand", [g.op("Unsqueeze", [g.op("Unsqueeze", [levels, ax0]), ax_last]), shape_je1]
    )
    shape_je19 = g.op("Concat", [j_e, g.const("d19", np.array([19], i64))], axis=0)
    shape_je16 = g.op("Concat", [j_e, g.const("d16", np.array([16], i64))], axis=0)
    job_rep = g.op("Expand", [g.op("Unsqueeze", [job_in, ax1]), shape_je19])
    glob_e = g.op("Expand", [g.op("Unsqueeze", [h_glob, ax0]), shape_je16])
    exec_in = g.op("Concat", [job_rep, glob_e, lev], axis=-1)
    escores = g.op("Squeeze", [g.mlp("exec", exec_in, tanh=True), ax_last])
    g.nodes.append(helper.make_node("Where", ["exec_mask", escores, masked], ["exec_logits"]))
    f, b = TensorProto.FLOAT, TensorProto.BOOL
    graph = helper.make_graph(
        g.nodes,
        "dag_decima",
        inputs=[
            helper.make_tensor_value_info("x", f, ["J", "S", 5]),
            helper.make_tensor_value_info("adj", f, ["J", "S", "S"]),
            helper.make_tensor_value_info("stage_mask", b, ["J", "S"]),
            helper.make_tensor_value_info("select_mask", b, ["J", "S"]),
            helper.make_tensor_value_info("job_mask", b, ["J"]),
            helper.make_tensor_value_info("exec_mask", b, ["J", "E"]),
        ],
        outputs=[
            helper.make_tensor_value_info("stage_logits", f, ["J", "S"]),
            helper.make_tensor_value_info("exec_logits", f, ["J", "E"]),
        ],
        initializer=g.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kairos-training"
    )
    model.ir_version = 8
    helper.set_model_props(
        model,
        {
            "feature_schema_version": FEATURE_SCHEMA_VERSION,
            "iterations": str(k),
            "source": source,
        },
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def weights_from_onnx(model: onnx.ModelProto) -> dict[str, npt.NDArray[np.float32]]:
    """The state dict (names and layouts of ``model.pt``) of a graph :func:`build_onnx` wrote."""
    out: dict[str, npt.NDArray[np.float32]] = {}
    prefixes = set(_MLPS.values())
    for t in model.graph.initializer:
        base, _, kind = t.name.rpartition(".")
        if base.rpartition(".")[0] not in prefixes:
            continue
        array = numpy_helper.to_array(t).astype(np.float32)
        if kind == "wt":
            out[f"{base}.weight"] = np.ascontiguousarray(array.T)
        elif kind == "bias":
            out[f"{base}.bias"] = array
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.dag_export", description=__doc__)
    p.add_argument("--model", type=Path, required=True, help="spark-sched-sim model.pt")
    p.add_argument("--npz", type=Path, required=True, help="write the float32 weights here")
    p.add_argument("--onnx", type=Path, help="also write the dense ONNX graph here")
    p.add_argument("--iterations", type=int, default=DEFAULT_K)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    arrays = convert(args.model, args.npz)
    if args.onnx is not None:
        args.onnx.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(build_onnx(arrays, args.iterations), str(args.onnx))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
