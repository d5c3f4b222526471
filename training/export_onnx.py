"""Export a trained kernel policy (a ``training/ppo.py`` checkpoint) to ONNX plus ``card.json``.

The graph is written node by node with the ``onnx`` helper API rather than through
``torch.onnx.export``: the kernel actor is a plain stack of ``Linear``/``ReLU`` layers applied to
every candidate row, so the graph is small, deterministic (same weights -> same bytes) and does not
depend on the TorchScript exporter that torch 2.x deprecates (ADR 0065).

Contract (the policy tensor contract of ``app/domains/hpc/encoding.py``)::

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

from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES
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
    hyper = training.get("hyperparameters", {})
    init = hyper.get("init_checkpoint")
    if init and "initialised_from" not in training and Path(init).is_file():
        _, init_meta = load_checkpoint(Path(init))
        training["initialised_from"] = {"checkpoint": init, **init_meta.get("training", {})}
    total, link = 0.0, training
    while link:
        total += float(link.get("training_time_s", 0.0))
        link = link.get("initialised_from", {})
    training["training_time_total_s"] = round(total, 1)
    seeds: dict[str, Any] = {"training": training.get("seed")}
    if "initialised_from" in training:
        seeds["initialisation"] = training["initialised_from"].get("seed")
    seeds["evaluation_protocol"] = hyper.get("eval_seed")
    return {
        "training": training,
        "seeds": seeds,
        "metrics": {"validation_bsld": training.get("validation_bsld")},
    }


def export_policy(
    checkpoint: Path,
    out: Path,
    *,
    name: str,
    version: str,
    evaluate_traces: Sequence[str] = (),
    evaluate_service: bool = False,
    card_extra: Mapping[str, Any] | None = None,
) -> Path:
    """Export ``checkpoint`` to ``out``; with ``evaluate_traces``, evaluate the written ONNX file
    against the heuristics on the paper's protocol and record the table in the card."""
    from training.evaluate import (
        evaluate,
        heuristic_picker,
        markdown,
        onnx_picker,
        service_policy,
    )
    from training.hpc_env import HEURISTIC_NAMES

    agent, meta = load_checkpoint(checkpoint)
    fields = card_fields_from_meta(meta)
    fields["training"]["checkpoint"] = str(checkpoint)
    fields.update(card_extra or {})
    onnx_path = write_policy(agent, out, name=name, version=version, card_fields=fields)
    if evaluate_traces:
        if evaluate_service:
            services = {h: service_policy(h) for h in HEURISTIC_NAMES}
            services[name] = service_policy(name, out)
            rows = evaluate(evaluate_traces, {}, service_policies=services)
            engine = (
                "app.domains.hpc.simulate with the service's decide() and OnnxPolicy (--service)"
            )
        else:
            pickers = {h: heuristic_picker(h) for h in HEURISTIC_NAMES}
            pickers[name] = onnx_picker(onnx_path)
            rows = evaluate(evaluate_traces, pickers)
            engine = "training/hpc_env.py (the engine env) with onnxruntime"
        table = markdown(rows)
        print(table)
        card = json.loads((out / "card.json").read_text())
        card["metrics"]["evaluation"] = {
            "protocol": "hpc-reproduction.md A.9 windows (seed 1, 10 x 1024 jobs, empty cluster), "
            "kairos semantics, average bounded slowdown (tau 10 s), greedy decoding of this "
            f"policy.onnx; engine: {engine}; command: python -m training.evaluate --model "
            f"{out}" + (" --service" if evaluate_service else ""),
            "table_markdown": table,
            "starts": rows[0]["starts"],
            "rows": [{k: v for k, v in r.items() if k != "starts"} for r in rows],
        }
        (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return onnx_path


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
    evaluate: tuple[str, ...] = ()
    """traces on which to evaluate the exported policy (paper's protocol) for the card"""
    service: bool = False
    """evaluate through app.domains.hpc.simulate and the service's OnnxPolicy instead of the
    training env"""
    card_extra: str | None = None
    """optional JSON file whose keys are merged into the card"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(ExportArgs, args=list(sys.argv[1:] if argv is None else argv))
    extra = None if args.card_extra is None else json.loads(Path(args.card_extra).read_text())
    path = export_policy(
        Path(args.checkpoint),
        Path(args.out),
        name=args.name,
        version=args.version,
        evaluate_traces=args.evaluate,
        evaluate_service=args.service,
        card_extra=extra,
    )
    print(f"wrote {path} and {path.with_name('card.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
