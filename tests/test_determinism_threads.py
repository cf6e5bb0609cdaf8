"""Training repeats to the bit on two CPU threads (issue 69, item 14).

On more than one thread torch's CPU backward of gathered rows (`x[i]`: index_put with
accumulate) adds rows in parallel in whatever order its threads reach them, once a tensor holds
more than its grain of 32,768 elements; triplet-nca, angular, bce-pair and two PML losses then
gave other gradients at every repetition of the same step. tests/test_determinism.py trains on
one thread with batches of 16, below that grain, and cannot see it: here every registered loss
(and those two PML ones) takes the same step twice on two threads, with a batch whose pairs
and triplets are far above the grain, under what the trainer sets (`deterministic_cpu`); and
one tiny triplet-nca run trains twice through the command line.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from bench.util.runtime import deterministic_cpu
from losses import build_loss, loss_names
from tests.conftest import cli

PML_SEEN = ("pml:ThresholdConsistentMarginLoss", "pml:DynamicSoftMarginLoss")  # in the issue
# 128 x 127 pairs (bce-pair: 256 pairs) of 256 dims: above the grain, on the parallel path
BATCH, CLASSES, DIMS, INPUTS, NUM_TRAIN = 128, 16, 256, 16, 500


def step_gradients(name: str) -> torch.Tensor:
    """The gradients of one training step of `name` on a fixed batch, a linear embedding."""
    torch.manual_seed(0)  # the loss's own parameters (proxies, classifiers)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, INPUTS, generator=gen)
    labels = torch.arange(BATCH) % CLASSES
    indices = torch.randperm(NUM_TRAIN, generator=gen)[:BATCH]
    net = nn.Linear(INPUTS, DIMS)
    loss = build_loss(name, {}, num_train=NUM_TRAIN, num_classes=CLASSES, dims=DIMS)
    with deterministic_cpu(torch.device("cpu")):
        if loss.refresh_interval is not None:  # NNGK's bank of every training embedding
            with torch.no_grad():
                bank = net(torch.randn(NUM_TRAIN, INPUTS, generator=gen))
            loss.refresh(bank, torch.arange(NUM_TRAIN) % CLASSES)
        emb = net(x)
        if loss.normalize_embeddings:
            emb = nn.functional.normalize(emb, dim=1)
        loss(emb, labels, indices if loss.needs_indices else None).backward()
    params = [*net.parameters(), *loss.parameters()]
    return torch.cat([p.grad.flatten() for p in params if p.grad is not None])


@pytest.mark.parametrize("name", [*loss_names(), *PML_SEEN])
def test_a_step_repeats_to_the_bit_on_two_threads(name):
    torch.set_num_threads(2)  # the autouse fixture puts the count back
    # Three times: two threads that happen not to overlap add in the same order (seen at a
    # load of 12 on 2 cores, where 2 of the 5 losses then repeated before the fix).
    first, *again = (step_gradients(name) for _ in range(3))
    assert first.abs().sum() > 0, "no gradient: the step tests nothing"
    for other in again:
        assert torch.equal(first, other), f"{name}: {(first - other).abs().max():.3g} apart"


def test_the_trainer_leaves_torch_as_it_found_it():
    before = torch.are_deterministic_algorithms_enabled()
    with deterministic_cpu(torch.device("cpu")):
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before
    with deterministic_cpu(torch.device("cuda")):  # a GPU run: unchanged (cuDNN, cuBLAS)
        assert torch.are_deterministic_algorithms_enabled() == before


def test_a_triplet_nca_run_on_two_threads_repeats_to_the_bit(tmp_path):
    """The issue's case end to end: the same run twice in one process, on two threads."""
    torch.set_num_threads(2)
    args = ["--dataset", "glyphs:classes=12,instances=20,size=12", "--loss", "triplet-nca"]
    args += ["--epochs", "1", "--batch-size", "64", "--dims", "64", "--clustering", "none"]
    runs = []
    for copy in ("a", "b"):
        assert cli("run", *args, "--results", tmp_path / copy).exit_code == 0
        runs += [p.parent for p in (tmp_path / copy).glob("*/config.json")
                 if json.loads(p.read_text())["loss"] == "triplet-nca"]  # fmt: skip
    a, b = runs
    assert (
        pd.read_csv(a / "history.csv")["train_loss"].tolist()
        == pd.read_csv(b / "history.csv")["train_loss"].tolist()
    )
    with np.load(a / "test_embeddings.npz") as ea, np.load(b / "test_embeddings.npz") as eb:
        assert ea["embeddings"].tobytes() == eb["embeddings"].tobytes()
