"""Runs that would train nothing or score nonsense are refused before anything is written (a
batch of one class, a test split of one class, a class too small to split, a batch the
processes cannot share, a crop larger than its image); a loss that never changed is reported;
SIGTERM stops a run as Ctrl-C does, and the same command resumes it."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from bench.data.splits import three_way
from bench.train.guards import StepLosses, loss_trend, widen_steps
from bench.train.presets import make_configs
from tests.conftest import cli
from tests.fixtures.folder import class_image, make_folder

INTERRUPTED = "interrupted; run the same command again to resume"


def refused(results, *args) -> str:
    """The one error line of a `run` that must stop before writing anything."""
    out = cli("run", *args, "--results", results, catch_exceptions=True)
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)
    errors = [line for line in out.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and out.output.strip().endswith(errors[0]), out.output
    assert not results.exists() or not any(results.iterdir())
    return errors[0]


def features_file(path, train_labels, test_labels):
    """A features file with 4-d vectors, its training and test rows of these labels."""
    labels = np.array([*train_labels, *test_labels], dtype=np.int64)
    split = np.array(["train"] * len(train_labels) + ["test"] * len(test_labels))
    features = np.random.default_rng(0).normal(size=(len(labels), 4)).astype(np.float32)
    np.savez(path, features=features, labels=labels, split=split)
    return f"features:{path}"


def image_folder(root, counts: dict[str, int]):
    """root/<class>/<i>.png: `counts[class]` images of each class."""
    for label, (name, count) in enumerate(counts.items()):
        (root / name).mkdir(parents=True)
        for i in range(count):
            class_image(label, i, size=16).save(root / name / f"{i}.png")
    return f"folder:{root}"


SMALL_IMAGES = "--backbone small_cnn --embedding fc --pretrained none --resize 16 --crop 16".split()


@pytest.mark.parametrize(
    "args, fix",
    [
        # The digits preset's 16 examples a class, the whole batch.
        (["--loss", "triplet", "--batch-size", "16"], "a --batch-size of 32 or more"),
        (["--loss", "triplet", "--batch-size", "3"], "a --batch-size of 32 or more"),
        (["--loss", "contrastive", "--batch-size", "6", "--m-per-class", "6"],
         "a --batch-size of 12 or more (a multiple of --m-per-class 6), or a --m-per-class of 3"),
    ],
)  # fmt: skip
def test_a_class_balanced_batch_of_one_class_is_refused(tmp_path, args, fix):
    line = refused(tmp_path / "r", "--dataset", "digits", "--dims", "8", *args)
    assert "holds a single class" in line and "a loss of 0 at every step" in line
    assert line.endswith(fix) or fix + " (" in line


@pytest.mark.parametrize(
    "batch, m, fix",
    [
        # Issue 43: trained 4 x 4 while config.json said 3; and "a batch of 64 with 64 examples
        # of each class" for an m of 50.
        (16, 3, "give a --m-per-class of 2 or 4 or 8, or a --batch-size of 15 or 18"),
        (60, 7, "give a --m-per-class of 4 or 5 or 6, or a --batch-size of 56 or 63"),
    ],
)
def test_an_m_per_class_that_does_not_divide_the_batch_is_refused(tmp_path, batch, m, fix):
    args = ["--loss", "contrastive", "--batch-size", str(batch), "--m-per-class", str(m)]
    line = refused(tmp_path / "r", "--dataset", "digits", "--dims", "8", *args)
    assert f"--m-per-class {m} does not divide --batch-size {batch}" in line
    assert line.endswith(fix), line
    args = ["--loss", "contrastive", "--batch-size", "64", "--m-per-class", "50"]
    line = refused(tmp_path / "r", "--dataset", "digits", "--dims", "8", *args)
    assert "a class-balanced batch of 64 with --m-per-class 50 holds a single class" in line


def test_an_m_raised_for_too_few_classes_is_said():
    from bench.train.loaders import load_data, raised_m_note
    from bench.train.presets import make_configs
    from losses import build_loss

    data_set = "glyphs:classes=8,instances=40"  # 4 training classes: 4 x 4 fills no batch of 32
    (cfg,) = make_configs(data_set, "contrastive", (8,), {}, batch_size=32, m_per_class=4)
    data = load_data(cfg)
    loss = build_loss("contrastive", {}, num_train=len(data.train), num_classes=4, dims=8)
    note = raised_m_note(cfg, loss, data)
    assert note == (
        "4 examples a class raised to 8: 4 training classes x 4 cannot fill a batch of 32 "
        "(recorded as the sampler, 4 classes x 8)"
    )
    (cfg,) = make_configs(data_set, "contrastive", (8,), {}, batch_size=16, m_per_class=4)
    assert raised_m_note(cfg, loss, data) is None


def test_steps_record_their_least_and_greatest_loss_across_epochs():
    progress = {}
    for values in ([0.5, 0.25], [1.0]):
        steps = StepLosses(1)
        for v in values:
            steps.add(torch.tensor(v))
        widen_steps(progress, steps)
    assert progress["step_losses"] == {"steps": 3, "low": 0.25, "high": 1.0}
    assert loss_trend([{"train_loss": 0.4}, {"train_loss": 0.1}], progress["step_losses"])[1] == []


@pytest.mark.parametrize(
    "low, high, steps, warned",
    [
        (0.0, 0.0, 1, "was 0 at every step"),
        (2.5, 2.5, 40, "was 2.5 at every step"),
        (2.5, 2.5, 1, None),  # one step: nothing to compare
        (0.0, 1e-3, 40, None),
    ],
)
def test_a_loss_that_never_changed_is_reported(low, high, steps, warned):
    history = [{"train_loss": high}, {"train_loss": high}]
    _, warnings = loss_trend(history, {"steps": steps, "low": low, "high": high})
    if warned:
        (warning,) = warnings  # not also "did not decrease"
        assert warned in warning and "--batch-size, --m-per-class" in warning
    else:
        assert not any("every step" in w for w in warnings)


def test_a_run_whose_loss_was_zero_at_every_step_says_so_in_metrics(tmp_path):
    # One item of each class in a batch: no triplet has a positive, so the loss is 0 throughout.
    dataset = features_file(tmp_path / "f.npz", np.repeat(np.arange(10), 10), np.repeat([0, 1], 4))
    args = ["--loss", "triplet", "--dataset", dataset, "--m-per-class", "1", "--batch-size", "8"]
    out = cli("run", *args, "--epochs", "2", "--dims", "4", "--results", tmp_path / "r")
    assert out.exit_code == 0, out.output
    (run,) = [p for p in (tmp_path / "r").iterdir() if "-triplet-" in p.name]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["sampler"] == "8 classes x 1"
    assert any("training loss was 0 at every step" in w for w in metrics["warnings"])


@pytest.mark.parametrize(
    "test_labels, problem",
    [
        ([3] * 8, "the test split of features:"),  # one class: R@1 = NMI = MAP@R = 1.0
        ([3, 4, 5, 6], "no class with two"),  # nothing to retrieve
    ],
)
def test_a_test_split_retrieval_cannot_score_is_refused(tmp_path, test_labels, problem):
    dataset = features_file(tmp_path / "f.npz", np.repeat([0, 1, 2], 10), test_labels)
    line = refused(tmp_path / "r", "--loss", "softmax", "--dataset", dataset, "--dims", "4",
                   "--batch-size", "8")  # fmt: skip
    assert problem in line
    if len(set(test_labels)) == 1:
        assert "holds 8 items of 1 class" in line and "all read 1.0" in line


def test_a_two_class_folder_in_halves_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    dataset = image_folder(tmp_path / "img", {"cat": 6, "dog": 6})
    line = refused(tmp_path / "r", "--loss", "softmax", "--dataset", dataset, "--dims", "4",
                   "--batch-size", "2", "--epochs", "1", *SMALL_IMAGES)  # fmt: skip
    assert "the test split of" in line and "1 class" in line
    assert "first half of the classes" in line


def test_a_class_of_one_image_under_classify_names_the_class(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    dataset = image_folder(tmp_path / "img", {"ash": 8, "elm": 8, "oak": 1})
    line = refused(tmp_path / "r", "--protocol", "classify", "--loss", "softmax", "--dataset",
                   dataset, "--dims", "4", "--batch-size", "4", *SMALL_IMAGES)  # fmt: skip
    assert "class 'oak' has 1" in line and "add images to it" in line
    assert "least populated" not in line  # not scikit-learn's words
    with pytest.raises(ValueError, match="class 7 has 1"):
        three_way(np.array([0, 0, 0, 0, 7, 0]))


def test_a_test_class_the_classifier_never_trained_on_is_refused(tmp_path):
    # Class 3 has one image, in the test split: the classifier has no column for it.
    dataset = features_file(tmp_path / "f.npz", np.repeat([0, 1, 2], 10), [0, 1, 1, 2, 2, 3])
    line = refused(tmp_path / "r", "--protocol", "classify", "--loss", "softmax", "--dataset",
                   dataset, "--dims", "4", "--batch-size", "8")  # fmt: skip
    assert "1 class of the test split" in line and "has no training image" in line


def test_a_batch_the_processes_cannot_share_is_refused_before_torchrun(tmp_path, monkeypatch):
    def torchrun(nproc):
        raise AssertionError("torchrun started")

    monkeypatch.setattr("bench.cli.run.relaunch_with_torchrun", torchrun)
    line = refused(tmp_path / "r", "--loss", "softmax", "--dataset", "digits", "--nproc", "2",
                   "--batch-size", "3")  # fmt: skip
    assert line == (
        "Error: a batch of 3 cannot be split between 2 processes; give a --batch-size "
        "divisible by the number of processes"
    )


@pytest.mark.parametrize(
    "args, line",
    [
        (["--crop", "300"], "--crop 300 exceeds the preset's resize 256"),
        (["--resize", "100"], "the preset's crop 224 exceeds --resize 100"),
        (["--resize", "64", "--crop", "96"], "--crop 96 exceeds --resize 64"),
    ],
)
def test_a_crop_larger_than_its_image_is_refused(tmp_path, args, line):
    error = refused(tmp_path / "r", "--dataset", f"folder:{tmp_path}", *args)
    assert line in error and "give a --crop of at most" in error


def test_suite_refuses_a_crop_larger_than_its_image_in_one_line_as_run_does(tmp_path):
    out = cli("suite", "--dataset", f"folder:{tmp_path}", "--losses", "contrastive",
              "--resize", "32", "--crop", "64", "--results", tmp_path / "r",
              catch_exceptions=True)  # fmt: skip
    assert out.exit_code == 1, out.output
    assert out.output.startswith("Error: --crop 64 exceeds --resize 32"), out.output
    assert "Traceback" not in out.output and not (tmp_path / "r").exists()


def test_every_command_that_builds_configs_checks_the_crop():
    with pytest.raises(ValueError, match="--crop 300 exceeds"):
        make_configs("cub", "nngk", None, {}, crop=300)
    # The built-in sets are neither resized nor cropped: an image option given for them is
    # refused (it named another run id for the same training, R@1 to the last digit).
    for option in ("resize", "crop", "pad", "crop_mode", "crop_scale"):
        with pytest.raises(ValueError, match="inputs are used as they are"):
            make_configs("digits", "nngk", (8,), {}, **{option: 16})
    (cfg,) = make_configs("digits", "nngk", (8,), {})  # the preset's values, not given: fine


def test_features_refuses_a_crop_larger_than_its_image(tmp_path):
    (tmp_path / "images").mkdir()
    out = cli("features", "--dataset", f"folder:{tmp_path / 'images'}", "--resize", "64",
              "--crop", "96", "--out", tmp_path / "f.npz", catch_exceptions=True)  # fmt: skip
    assert out.exit_code == 1 and out.output.startswith("Error: --crop 96 exceeds --resize 64")
    assert not (tmp_path / "f.npz").exists()


def test_sigterm_stops_a_run_that_the_same_command_resumes(tmp_path):
    command = [sys.executable, "-m", "bench.cli", "run", "--loss", "softmax", "--dataset",
               "digits", "--epochs", "3", "--dims", "8", "--results", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip
    deadline, history = time.time() + 300, None
    while time.time() < deadline and proc.poll() is None and history is None:
        found = list(tmp_path.glob("digits-softmax-*/history.csv"))
        history = found[0] if found else None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert history is not None, err[-2000:]
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines()[-1] == INTERRUPTED and "Traceback" not in err
    run_dir = history.parent
    assert not (run_dir / "metrics.json").exists()
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=True)  # whole
    assert 1 <= saved["progress"]["epoch"] < 3

    # The same command again, in this process (the resume reads only what the killed process
    # left on disk; a second interpreter would only import torch again).
    again = cli(*command[3:])
    assert again.exit_code == 0, again.output[-2000:]
    assert f"resuming after epoch {saved['progress']['epoch']} of 3" in again.output
    assert len(pd.read_csv(history)) == 3
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert math.isfinite(metrics["map@r"]) and metrics["epochs"] == 3


def test_a_folder_without_imagenet_weights_offline_stops_before_its_cache(tmp_path, monkeypatch):
    """A folder gets the metric preset (GoogLeNet, ImageNet weights): offline, with no weights in
    torch's cache, one line says what to do before any image is decoded."""
    from urllib.error import URLError

    import torchvision.models._api as weights_api

    def offline(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.setattr(weights_api, "load_state_dict_from_url", offline)
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    dataset = image_folder(tmp_path / "img", {"ash": 6, "elm": 6, "oak": 6, "yew": 6})
    line = refused(tmp_path / "r", "--loss", "softmax", "--dataset", dataset, "--epochs", "1")
    assert line.startswith("Error: ImageNet weights for googlenet are not in ")
    assert "--pretrained PATH (a state dict) or --pretrained none" in line
    assert not (tmp_path / "cache").exists()  # no image was decoded
    bad = tmp_path / "weights.pt"
    bad.write_bytes(b"not a state dict")
    line = refused(tmp_path / "r", "--loss", "softmax", "--dataset", dataset, "--epochs", "1",
                   "--backbone", "resnet18", "--pretrained", bad)  # fmt: skip
    assert "is not a readable PyTorch state dict for resnet18" in line
    assert not (tmp_path / "cache").exists()


def test_a_validation_split_of_one_class_is_refused(tmp_path):
    # Issue 43: its MAP@R read 1.0 at every epoch, and the run tested epoch 1 as its best.
    labels = np.array([0] * 10 + [1] * 10 + [2, 2, 2] + [3, 3, 4, 4])
    split = np.array(["train"] * 20 + ["val"] * 3 + ["test"] * 4)
    features = np.random.default_rng(0).normal(size=(len(labels), 4)).astype(np.float32)
    np.savez(tmp_path / "f.npz", features=features, labels=labels, split=split)
    dataset = f"features:{tmp_path / 'f.npz'}"
    line = refused(tmp_path / "r", "--loss", "softmax", "--dataset", dataset, "--dims", "4",
                   "--batch-size", "8")  # fmt: skip
    assert "holds 3 items of 1 class" in line and "MAP@R reads 1.0 at every epoch" in line


def test_a_features_file_at_a_long_path_runs_and_is_reported(tmp_path):
    # Issue 43: a path of about 250 characters failed with "File name too long", the run id
    # holding the whole path. A name that fits is as it was: run ids never change.
    folder = tmp_path / ("a" * 100) / ("b" * 100)
    folder.mkdir(parents=True)
    dataset = features_file(folder / "f.npz", np.repeat(np.arange(6), 10), np.repeat([6, 7], 4))
    assert len(dataset) > 250
    results = tmp_path / "r"
    out = cli("run", "--loss", "softmax", "--dataset", dataset, "--dims", "4", "--epochs", "1",
              "--batch-size", "8", "--results", results)  # fmt: skip
    assert out.exit_code == 0, out.output
    runs = sorted(p.name for p in results.iterdir() if (p / "metrics.json").is_file())
    assert runs and all(len(name.encode()) <= 247 for name in runs)
    assert any("-softmax-d4-s0-" in name for name in runs)
    from bench.report.write import write_report

    written, problems, _, _ = write_report(results, tmp_path / "report")
    assert not problems and any(p.name.endswith("-recall-at-k.png") for p in written)


def test_a_run_id_that_fits_is_unchanged():
    from bench.runs.config import RunConfig
    from bench.train.presets import make_configs

    (glyphs,) = make_configs("glyphs", "nngk", (64,), {})
    assert glyphs.run_id() == "glyphs-nngk-d64-s0-f6313792"  # as tests/test_options.py pins it
    long = RunConfig(dataset="features:/" + "x" * 300 + ".npz", dims=64).run_id()
    other = RunConfig(dataset="features:/" + "x" * 301 + ".npz", dims=64).run_id()
    assert len(long.encode()) == 247 and long.endswith("-nngk-d64-s0-" + long[-8:])
    assert long != other


@pytest.mark.parametrize("command", ["run", "suite"])
@pytest.mark.parametrize("inside", [".", "maple/results"])
def test_a_results_folder_inside_the_image_folder_is_refused(tmp_path, command, inside):
    # Run from inside the folder: the runs went into the user's data, and the next run read
    # the report's images as a ninth class.
    root = make_folder(tmp_path, classes=4, per_class=3)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    loss = "--loss" if command == "run" else "--losses"
    out = cli(command, "--dataset", f"folder:{root}", loss, "contrastive",
              "--results", root / inside, catch_exceptions=True)  # fmt: skip
    assert out.exit_code == 1, out.output
    (error,) = [line for line in out.output.splitlines() if line.startswith("Error: ")]
    assert f"lies inside the data folder {root}" in error and "Traceback" not in out.output
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


@pytest.mark.parametrize("name, says", [("folder:", "folder:PATH"), ("features:", "FILE.npz")])
def test_a_folder_or_features_data_set_without_its_path_is_refused(tmp_path, name, says):
    error = refused(tmp_path / "r", "--dataset", name, "--loss", "contrastive")
    assert f"--dataset {name} names no" in error and says in error


def test_features_refuse_an_out_in_the_image_folder_or_unwritable_before_extracting(
    tmp_path, monkeypatch
):
    import bench.train.extract as extract

    def never(*args, **kwargs):
        raise AssertionError("extracted before the refusal")

    monkeypatch.setattr(extract, "extract_features", never)
    root = make_folder(tmp_path, classes=4, per_class=3)
    (tmp_path / "afile").write_text("")
    for out, says in [
        (root / "maple" / "f.npz", "lies inside the data folder"),
        (tmp_path / "afile" / "f.npz", "its folder cannot be written"),
    ]:
        result = cli("features", "--dataset", f"folder:{root}", "--out", out,
                     catch_exceptions=True)  # fmt: skip
        assert result.exit_code == 1 and f"Error: --out {out}" in result.output
        assert says in result.output and not out.exists()


def test_features_of_other_settings_get_a_file_of_their_own(tmp_path, monkeypatch):
    # Before: the default file named the data set, protocol, backbone and weights only, so a
    # second extraction at another --seed (or --resize, --crop) said "exists, skipped" and kept
    # the first's features.
    import bench.train.extract as extract

    extracted = []

    def fake(*args, **kwargs):
        extracted.append(args[6])  # the seed
        rows = np.arange(8, dtype=np.float32).reshape(4, 2) + args[6]
        return rows, np.array([0, 0, 1, 1]), np.array(["train", "train", "test", "test"])

    monkeypatch.setattr(extract, "extract_features", fake)
    monkeypatch.chdir(tmp_path)
    for seed in ("0", "1", "1"):
        out = cli("features", "--backbone", "small_cnn", "--pretrained", "none", "--seed", seed)
        assert out.exit_code == 0, out.output
    assert extracted == [0, 1]  # the third: the second's file, skipped
    names = sorted(p.name for p in (tmp_path / "results" / "features").iterdir())
    assert names == ["digits-metric-small_cnn-none-seed-1.npz", "digits-metric-small_cnn-none.npz"]


@pytest.mark.parametrize(
    "given, message",
    [
        # Before: each named a run id of its own for the very same training.
        ({"optimizer": "adam", "momentum": 0.5}, "--momentum applies to sgd and rmsprop, not adam"),
        ({"val_split": "classes:1/4", "val_fraction": 0.0}, "holds out a fold of the classes"),
    ],
)
def test_a_setting_given_that_would_change_nothing_is_refused(given, message):
    with pytest.raises(ValueError, match=message):
        make_configs("digits", "contrastive", (8,), {}, **given)


def test_a_validation_fraction_beside_a_published_validation_split_is_refused():
    # Before: Flowers102's classify runs validated on its published split whatever the
    # fraction, under a run id and a report label ("validation fraction 0.4") of their own.
    with pytest.raises(ValueError, match="flowers102 has its own validation split"):
        make_configs("flowers102", "nngk", (8,), {}, protocol="classify", val_fraction=0.4)
    (cfg,) = make_configs("flowers102", "nngk", (8,), {}, val_fraction=0.4)  # metric: used
    assert cfg.val_fraction == 0.4


def test_a_schedule_step_that_never_comes_is_refused_by_run_not_by_a_trial(tmp_path):
    from bench.train.option_checks import check_steps_come

    out = cli("run", "--dataset", "digits", "--schedule", "step:5:0.1", "--epochs", "5",
              "--results", tmp_path)  # fmt: skip
    assert out.exit_code == 1 and "a step after epoch 5 never comes in a run of 5" in out.output
    (cfg,) = make_configs("digits", "contrastive", (8,), {}, schedule="step:5:0.1", epochs=5)
    with pytest.raises(ValueError, match="never comes"):  # a tuning trial makes it all the same
        check_steps_come(cfg)
    (cfg,) = make_configs("digits", "contrastive", (8,), {}, schedule="step:4:0.1", epochs=5)
    check_steps_come(cfg)  # a step before the last epoch: taken


def test_a_loss_on_the_unit_sphere_at_one_dimension_is_refused(tmp_path):
    # Before: --dims 1 contrastive trained nothing (loss 2.5 at every step), scored chance, exit 0.
    args = ["--dataset", "digits", "--dims", "1", "--results", tmp_path]
    out = cli("run", "--loss", "contrastive", *args)
    assert out.exit_code == 1 and "--dims 1: contrastive's embeddings lie on the unit" in out.output
    assert not tmp_path.exists() or not any(p.name.startswith("digits") for p in tmp_path.iterdir())


def test_a_gap_embedding_of_another_size_says_which_dims_it_has():
    from bench.models.backbones import check_embedding

    with pytest.raises(ValueError, match="64 dims .*; got dims=8: give --dims 64, or --embedding"):
        check_embedding("small_cnn", "gap", 8)


def test_class_balanced_batches_of_one_image_a_class_are_refused(tmp_path):
    # Before: contrastive --train-per-class 1 trained on pairs of an image and itself, exit 0,
    # and wrote NaN training metrics.
    args = [
        "--dataset",
        "glyphs:classes=24,instances=6",
        "--train-per-class",
        "1",
        "--batch-size",
        "4",
    ]
    out = cli("run", "--loss", "contrastive", *args, "--m-per-class", "2", "--results", tmp_path)
    assert out.exit_code == 1 and "holds one image (--train-per-class 1)" in out.output
    assert "positives would be an image and itself" in out.output
