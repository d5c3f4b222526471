"""Export a trained kernel policy (a ``training/ppo.py`` checkpoint) to ONNX plus ``card.json``.

The graph is written node by node with the ``onnx`` helper API rather than through
``torch.onnx.export``: the kernel actor is a plain stack of ``Linear``/``ReLU`` layers applied to
every candidate row, so the graph is small, deterministic (same weights -> same bytes) and does not
depend on the TorchScript exporter that torch 2.x deprecates (docs/adr/0061-onnx-export.md).

Contract (``spec/house-style.md`` §9, ``app/domain/encoding.py``)::

    obs          float32[B, N, F]   B and N dynamic, F = encoding.NUM_FEATURES
    action_mask  bool[B, N]
    logits       float32[B, N]      masked rows get MASKED_LOGIT (-1e9)

The feature-schema version is written into the model's ``metadata_props`` and into the card.

    python -m training.export_onnx --checkpoint runs/<run>/best.pt --out models/hpc-kernel/<ver>
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
import tyro
from onnx import TensorProto, helper, numpy_helper

from app.domain.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES
from training.ppo import MASKED_LOGIT, Agent, load_checkpoint

OPSET = 17
INPUT_OBS = "obs"
INPUT_MASK = "action_mask"
OUTPUT_LOGITS = "logits"


def _linear_layers(actor: torch.nn.Sequential) -> list[torch.nn.Linear]:
    layers: list[torch.nn.Linear] = []
    for module in actor:
        if isinstance(module, torch.nn.Linear):
            layers.append(module)
        elif not isinstance(module, torch.nn.ReLU):
            raise TypeError(f"cannot export actor layer {type(module).__name__}")
    return layers


def build_model(
    agent: Agent,
    *,
    metadata: Mapping[str, str] | None = None,
) -> onnx.ModelProto:
    """The ONNX graph of ``agent``'s actor: per-row MLP -> squeeze -> mask."""
    layers = _linear_layers(agent.actor)
    n_features = layers[0].in_features
    initializers: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current = INPUT_OBS
    for k, layer in enumerate(layers):
        weight = layer.weight.detach().cpu().numpy().astype(np.float32).T.copy()  # [in, out]
        bias = layer.bias.detach().cpu().numpy().astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"actor.{k}.weight_t"),
            numpy_helper.from_array(bias, f"actor.{k}.bias"),
        ]
        nodes += [
            helper.make_node("MatMul", [current, f"actor.{k}.weight_t"], [f"h{k}.mm"]),
            helper.make_node("Add", [f"h{k}.mm", f"actor.{k}.bias"], [f"h{k}.lin"]),
        ]
        current = f"h{k}.lin"
        if k < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [current], [f"h{k}.act"]))
            current = f"h{k}.act"
    initializers += [
        numpy_helper.from_array(np.array([2], dtype=np.int64), "squeeze_axes"),
        numpy_helper.from_array(np.array(MASKED_LOGIT, dtype=np.float32), "masked_logit"),
    ]
    nodes += [
        helper.make_node("Squeeze", [current, "squeeze_axes"], ["scores"]),
        helper.make_node("Where", [INPUT_MASK, "scores", "masked_logit"], [OUTPUT_LOGITS]),
    ]
    graph = helper.make_graph(
        nodes,
        "hpc_kernel_policy",
        inputs=[
            helper.make_tensor_value_info(INPUT_OBS, TensorProto.FLOAT, ["B", "N", n_features]),
            helper.make_tensor_value_info(INPUT_MASK, TensorProto.BOOL, ["B", "N"]),
        ],
        outputs=[helper.make_tensor_value_info(OUTPUT_LOGITS, TensorProto.FLOAT, ["B", "N"])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="kairos-training",
        producer_version="1",
    )
    model.ir_version = 8  # readable by every onnxruntime >= 1.14
    props = {"feature_schema_version": FEATURE_SCHEMA_VERSION, **(metadata or {})}
    helper.set_model_props(model, dict(props))
    onnx.checker.check_model(model, full_check=True)
    return model


def io_signature() -> dict[str, Any]:
    """The card's description of the model's inputs and outputs."""
    return {
        "inputs": [
            {"name": INPUT_OBS, "dtype": "float32", "shape": ["B", "N", NUM_FEATURES]},
            {"name": INPUT_MASK, "dtype": "bool", "shape": ["B", "N"]},
        ],
        "outputs": [{"name": OUTPUT_LOGITS, "dtype": "float32", "shape": ["B", "N"]}],
    }


def write_policy(
    agent: Agent,
    out_dir: Path,
    *,
    name: str,
    version: str,
    card_fields: Mapping[str, Any],
) -> Path:
    """Write ``policy.onnx`` and ``card.json`` into ``out_dir``; returns the ONNX path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model = build_model(agent, metadata={"name": name, "version": version})
    onnx_path = out_dir / "policy.onnx"
    onnx.save_model(model, str(onnx_path))
    card: dict[str, Any] = {
        "name": name,
        "version": version,
        "domain": "hpc",
        "kind": "onnx",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        **io_signature(),
        "opset": OPSET,
        **card_fields,
    }
    (out_dir / "card.json").write_text(json.dumps(card, indent=2, sort_keys=False) + "\n")
    return onnx_path


def card_fields_from_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The card's ``training``, ``seeds`` and ``metrics`` entries from a checkpoint's metadata."""
    training = dict(meta.get("training", {}))
    return {
        "training": training,
        "seeds": {"training": training.get("seed")},
        "metrics": {"validation_bsld": training.get("validation_bsld")},
    }


@dataclass
class ExportArgs:
    checkpoint: str
    """path of a ``training/ppo.py`` checkpoint (``*.pt``)"""
    out: str
    """output folder, e.g. ``models/hpc-kernel/1``"""
    name: str = "hpc-kernel"
    """policy name written into the card and the ONNX metadata"""
    version: str = "1"
    """policy version written into the card and the ONNX metadata"""
    card_extra: str | None = None
    """optional JSON file whose keys are merged into the card (e.g. an evaluation table)"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(ExportArgs, args=list(sys.argv[1:] if argv is None else argv))
    agent, meta = load_checkpoint(Path(args.checkpoint))
    fields = card_fields_from_meta(meta)
    if args.card_extra is not None:
        fields.update(json.loads(Path(args.card_extra).read_text()))
    path = write_policy(
        agent, Path(args.out), name=args.name, version=args.version, card_fields=fields
    )
    print(f"wrote {path} and {path.with_name('card.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
