"""A run says when it did not learn: flat NNGK kernels, a training loss that does not fall;
NNGK learns with the shipped presets (the paper's sigma only for a pretrained network)."""

import json

import pandas as pd
import pytest

from bench.train.guards import below_init, diverged_hint
from bench.train.presets import make_configs
from tests.conftest import cli, copy_baselines


def run(tmp_path, *args):
    out = cli("run", "--dataset", "digits", "--dims", "16", "--results", tmp_path, *args)
    assert out.exit_code == 0, out.output
    (folder,) = [p for p in tmp_path.iterdir() if "-untrained-" not in p.name]
    return folder, json.loads((folder / "metrics.json").read_text())


def test_flat_kernels_are_reported(tmp_path):
    folder, metrics = run(tmp_path, "--loss", "nngk", "--epochs", "2", "--sigma", "100")
    (warning,) = [w for w in metrics["warnings"] if "flat" in w]
    assert "sigma 100" in warning and "--sigma" in warning
    spread = pd.read_csv(folder / "history.csv")["kernel_exponent_spread"]
    assert (spread < 0.1).all()


def test_a_loss_that_does_not_fall_is_reported(tmp_path):
    _, metrics = run(tmp_path, "--loss", "contrastive", "--epochs", "3", "--lr", "0")
    assert abs(metrics["train_loss_change"]) < 0.05
    assert any("did not decrease" in w for w in metrics["warnings"])


def test_nngk_with_the_shipped_digits_preset_lowers_its_loss(tmp_path):
    # (It does not beat the untrained network's test MAP@R on digits; no loss does: README.)
    _, metrics = run(tmp_path, "--loss", "nngk")
    assert metrics["train_loss_change"] <= -0.10 and metrics["warnings"] == []


def test_nngk_with_the_shipped_glyphs_preset_learns_and_beats_the_untrained_network(
    tmp_path, glyphs_baselines
):
    # The shipped data set and preset at its smaller size, for 3 of its 10 epochs (measured:
    # loss -15 %, MAP@R 0.102 against the untrained network's 0.067; 0.139 after 5 epochs). Its
    # baselines, the same for every run of the glyphs preset's network and seed, are evaluated
    # once for the session (tests/conftest.py) and found finished here, as the run writes them.
    copy_baselines(glyphs_baselines, tmp_path)
    args = ["--loss", "nngk", "--dataset", "glyphs", "--dims", "64", "--epochs", "3"]
    folder, metrics = run(tmp_path, *args)
    assert metrics["train_loss_change"] <= -0.10 and metrics["warnings"] == []
    (untrained,) = [p for p in tmp_path.iterdir() if "-untrained-d1024-" in p.name]
    baseline = json.loads((untrained / "metrics.json").read_text())
    assert metrics["map@r"] > baseline["map@r"]


def test_a_run_that_ends_below_its_own_untrained_network_says_so(tmp_path, caplog):
    # Issue 69, 5: docs/losses.md's pml:TupletMarginLoss at lr 0.01 (the glyphs preset trains
    # tuplet-margin at 0.001) ended at test MAP@R 0.009 against 0.042 at init, unwarned. On
    # digits, 1 epoch at 0.01: 0.316 against 0.417 (measured).
    args = ["--loss", "pml:TupletMarginLoss", "--epochs", "1", "--lr", "0.01"]
    _, metrics = run(tmp_path, *args)
    end, start = metrics["map@r"], metrics["untrained_network"]["map@r"]
    assert end < start
    said = (
        f"the test MAP@R {end:.4f} is below this run's untrained network's {start:.4f}: "
        "training made the embedding worse; try a lower learning rate (--lr, 0.01 here) or "
        "check the loss's parameters"
    )
    assert said in metrics["warnings"]
    assert any(r.levelname == "WARNING" and said in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "end, start, warned",
    [(0.30, 0.40, True), (0.40, 0.40, False), (0.50, 0.40, False), (float("nan"), 0.4, False)],
)
def test_only_a_test_below_the_start_is_warned_of(end, start, warned):
    metrics = {"map@r": end, "untrained_network": {"map@r": start}}
    assert bool(below_init(metrics, 0.01)) == warned
    assert below_init({"map@r": 0.3}, 0.01) == []  # a tuning trial, or a run before init


@pytest.mark.parametrize("pretrained, sigma, interval", [("imagenet", 10.0, 10), ("none", 1.0, 1)])
def test_the_papers_sigma_applies_to_a_pretrained_network_only(pretrained, sigma, interval):
    (cfg,) = make_configs("cars196", "nngk", (64,), {}, pretrained=pretrained)
    assert cfg.loss_params["sigma"] == sigma and cfg.loss_params["update_interval"] == interval
    (big,) = make_configs("cars196", "nngk", (1024,), {}, pretrained=pretrained)
    assert big.loss_params["sigma"] == (30.0 if pretrained == "imagenet" else 1.0)
    (given,) = make_configs("cars196", "nngk", (64,), {"sigma": 5.0}, pretrained=pretrained)
    assert given.loss_params["sigma"] == 5.0


def test_nngk_with_the_shipped_metric_preset_learns_on_a_folder_trained_from_scratch(
    tmp_path, monkeypatch
):
    # The paper preset (30 epochs, batch 20) with a small network from scratch: the from-scratch
    # learning rate, sigma and refresh, nothing else given.
    from tests.fixtures.folder import glyph_folder

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = glyph_folder(tmp_path)
    args = ["--dataset", f"folder:{root}", "--backbone", "small_cnn", "--pretrained", "none"]
    base = ["run", "--loss", "nngk", *args, "--resize", "28", "--crop", "28"]
    out = cli(*base, "--results", tmp_path / "r")
    assert out.exit_code == 0, out.output
    (folder,) = (tmp_path / "r").glob("*-nngk-*")
    (untrained,) = (tmp_path / "r").glob("*-untrained-d1024-*")
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["lr"] == 3e-4 and metrics["loss_params"]["sigma"] == 1.0
    assert metrics["train_loss_change"] <= -0.10 and metrics["warnings"] == []
    baseline = json.loads((untrained / "metrics.json").read_text())
    assert metrics["map@r"] > baseline["map@r"]


def test_a_paper_preset_from_scratch_takes_the_from_scratch_learning_rate():
    (tuned,) = make_configs("cars196", "nngk", (64,), {})
    (scratch,) = make_configs("cars196", "nngk", (64,), {}, pretrained="none")
    (given,) = make_configs("cars196", "nngk", (64,), {}, pretrained="none", lr=0.05)
    assert (tuned.lr, scratch.lr, given.lr) == (1e-5, 3e-4, 0.05)
    (glyphs,) = make_configs("glyphs", "contrastive", (64,), {}, pretrained="none")
    assert glyphs.lr == 0.01  # a preset made for a network from scratch keeps its own


def test_a_divergence_hint_names_the_loss_parameters_given_beside_the_lr():
    # For the trainer's line of a run that diverged (it named --lr alone, issue 69, item 19).
    assert diverged_hint(0.001, {}) == "a learning rate below 0.001 (--lr) may train"
    assert diverged_hint(0.001, {"scale": 1e30, "margin": 0.5}) == (
        "a learning rate below 0.001 (--lr), or other values of the loss parameters given "
        "(margin=0.5, scale=1e+30), may train"
    )
