"""The twin with onnxruntime and ``app.domains.hpc.simulate`` with the service's ``OnnxPolicy``
agree exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from app.domains.hpc.encoding import NUM_FEATURES  # noqa: E402
from training.evaluate import (  # noqa: E402
    onnx_picker,
    run_protocol,
    run_protocol_service,
    service_policy,
)
from training.export_onnx import write_policy  # noqa: E402
from training.hpc_env import JobTable  # noqa: E402
from training.ppo import Agent, last_linear  # noqa: E402

TRACE = Path(__file__).resolve().parents[3] / "data" / "lublin_256.swf.gz"


@pytest.mark.parametrize("backfill", [True, False])
def test_twin_and_service_give_the_same_bsld(tmp_path: Path, backfill: bool) -> None:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} missing")
    torch.manual_seed(7)
    agent = Agent(NUM_FEATURES).eval()
    with torch.no_grad():  # a policy with opinions (the default init is near-uniform)
        last_linear(agent.actor).weight.normal_(0.0, 2.0)
    out = tmp_path / "hpc-kernel" / "0"
    card = {"training": {"seed": 7}, "seeds": {"training": 7}, "metrics": {}}
    onnx_path = write_policy(agent, out, name="hpc-kernel", version="0", card_fields=card)

    starts, length = [6300, 900], 160
    twin = run_protocol(
        JobTable.from_swf(str(TRACE)), starts, length, onnx_picker(onnx_path), backfill=backfill
    )
    service = run_protocol_service(
        str(TRACE), starts, length, service_policy("hpc-kernel", out), backfill=backfill
    )
    assert twin == pytest.approx(service, rel=0, abs=1e-9)
    assert min(twin) >= 1.0
