"""The learned GPU policy from ONNX (app/policy/gpu_onnx.py): the graph computes the network's
numpy forward pass, bad models are refused with a reason, the registry loads a gpu card, and
the shipped ``gpu-v1`` loads and decides."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

torch = pytest.importorskip("torch")

from app.domains.gpu.decide import decide  # noqa: E402
from app.domains.gpu.encoding import FEATURE_SCHEMA_VERSION, NUM_FEATURES  # noqa: E402
from app.domains.gpu.types import ClusterSnapshot, GpuJob, Placement, gpu_node  # noqa: E402
from app.domains.gpu.validation import validate_decision  # noqa: E402
from app.policy.gpu_onnx import load_gpu_model, load_gpu_policy  # noqa: E402
from app.policy.onnx_policy import PolicyRefusedError, RefusalReason  # noqa: E402
from app.policy.registry import PolicyRegistry  # noqa: E402
from training.gpu_ppo import Agent, build_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "models" / "gpu-v1").iterdir())

Arr = npt.NDArray[np.float64]


def _card(**over: Any) -> dict[str, Any]:
    card: dict[str, Any] = {
        "name": "gpu-test",
        "version": "1",
        "domain": "gpu",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "encoding": {"wait_scale_s": 86400.0},
        "window": 64,
    }
    card.update(over)
    return card


def _agent(seed: int = 0, skip: bool = False) -> Any:
    torch.manual_seed(seed)
    agent = Agent(skip=skip)
    with torch.no_grad():  # non-trivial last layer and skip term (training starts them at ~0)
        last = [m for m in agent.actor if isinstance(m, torch.nn.Linear)][-1]
        last.weight.normal_(0.0, 1.0)
        if agent.skip is not None:
            agent.skip.weight.normal_(0.0, 1.0)
    return agent


def _numpy_forward(agent: Any, obs: Arr, mask: npt.NDArray[np.bool_]) -> tuple[Arr, Arr]:
    """The network by hand, from its weights: logits (masked -1e9) and the pooled value."""

    def dense(x: Arr, seq: Any, tanh_last: bool) -> Arr:
        lins = [m for m in seq if isinstance(m, torch.nn.Linear)]
        for i, lin in enumerate(lins):
            x = x @ lin.weight.detach().numpy().T.astype(np.float64) + lin.bias.detach().numpy()
            if i < len(lins) - 1 or tanh_last:
                x = np.tanh(x)
        return x

    raw = dense(obs, agent.actor, False)[..., 0]
    if agent.skip is not None:
        raw = raw + obs @ agent.skip.weight.detach().numpy()[0].astype(np.float64)
    logits = np.where(mask, raw, -1e9)
    emb = dense(obs, agent.embed, True)
    m = mask[..., None].astype(np.float64)
    mean = (emb * m).sum(1) / np.maximum(m.sum(1), 1.0)
    mx = np.where(mask[..., None], emb, -1e9).max(1)
    mx = np.where(np.any(mask, axis=1)[:, None], mx, 0.0)
    value = dense(np.concatenate([mean, mx], -1), agent.critic, False)[..., 0]
    return logits, value


def _write(tmp: Path, model: bytes, card: dict[str, Any]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "policy.onnx").write_bytes(model)
    (tmp / "card.json").write_text(json.dumps(card))
    return tmp


@pytest.mark.parametrize("skip", [False, True], ids=["mlp", "mlp+linear"])
def test_onnx_graph_equals_the_numpy_forward_pass(skip: bool) -> None:
    agent = _agent(skip=skip)
    model = load_gpu_model(build_onnx(agent).SerializeToString(), json.dumps(_card()).encode())
    rng = np.random.default_rng(5)
    for b, k in ((1, 1), (3, 7), (2, 64)):
        obs = rng.random((b, k, NUM_FEATURES)).astype(np.float32)
        mask = rng.random((b, k)) < 0.7
        mask[0, :] = False  # a batch row with no candidate at all
        got = model.logits(obs, mask)
        (value,) = model.session.run(["value"], {"obs": obs, "mask": mask})
        want, want_v = _numpy_forward(agent, obs.astype(np.float64), mask)
        assert got.shape == (b, k)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(value, want_v, rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            t_logits = agent.logits(torch.from_numpy(obs), torch.from_numpy(mask)).numpy()
        np.testing.assert_allclose(got, t_logits, rtol=1e-5, atol=1e-5)


def test_the_policy_decides_with_the_session_scores(tmp_path: Path) -> None:
    agent = _agent(1)
    pol = load_gpu_policy(
        _write(tmp_path / "m", build_onnx(agent).SerializeToString(), _card(window=3))
    )
    assert (pol.name, pol.version, pol.window) == ("gpu-test", "1", 3)
    assert load_gpu_policy(tmp_path / "m", window=500).window == 500
    with pytest.raises(ValueError, match="window"):
        load_gpu_policy(tmp_path / "m", window=0)
    rng = random.Random(2)
    nodes = (gpu_node("n0", 4), gpu_node("n1", 4))
    for _ in range(30):
        jobs = [
            GpuJob(f"j{i}", float(i), rng.choice([1, 2, 4]), rng.choice([1, 2, 4]) + 0)
            for i in range(rng.randint(1, 8))
        ]
        jobs = [GpuJob(j.id, j.arrival, j.min_gpus, j.min_gpus) for j in jobs]
        jobs[0] = GpuJob("j0", 0.0, 2, 2, allocation=(Placement("n1", 2),), attained_gpu_s=5e3)
        s = ClusterSnapshot(50.0, nodes, tuple(jobs))
        d = decide(s, pol)
        validate_decision(s, d)
        assert d.policy.name == "gpu-test"


@pytest.mark.parametrize(
    ("card", "reason"),
    [
        (_card(domain="hpc"), RefusalReason.INVALID_CARD),
        (_card(feature_schema_version="kairos-gpu-v0"), RefusalReason.SCHEMA_VERSION_MISMATCH),
        (_card(window=0), RefusalReason.INVALID_CARD),
        (_card(encoding={"bogus": 1}), RefusalReason.INVALID_CARD),
        ({k: v for k, v in _card().items() if k != "encoding"}, RefusalReason.INVALID_CARD),
    ],
)
def test_bad_cards_are_refused_with_a_reason(card: dict[str, Any], reason: RefusalReason) -> None:
    with pytest.raises(PolicyRefusedError) as info:
        load_gpu_model(build_onnx(_agent()).SerializeToString(), json.dumps(card).encode())
    assert info.value.reason is reason


def test_a_corrupt_model_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyRefusedError) as info:
        load_gpu_model(b"not onnx", json.dumps(_card()).encode())
    assert info.value.reason is RefusalReason.CORRUPT_MODEL
    with pytest.raises(PolicyRefusedError) as info:
        load_gpu_policy(tmp_path)
    assert info.value.reason is RefusalReason.MODEL_MISSING


def test_the_registry_loads_a_gpu_card_as_a_gpu_model(tmp_path: Path) -> None:
    _write(tmp_path / "gpu-test" / "1", build_onnx(_agent()).SerializeToString(), _card())
    _write(
        tmp_path / "gpu-bad" / "1",
        build_onnx(_agent()).SerializeToString(),
        _card(name="gpu-bad", feature_schema_version="x"),
    )
    registry = PolicyRegistry(tmp_path)
    entries = {e.name: e for e in registry.discover()}
    good, bad = entries["gpu-test"], entries["gpu-bad"]
    assert good.loaded
    assert good.gpu is not None
    assert good.policy is None
    assert good.domain == "gpu"
    assert good.reason is None
    assert good.gpu.policy().name == "gpu-test"
    assert not bad.loaded
    assert bad.reason is RefusalReason.SCHEMA_VERSION_MISMATCH
    assert registry.find("gpu-test") is good


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_gpu_model_loads_and_decides(shipped: Path) -> None:
    pol = load_gpu_policy(shipped)
    card = json.loads((shipped / "card.json").read_text())
    assert card["domain"] == "gpu"
    assert card["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert (pol.name, pol.version) == (card["name"], card["version"])
    nodes = tuple(gpu_node(f"n{i}", 4) for i in range(4))
    jobs = (
        GpuJob("r", 0.0, 4, 4, allocation=(Placement("n0", 4),), attained_gpu_s=4e4),
        GpuJob("a", 10.0, 2, 2),
        GpuJob("b", 20.0, 8, 8),
        GpuJob("c", 30.0, 16, 16),
    )
    s = ClusterSnapshot(100.0, nodes, jobs)
    d = decide(s, pol)
    validate_decision(s, d)
    assert d.policy.name == "gpu-v1"
    assert set(d.reasons) == {"r", "a", "b", "c"}
