"""Every loss added beside the source papers' trains end to end through the command line on a
small glyphs set and lowers its training loss at its defaults (3 epochs, 2 steps each, the
glyphs preset's SGD at its learning rate for the loss: 0.01, or 0.001 where the preset chose
it)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import cli

NEW_LOSSES = (
    "proxy-nca",
    "proxy-anchor",
    "soft-triple",
    "multi-similarity",
    "multi-similarity-miner",
    "margin",
    "margin-class-beta",
    "normalized-softmax",
    "cosface",
    "arcface",
    "subcenter-arcface",
    "fastap",
    "snr",
    "ntxent",
    "supcon",
    # issue 46: the rest of pytorch-metric-learning's losses that the field's papers compare
    "tuplet-margin",
    "angular",
    "generalized-lifted",
    "intra-pair-variance",
    "histogram",
    "smooth-ap",
    "ranked-list",
    "pnp",
    "instance",
    "large-margin-softmax",
    # At lr 0.01 its loss rises for 3 epochs here (m = 4 from the first step, no annealing)
    # before it falls; the glyphs preset trains it at 0.001 (its validation MAP@R at 0.01 /
    # 0.001: 7.1 / 7.5), where it falls at once.
    "sphereface",
)
# Circle loss at PML's defaults (gamma 80) does not lower its loss on a set this small: its first
# gradient is about 80 times the contrastive loss's on the same batch (norm 394 against 5), and one
# SGD step at lr 0.01 collapses the embedding (mean cosine 0.72 -> 0.998) to a loss of about 58.7,
# where it stays for the 6 steps here (also for 24 steps, for 60 steps on classes=40,instances=20,
# and at lr 1e-3). On the full glyphs preset (37 steps an epoch) it leaves that value in its second
# epoch (57.0, 54.4, 49.1, ...) and lowers it 54 % in 10 epochs (64-d, seed 0; test MAP@R 27.3,
# reports/losses). Which difference holds it here (16-d, 8 classes a batch, 12-px glyphs, few
# steps) is not isolated; a strict xfail, so that a change shows.
CIRCLE = pytest.param(
    "circle",
    marks=pytest.mark.xfail(
        strict=True, reason="stays collapsed for the few steps of a small set (gamma 80, lr 0.01)"
    ),
)
DATASET = "glyphs:classes=16,instances=10,size=12"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One results folder for the module: the data set's baselines are evaluated by its first
    run and found finished by the others."""
    return tmp_path_factory.mktemp("new-losses")


@pytest.mark.parametrize("name", [*NEW_LOSSES, CIRCLE])
def test_the_loss_trains_and_lowers_its_loss(name, results):
    out = cli(
        "run",
        "--loss",
        name,
        "--dataset",
        DATASET,
        "--dims",
        "16",
        "--epochs",
        "3",
        "--batch-size",
        "32",
        "--results",
        results,
    )
    assert out.exit_code == 0, out.output
    (folder,) = results.glob(f"*-{name}-d16-*")
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["loss"] == name
    assert metrics["train_loss_change"] < 0, metrics["warnings"]
