"""The Horovod that `make horovod` builds (scripts/horovod-wheel.sh) really runs: two Gloo
processes under `horovodrun` agree on an allreduce and on one DistributedOptimizer step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_horovod

pytestmark = pytest.mark.integration

TIMEOUT_S = 180
LEARNING_RATE = 0.1
WEIGHT = [0.5, -1.0]
BIAS = 0.25

# Each rank: an allreduce (sum) of a rank-dependent tensor, then one SGD step of a 2->1 linear
# layer on its own sample, x = [1 + rank, 2] and y = 3 * rank, with the gradients averaged by
# hvd.DistributedOptimizer. Writes what it got to OUT_DIR/rank<r>.json.
WORKER = f"""
import json, sys
import torch
import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
total = hvd.allreduce(torch.tensor([rank + 1.0, 10.0 * rank]), op=hvd.Sum)

model = torch.nn.Linear(2, 1)
with torch.no_grad():
    model.weight.copy_(torch.tensor([{WEIGHT}]))
    model.bias.fill_({BIAS})
sgd = torch.optim.SGD(model.parameters(), lr={LEARNING_RATE})
optimizer = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
x = torch.tensor([[1.0 + rank, 2.0]])
y = torch.tensor([[3.0 * rank]])
optimizer.zero_grad()
torch.nn.functional.mse_loss(model(x), y).backward()
optimizer.step()

result = {{
    "size": size,
    "allreduce": total.tolist(),
    "weight": model.weight.detach().flatten().tolist(),
    "bias": model.bias.item(),
}}
with open(f"{{sys.argv[1]}}/rank{{rank}}.json", "w") as f:
    json.dump(result, f)
"""


def expected_sgd_step(ranks: int) -> tuple[list[float], float]:
    """One SGD step on the mean over ranks of each rank's squared-error gradient, by hand:
    for prediction p = w.x + b and loss (p - y)^2, dL/dw = 2 (p - y) x and dL/db = 2 (p - y)."""
    grad_w, grad_b = [0.0, 0.0], 0.0
    for rank in range(ranks):
        x, y = [1.0 + rank, 2.0], 3.0 * rank
        error = WEIGHT[0] * x[0] + WEIGHT[1] * x[1] + BIAS - y
        grad_w = [g + 2 * error * xi / ranks for g, xi in zip(grad_w, x, strict=True)]
        grad_b += 2 * error / ranks
    weight = [w - LEARNING_RATE * g for w, g in zip(WEIGHT, grad_w, strict=True)]
    return weight, BIAS - LEARNING_RATE * grad_b


def run_two_gloo_ranks(tmp_path: Path) -> list[dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    horovodrun = Path(sys.executable).parent / "horovodrun"
    command = [str(horovodrun), "--gloo", "-np", "2", "-H", "localhost:2"]
    command += [sys.executable, str(script), str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def test_the_hand_computed_step_is_the_averaged_one():
    # Rank 0's error is -1.25, rank 1's -3.75: mean gradient [-8.75, -10] and -5.
    weight, bias = expected_sgd_step(2)
    assert weight == pytest.approx([1.375, 0.0]) and bias == pytest.approx(0.75)


def test_horovodrun_with_gloo_allreduces_and_averages_gradients_across_two_ranks(tmp_path):
    require_horovod()
    ranks = run_two_gloo_ranks(tmp_path)
    weight, bias = expected_sgd_step(2)
    for result in ranks:
        assert result["size"] == 2
        assert result["allreduce"] == [3.0, 10.0]  # [(0 + 1) + (1 + 1), 10 * 0 + 10 * 1]
        assert result["weight"] == pytest.approx(weight, abs=1e-6)
        assert result["bias"] == pytest.approx(bias, abs=1e-6)
    assert ranks[0]["weight"] == ranks[1]["weight"] and ranks[0]["bias"] == ranks[1]["bias"]
