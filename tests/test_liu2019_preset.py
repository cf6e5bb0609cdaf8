"""Liu et al. 2019's preset (§2) and its FC against GAP runs with training-split R@1."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.cli.run import run as run_command
from bench.evaluation.metrics import evaluate
from bench.train.presets import DIGITS, make_configs


def test_liu2019_preset_is_the_papers_setting():
    (cfg,) = make_configs(
        "cars196", "triplet-nca", None, {"miner": "easy-positive"}, preset="liu2019"
    )
    assert (cfg.backbone, cfg.pretrained, cfg.dims, cfg.batch_size) == (
        "resnet18",
        "imagenet",
        64,
        128,
    )
    assert (cfg.resize, cfg.crop, cfg.pad) == (256, 256, 10)  # 256x256, crops padded by 10
    assert cfg.protocol == "metric" and cfg.preset == "liu2019"


def test_liu2019_gap_takes_the_pooled_size_and_the_preset_does_not_rename_runs():
    (gap,) = make_configs("cars196", "npair", None, {}, preset="liu2019", embedding="gap")
    assert gap.dims == 512  # ResNet18's last feature map
    (digits,) = make_configs("digits", "npair", None, {}, preset="liu2019", embedding="gap")
    assert (digits.backbone, digits.dims, digits.batch_size) == ("small_cnn", 64, 128)
    (plain,) = make_configs("digits", "npair", (64,), {}, batch_size=128)
    (named,) = make_configs("digits", "npair", (64,), {}, preset="liu2019")
    assert plain.run_id() == named.run_id()  # the same computation is the same run
    assert plain.lr == named.lr == DIGITS.config["lr"]


def test_the_earlier_name_seed003_is_the_same_preset_on_the_command_line_and_in_code():
    # `seed003` was its name until the papers were named by authors and year.
    (old,) = make_configs("cars196", "npair", None, {}, preset="seed003", embedding="gap")
    (new,) = make_configs("cars196", "npair", None, {}, preset="liu2019", embedding="gap")
    assert old == new and new.preset == "liu2019"
    ctx = run_command.make_context("run", ["--preset", "seed003"])
    assert ctx.params["preset"] == "liu2019"


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown preset 'seed999'; expected one of: liu2019"):
        make_configs("digits", "npair", None, {}, preset="seed999")
    out = CliRunner().invoke(main, ["run", "--preset", "seed999"])
    assert out.exit_code != 0 and "liu2019" in out.output


@pytest.mark.parametrize("embedding", ["fc", "gap"])
def test_liu2019_run_records_train_and_test_recall(embedding, tmp_path):
    args = ["run", "--dataset", "digits", "--preset", "liu2019", "--loss", "triplet"]
    args += ["--triplet-form", "nca"]
    args += ["--miner", "easy-positive", "--embedding", embedding, "--epochs", "1"]
    out = CliRunner().invoke(main, [*args, "--results", str(tmp_path)], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    (run_dir,) = [p for p in tmp_path.glob("digits-triplet-nca-*") if (p / "metrics.json").exists()]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    assert config["batch_size"] == 128 and config["preset"] == "liu2019"
    assert metrics["embedding"] == embedding and metrics["dims"] == 64
    assert metrics["loss_params"]["miner"] == "easy-positive"
    train = np.load(run_dir / "train_embeddings.npz")
    # R@K, R-Precision and MAP@R (Liu et al. 2019 Table 1 compares R@1); no k-means.
    expected = evaluate(train["embeddings"], train["labels"], seed=0, clustering=False).metrics
    assert "train_map@r" in metrics and not [k for k in metrics if k.startswith("train_nmi")]
    for key in expected:
        assert metrics[f"train_{key}"] == pytest.approx(expected[key])
    assert set(train["labels"]) == {0, 1, 2, 3, 4}  # training classes; test is 5-9
