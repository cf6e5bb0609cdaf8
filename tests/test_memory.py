"""Cross-batch memory (`--memory N`): the harness's pair and triplet losses with a memory give
what PML's own CrossBatchMemory gives on the same fixed batches, see other pairs than without
one, keep their queue across a checkpoint, and a loss that takes none is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from pytorch_metric_learning.losses import (
    ContrastiveLoss,
    CrossBatchMemory,
    TripletMarginLoss,
)

from losses import build_loss
from miners import build_miner
from tests.conftest import FAST, cli

DIMS = 4


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randn(6, DIMS, generator=g), torch.tensor(labels))
        for labels in ([0, 0, 1, 1, 2, 2], [1, 1, 3, 3, 0, 0], [2, 2, 3, 3, 4, 4])
    ]


def values(loss) -> list[float]:
    return [float(loss(x, y)) for x, y in batches()]


@pytest.mark.parametrize(
    "name, params, reference",
    [
        ("contrastive", {}, lambda: ContrastiveLoss(pos_margin=0.0, neg_margin=0.5)),
        (
            "triplet",
            {"miner": "semihard"},
            lambda: (TripletMarginLoss(margin=0.2), build_miner("semihard", margin=0.2)),
        ),
    ],
)
def test_the_memory_is_pmls_cross_batch_memory(name, params, reference):
    built = reference()
    loss, miner = built if isinstance(built, tuple) else (built, None)
    # 16 places hold two batches of 6: the second and third batches meet the earlier ones.
    pml = CrossBatchMemory(loss, DIMS, memory_size=16, miner=miner)
    ours = build_loss(name, params, memory=16, num_train=100, num_classes=5, dims=DIMS)
    expected = values(pml)
    assert values(ours) == pytest.approx(expected, abs=1e-6)
    without = values(build_loss(name, params, num_train=100, num_classes=5, dims=DIMS))
    assert without[0] == pytest.approx(expected[0], abs=1e-6)  # nothing remembered yet
    assert without[2] != pytest.approx(expected[2], abs=1e-3)  # then other pairs


def test_the_queue_goes_on_after_a_checkpoint():
    ours = build_loss("contrastive", {}, memory=8, dims=DIMS)
    x, y = batches()[0]
    ours(x, y)
    state = ours.state_dict()
    resumed = build_loss("contrastive", {}, memory=8, dims=DIMS)
    resumed.load_state_dict(state)
    assert (resumed.loss.queue_idx, resumed.loss.has_been_filled) == (6, False)
    assert [float(ours(*b)) for b in batches()[1:]] == [float(resumed(*b)) for b in batches()[1:]]


def test_a_loss_without_memory_is_refused_naming_those_with_one():
    with pytest.raises(
        ValueError,
        match="the loss 'nngk' takes no cross-batch memory; drop --memory or use one that does: ",
    ):
        build_loss("nngk", {}, memory=8, num_train=100, num_classes=5, dims=DIMS)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--loss", "nngk", "--memory", "64"], "the loss 'nngk' takes no cross-batch memory"),
        (["--loss", "contrastive", "--memory", "8"], "--memory 8 holds less than a batch"),
    ],
)
def test_a_bad_memory_is_one_line_before_anything_is_written(args, message, tmp_path):
    out = cli("run", *FAST, *args, "--results", tmp_path / "r", catch_exceptions=True)
    error = [line for line in out.output.splitlines() if line.startswith("Error: ")]
    assert out.exit_code == 1 and len(error) == 1 and message in error[0]
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_a_run_with_memory_trains_and_is_its_own_run(tmp_path):
    base = ["run", "--loss", "contrastive", *FAST, "--results", tmp_path]
    assert cli(*base).exit_code == 0
    out = cli(*base, "--memory", "128")
    assert out.exit_code == 0, out.output
    runs = sorted(p for p in tmp_path.glob("digits-contrastive-*"))
    assert len(runs) == 2
    configs = [json.loads((p / "config.json").read_text()) for p in runs]
    assert sorted(c["memory"] for c in configs) == [0, 128]


def test_losses_lists_which_losses_take_a_memory():
    blocks = {}
    for line in cli("losses").output.splitlines():
        if not line.startswith(" "):
            name = line
        blocks.setdefault(name, []).append(line)
    takes = {name for name, lines in blocks.items() if any("--memory N" in x for x in lines)}
    assert {"contrastive", "triplet"} <= takes and "nngk" not in takes


@pytest.mark.parametrize(
    "name", ["multi-similarity", "multi-similarity-miner", "circle", "ntxent", "supcon", "snr"]
)
def test_todays_pair_losses_take_a_memory_too(name):
    # The memory is PML's (compared with it above); here: each of these losses runs with it,
    # the same on the first batch (nothing remembered yet), other values after.
    ours = values(build_loss(name, {}, memory=16, num_train=100, num_classes=5, dims=DIMS))
    without = values(build_loss(name, {}, num_train=100, num_classes=5, dims=DIMS))
    assert ours[0] == pytest.approx(without[0], rel=1e-5)
    assert ours[1:] != pytest.approx(without[1:], rel=1e-3)
