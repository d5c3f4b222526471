"""torch vs onnxruntime parity of the exported kernel policy, on fixed inputs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from app.domains.hpc.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES  # noqa: E402
from training.export_onnx import build_model, write_policy  # noqa: E402
from training.ppo import MASKED_LOGIT, Agent, last_linear, load_checkpoint, save_checkpoint  # noqa: E402

TOLERANCE = 1e-4


def _agent(seed: int) -> Agent:
    torch.manual_seed(seed)
    agent = Agent(NUM_FEATURES, (32, 16, 8), (32, 32), (64, 32))
    # the last actor layer starts near zero (gain 0.01); give it weights of normal size so that
    # the parity check compares logits of a realistic magnitude
    with torch.no_grad():
        last_linear(agent.actor).weight.normal_(0.0, 1.0)
        last_linear(agent.actor).bias.fill_(0.25)
    return agent.eval()


def _inputs(batch: int, queue: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.random((batch, queue, NUM_FEATURES), dtype=np.float32)
    mask = rng.random((batch, queue)) < 0.6
    mask[:, 0] = True  # every item has a pickable row
    return obs, mask


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


@pytest.mark.parametrize(("batch", "queue"), [(1, 1), (1, 7), (4, 128), (9, 300)])
def test_logits_match_torch_for_dynamic_batch_and_queue(batch: int, queue: int) -> None:
    agent = _agent(seed=3)
    session = _session(build_model(agent))
    obs, mask = _inputs(batch, queue, seed=batch * 1000 + queue)

    (onnx_logits,) = session.run(["logits"], {"obs": obs, "action_mask": mask})
    with torch.no_grad():
        torch_logits = agent.logits(torch.from_numpy(obs), torch.from_numpy(mask)).numpy()

    assert onnx_logits.shape == (batch, queue)
    assert onnx_logits.dtype == np.float32
    assert float(np.max(np.abs(onnx_logits - torch_logits))) < TOLERANCE
    # the unmasked logits are not trivially equal (a real comparison, not constants)
    assert float(np.std(torch_logits[mask])) > 1e-3 or mask.sum() == 1
    assert np.all(onnx_logits[~mask] == np.float32(MASKED_LOGIT))


def test_masked_rows_never_win_the_argmax() -> None:
    agent = _agent(seed=5)
    session = _session(build_model(agent))
    obs, mask = _inputs(16, 64, seed=11)
    (logits,) = session.run(["logits"], {"obs": obs, "action_mask": mask})
    picks = logits.argmax(axis=1)
    assert mask[np.arange(16), picks].all()


def test_graph_signature_and_metadata() -> None:
    model = build_model(_agent(seed=1), metadata={"name": "hpc-kernel", "version": "7"})
    props = {p.key: p.value for p in model.metadata_props}
    assert props["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert props["version"] == "7"
    assert model.opset_import[0].version == 17
    obs, mask = model.graph.input
    (logits,) = model.graph.output
    assert (obs.name, mask.name, logits.name) == ("obs", "action_mask", "logits")
    obs_dims = obs.type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in obs_dims] == ["B", "N", NUM_FEATURES]
    assert mask.type.tensor_type.elem_type == onnx.TensorProto.BOOL


def test_export_is_deterministic_and_round_trips_through_a_checkpoint(tmp_path) -> None:
    agent = _agent(seed=9)
    save_checkpoint(tmp_path / "a.pt", agent, {"training": {"seed": 9}})
    reloaded, meta = load_checkpoint(tmp_path / "a.pt")
    assert meta["training"]["seed"] == 9
    path_a = write_policy(agent, tmp_path / "a", name="hpc-kernel", version="1", card_fields={})
    path_b = write_policy(reloaded, tmp_path / "b", name="hpc-kernel", version="1", card_fields={})
    assert path_a.read_bytes() == path_b.read_bytes()
