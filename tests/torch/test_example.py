"""examples/torch/train.py as a user runs it: torchrun, two ranks, DDP on
the CPU (gloo), torchvision's ResNet-18, fed by a real stokerd; stopped
mid-epoch and resumed from its checkpoint."""

import json
import math
import subprocess
import sys
from collections import Counter

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from stoker_testutil import REPO, child_env, expected_samples  # noqa: E402

EXAMPLE = REPO / "examples" / "torch" / "train.py"
RANKS, BATCH, EPOCHS = 2, 8, 4


def torchrun(socket, data, tmp_path, *args):
    env = child_env()
    env["STOKER_SOCKET"] = socket  # the example names no socket: the environment's
    env["OMP_NUM_THREADS"] = "1"
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={RANKS}",
           str(EXAMPLE), "--data", str(data), "--arch", "resnet18", "--epochs", str(EPOCHS),
           "--batch-size", str(BATCH), "--image-size", "64", "--lr", "0.01", "--workers", "4",
           "--checkpoint", str(tmp_path / "ckpt.pt"), "--step-log", str(tmp_path / "steps"),
           "--print-freq", "1", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, f"torchrun exited {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    return r.stdout


def test_ddp_example_trains_each_rank_on_its_own_share(daemon, make_dataset, tmp_path):
    data, _ = make_dataset(classes=4, per_class=16, min_side=72, max_side=160, seed=12)
    n = len(expected_samples(data))
    per_rank_batches = math.ceil(n / RANKS / BATCH)
    d = daemon(workers=2)
    stop_at = per_rank_batches + 2  # mid-epoch 1
    out1 = torchrun(d.socket, data, tmp_path, "--max-steps", str(stop_at))
    assert f"stopped after {stop_at} steps (epoch 1)" in out1, out1
    out2 = torchrun(d.socket, data, tmp_path, "--resume", str(tmp_path / "ckpt.pt"))
    assert "resumed from" in out2 and "epoch 1, batch 2" in out2, out2

    steps = {}
    for r in range(RANKS):
        lines = [json.loads(x) for x in (tmp_path / f"steps.rank{r}").read_text().splitlines()]
        assert [x["step"] for x in lines] == list(range(1, EPOCHS * per_rank_batches + 1)), \
            f"rank {r}: steps lost or repeated across the resume"
        steps[r] = lines

    # Each epoch: every sample exactly once over the ranks, each rank its own share.
    for epoch in range(EPOCHS):
        seen = {r: [i for x in steps[r] if x["epoch"] == epoch for i in x["indices"]] for r in range(RANKS)}
        for r in range(RANKS):
            assert len(seen[r]) == n // RANKS, f"epoch {epoch} rank {r}: {len(seen[r])} samples"
        assert not set(seen[0]) & set(seen[1]), f"epoch {epoch}: ranks share samples"
        count = Counter(seen[0] + seen[1])
        assert sorted(count) == list(range(n)) and set(count.values()) == {1}, \
            f"epoch {epoch}: not every sample exactly once: {sorted(count.items())}"
    orders = [[i for x in steps[0] if x["epoch"] == e for i in x["indices"]] for e in range(EPOCHS)]
    assert len({tuple(o) for o in orders}) == EPOCHS, "epochs were not reshuffled"

    # The loss (mean over ranks per step) is finite and falls.
    loss = [sum(steps[r][k]["loss"] for r in range(RANKS)) / RANKS for k in range(len(steps[0]))]
    assert all(math.isfinite(v) for v in loss), loss
    first, last = loss[:per_rank_batches], loss[-per_rank_batches:]
    assert sum(last) / len(last) < 0.7 * sum(first) / len(first), f"loss did not fall: {loss}"
