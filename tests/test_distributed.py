"""One run on two processes (DistributedDataParallel on gloo, as `torchrun --nproc_per_node 2`
runs it): the same metrics as one process with the same global batch. With a GroupNorm
network nothing depends on how the batch is split, so the tolerance only allows for the order
of floating-point sums (measured: identical to 4 decimals for contrastive, NNGK and N-pair)."""

import json
import subprocess
import sys

import pytest
from torch.utils.data import BatchSampler, SequentialSampler

from bench.train.distributed import Ranks, RankSlices

TOLERANCE = 1e-3
TINY = "glyphs:classes=20,instances=12"


def run(results, loss, *extra):
    args = f"run --loss {loss} --dataset {TINY} --backbone small_cnn_gn --dims 16 --epochs 2"
    command = [sys.executable, "-m", "bench.cli", *args.split(), "--batch-size", "16"]
    out = subprocess.run([*command, "--results", str(results), *extra], capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (folder,) = [p for p in results.iterdir() if f"-{loss}-" in p.name]
    return json.loads((folder / "metrics.json").read_text()), out.stderr


@pytest.mark.parametrize("loss", ["contrastive", "nngk"])
def test_two_processes_train_the_run_one_process_trains(tmp_path, loss):
    one, _ = run(tmp_path / "one", loss)
    two, log = run(tmp_path / "two", loss, "--nproc", "2")
    assert "on 2 processes" in log
    for key in ("recall@1", "map@r", "nmi", "train_loss_change", "val_score"):
        assert two[key] == pytest.approx(one[key], abs=TOLERANCE), key
    assert two["best_epoch"] == one["best_epoch"]


def test_each_process_takes_its_slice_of_every_global_batch():
    batches = BatchSampler(SequentialSampler(range(24)), batch_size=8, drop_last=True)
    slices = [list(RankSlices(batches, Ranks(rank, 2))) for rank in (0, 1)]
    assert [a + b for a, b in zip(*slices, strict=True)] == list(batches)
    assert slices[1][0] == [4, 5, 6, 7] and len(RankSlices(batches, Ranks(1, 2))) == 3


def test_a_batch_the_processes_cannot_share_is_a_one_line_error():
    batches = BatchSampler(SequentialSampler(range(30)), batch_size=10, drop_last=True)
    with pytest.raises(ValueError, match="divisible by the number of processes"):
        RankSlices(batches, Ranks(0, 3))
