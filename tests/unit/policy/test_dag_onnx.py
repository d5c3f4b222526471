"""Learned DAG policies from ONNX (app/policy/dag_onnx.py): the shipped ``dag-v1`` model loads,
its logits equal the numpy forward pass of its own weights, it decides snapshots through the
domain's decision function and runs in the simulator; refused models say why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from app.domains.dag.decima import DecimaObs, DecimaPolicy, DecimaWeights, decima_forward, encode
from app.domains.dag.decision import decide
from app.domains.dag.domain import FEATURE_SCHEMA_VERSION
from app.domains.dag.policy import Action, RoundView
from app.domains.dag.simulate import SimConfig, run_episode
from app.domains.dag.types import DagClusterState, DagSpec, DagState, StageProgress, StageSpec
from app.policy.dag_onnx import (
    DagOnnxModel,
    is_dag_card,
    load_dag_model,
    load_dag_policy,
    read_dag_model,
)
from app.policy.onnx_policy import PolicyRefusedError, RefusalReason, RuntimeOptions
from app.policy.registry import PolicyRegistry
from sim.dag_data import load_decima, load_tpch
from training.dag_export import build_onnx, weights_from_onnx

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "models" / "dag-v1" / "1"


@pytest.fixture(scope="module")
def shipped() -> DagOnnxModel:
    return read_dag_model(SHIPPED)


@pytest.fixture(scope="module")
def shipped_weights() -> DecimaWeights:
    return DecimaWeights(weights_from_onnx(onnx.load(str(SHIPPED / "policy.onnx"))))


class Recorder:
    name = "recorder"

    def __init__(self, inner: DecimaPolicy) -> None:
        self.inner = inner
        self.obs: list[DecimaObs] = []

    def reset(self) -> None:
        self.inner.reset()

    def choose(self, view: RoundView) -> Action | None:
        self.obs.append(encode(view))
        return self.inner.choose(view)


@pytest.fixture(scope="module")
def recorded(shipped: DagOnnxModel) -> list[DecimaObs]:
    rec = Recorder(shipped.policy(seed=3))
    run_episode(
        load_tpch(),
        SimConfig("kairos", 10),
        rec,
        seed=77,
        num_init=1,
        num_stream=7,
        interval_ms=25_000.0,
    )
    obs = rec.obs[::6][:40]
    assert max(o.height for o in obs) >= 3
    assert max(o.stage_mask.shape[0] for o in obs) >= 3
    return obs


def test_shipped_card_fields() -> None:
    card = json.loads((SHIPPED / "card.json").read_text())
    assert is_dag_card(card)
    assert card["name"] == "dag-v1"
    assert card["version"] == "1"
    assert card["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert card["decoding"]["mode"] in ("sample", "argmax")
    assert card["features"]["normalisers"] == {
        "num_tasks": 200.0,
        "work_ms": 1e5,
        "executors": "N",
    }
    env = card["training"]["environment"]
    assert (env["semantics"], env["executors"], env["jobs"]) == ("kairos", 50, 200)
    assert env["arrival_interval_s"] == 25.0
    assert env["time_limit_mean_s"] == 20_000.0
    assert card["training"]["warm_start"]
    lo, hi = card["seeds"]["training_sequences"]
    assert not any(lo <= s <= hi for s in card["seeds"]["validation"])
    assert not any(lo <= s <= hi for s in range(0, 20))  # the evaluation seeds of docs/results.md
    assert card["validation"]["seeds"] == card["seeds"]["validation"]
    assert 0 < card["validation"]["ratio_to_fair"] < 2


def test_shipped_model_loads_in_the_cards_mode(shipped: DagOnnxModel) -> None:
    card = json.loads((SHIPPED / "card.json").read_text())
    assert shipped.name == "dag-v1"
    assert shipped.mode == card["decoding"]["mode"]
    policy = load_dag_policy(SHIPPED)
    assert isinstance(policy, DecimaPolicy)
    assert policy.mode == shipped.mode
    assert policy.name == "dag-v1"


def test_onnx_logits_equal_the_numpy_forward(
    shipped: DagOnnxModel, shipped_weights: DecimaWeights, recorded: list[DecimaObs]
) -> None:
    worst = 0.0
    for obs in recorded:
        s_ref, e_ref = decima_forward(shipped_weights, obs)
        s_onnx, e_onnx = shipped.logits(obs)
        sel = obs.select_mask
        worst = max(worst, float(np.abs(s_onnx[sel] - s_ref[sel]).max(initial=0.0)))
        worst = max(worst, float(np.abs(e_onnx[obs.exec_mask] - e_ref[obs.exec_mask]).max()))
        np.testing.assert_array_equal(s_onnx[~sel] < -1e8, True)
    assert worst <= 1e-5


def _snapshot() -> DagClusterState:
    a = DagSpec(
        "etl",
        (
            StageSpec("read", 4, 2.0),
            StageSpec("join", 2, 5.0, depends_on=("read",)),
            StageSpec("write", 1, 1.0, depends_on=("join",)),
        ),
        submit_time=0.0,
    )
    b = DagSpec("adhoc", (StageSpec("scan", 6, 1.0),), submit_time=1.0)
    return DagClusterState(
        now=10.0,
        executors=8,
        free_slots=6,
        dags=(
            DagState(a, (StageProgress("read", launched=2, finished=0, running=2),)),
            DagState(b),
        ),
    )


def test_the_shipped_model_decides_a_snapshot(shipped: DagOnnxModel) -> None:
    state = _snapshot()
    first = decide(state, shipped.policy())
    again = decide(state, shipped.policy())
    assert first == again  # the card's seed at every decide(): a snapshot gets one decision
    assert first.policy == "dag-v1"
    granted = sum(g.slots for g in (*first.allocations, *first.reservations))
    assert granted + first.idle_slots == 6
    by_stage = {(g.dag_id, g.stage_id): g.slots for g in (*first.allocations, *first.reservations)}
    assert by_stage.get(("etl", "read"), 0) <= 2  # demand: 4 tasks - 2 launched
    assert by_stage.get(("adhoc", "scan"), 0) <= 6
    assert ("etl", "write") not in by_stage  # its parent is not saturated


def _write(tmp: Path, card_changes: dict[str, Any], model: bytes | None = None) -> Path:
    card = json.loads((SHIPPED / "card.json").read_text())
    card.update(card_changes)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "card.json").write_text(json.dumps(card))
    (tmp / "policy.onnx").write_bytes(
        model if model is not None else (SHIPPED / "policy.onnx").read_bytes()
    )
    return tmp


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"domain": "hpc"}, RefusalReason.INVALID_CARD),
        ({"feature_schema_version": "dag-v0"}, RefusalReason.SCHEMA_VERSION_MISMATCH),
        ({"decoding": {"mode": "beam"}}, RefusalReason.INVALID_CARD),
        ({"decoding": {"mode": "sample", "seed": -1}}, RefusalReason.INVALID_CARD),
        ({"decoding": "sample"}, RefusalReason.INVALID_CARD),
        ({"name": ""}, RefusalReason.INVALID_CARD),
    ],
)
def test_bad_cards_are_refused(
    tmp_path: Path, changes: dict[str, Any], reason: RefusalReason
) -> None:
    with pytest.raises(PolicyRefusedError) as err:
        load_dag_policy(_write(tmp_path / "m", changes))
    assert err.value.reason == reason


def test_a_graph_of_another_signature_is_refused(tmp_path: Path) -> None:
    hpc = onnx.load(str(ROOT / "models" / "hpc-kernel" / "3" / "policy.onnx"))
    del hpc.metadata_props[:]  # else refused for its feature schema first
    with pytest.raises(PolicyRefusedError) as err:
        load_dag_policy(_write(tmp_path / "m", {}, model=hpc.SerializeToString()))
    assert err.value.reason == RefusalReason.SIGNATURE_MISMATCH


def test_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyRefusedError) as err:
        load_dag_policy(tmp_path)
    assert err.value.reason == RefusalReason.MODEL_MISSING


def test_the_decima_export_loads_and_decides_like_the_numpy_policy(tmp_path: Path) -> None:
    """The V5 export (the shipped Decima weights) through the same loader: the same episode as
    the numpy policy with the same seed."""
    card = json.loads((SHIPPED / "card.json").read_text())
    card.update({"name": "decima", "decoding": {"mode": "sample", "seed": 0}})
    model = load_dag_model(
        build_onnx(dict(load_decima().tensors)).SerializeToString(), json.dumps(card).encode()
    )
    lib = load_tpch()
    cfg = SimConfig("kairos", 10)
    kw: dict[str, Any] = {"seed": 4, "num_init": 1, "num_stream": 5, "interval_ms": 25_000.0}
    got = run_episode(lib, cfg, model.policy(seed=9), **kw)
    ref = run_episode(lib, cfg, DecimaPolicy(load_decima(), seed=9), **kw)
    np.testing.assert_array_equal(got.completion_ms, ref.completion_ms)


def test_the_registry_loads_a_dag_model_for_dag_clusters(tmp_path: Path) -> None:
    shutil.copytree(SHIPPED, tmp_path / "dag-v1" / "1")
    registry = PolicyRegistry(tmp_path, RuntimeOptions())
    (entry,) = registry.discover()
    assert (entry.name, entry.version, entry.domain) == ("dag-v1", "1", "dag")
    assert entry.loaded
    assert entry.policy is None  # not an hpc policy
    assert entry.dag is not None
    assert entry.dag.mode == json.loads((SHIPPED / "card.json").read_text())["decoding"]["mode"]
    assert "dag" in (entry.message or "")
    _write(tmp_path / "dag-bad" / "1", {"decoding": {"mode": "beam"}})
    bad = next(e for e in registry.discover() if e.name == "dag-bad")
    assert not bad.loaded
    assert bad.reason == RefusalReason.INVALID_CARD


def test_the_shipped_model_is_split_and_its_heads_apart_equal_the_whole_graph(
    shipped: DagOnnxModel, recorded: list[DecimaObs]
) -> None:
    """The stage graph gives the whole graph's stage logits, and the executor graph on one job
    row that row of the whole graph's executor logits, on observations of a real episode."""
    split = shipped.split
    assert split is not None
    for obs in recorded:
        stage, execs = shipped.logits(obs)
        got, context = split.stage_logits(obs)
        np.testing.assert_allclose(got, stage, atol=1e-6)
        for j in range(obs.stage_mask.shape[0]):
            np.testing.assert_allclose(split.exec_row(obs, j, context), execs[j], atol=1e-6)


def _wide_round(jobs: int, free: int, seed: int) -> DagClusterState:
    rng = np.random.default_rng(seed)
    dags = []
    for i in range(jobs):
        n = int(rng.integers(2, 8))
        stages = tuple(
            StageSpec(
                f"s{k}",
                int(rng.integers(1, 30)),
                float(rng.uniform(1.0, 20.0)),
                depends_on=tuple(f"s{p}" for p in range(k) if rng.random() < 0.4),
            )
            for k in range(n)
        )
        dags.append(DagState(DagSpec(f"d{i}", stages, submit_time=float(i))))
    return DagClusterState(now=100.0, executors=free, free_slots=free, dags=tuple(dags))


@pytest.mark.parametrize("mode", ["sample", "argmax"])
def test_a_round_decided_with_the_heads_apart_is_the_whole_graphs_decision(
    shipped: DagOnnxModel, mode: str
) -> None:
    """Scoring the executor head for the chosen job alone changes no decision: a round of 40
    DAGs on 300 free slots, in both decoding modes."""
    state = _wide_round(40, 300, seed=5)
    apart = shipped.policy()
    assert apart.staged is not None
    apart.mode = mode  # type: ignore[assignment]
    whole = DecimaPolicy(mode=apart.mode, seed=apart.seed, name=apart.name, scorer=shipped.logits)
    decided = decide(state, apart)
    assert decided == decide(state, whole)
    assert decided.allocations


def test_the_split_needs_exactly_one_summary_of_each_kind() -> None:
    """The split finds the two pooled summaries by structure; a graph without a job-masked sum
    is not split (it is then served whole, as any model the split does not recognise)."""
    from app.policy.dag_onnx import _pooled

    proto = onnx.load(str(SHIPPED / "policy.onnx"))
    assert _pooled(proto.graph) is not None
    for node in proto.graph.node:
        if node.op_type == "Unsqueeze" and node.input[0] == "job_mask":
            node.input[0] = "stage_mask"  # two stage-masked sums, no job-masked one
            break
    assert _pooled(proto.graph) is None
