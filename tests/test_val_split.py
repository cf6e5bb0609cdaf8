"""A class-disjoint validation split (--val-split classes) for the metric protocol."""

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.data.datasets import load_dataset
from bench.data.splits import carve_validation
from bench.runs.config import HASHED_IF_SET, NOT_HASHED, RunConfig


def test_whole_last_classes_are_held_out():
    labels = np.repeat([3, 1, 4, 0, 2, 5], 4)
    train, val = carve_validation(labels, 0.2, by_classes=True)
    assert set(labels[val]) == {4, 5}  # at least two classes, the last ones
    assert set(labels[train]) == {0, 1, 2, 3}
    assert sorted([*train, *val]) == list(range(len(labels)))
    _, val = carve_validation(np.repeat(np.arange(10), 2), 0.5, by_classes=True)
    assert len(val) == 10  # half of ten classes
    with pytest.raises(
        ValueError, match="at least 4 training classes, 2 to validate on and 2 to train on; got 3"
    ):
        carve_validation(np.arange(3), 0.2, by_classes=True)


def test_digits_validate_on_training_classes_never_trained_on():
    data = load_dataset("digits", val_split="classes")
    assert set(data.train.labels) == {0, 1, 2} and data.num_train_classes == 3
    assert set(data.val.labels) == {3, 4} and set(data.test.labels) == {5, 6, 7, 8, 9}
    default = load_dataset("digits")
    assert len(data.train) + len(data.val) == len(default.train) + len(default.val)


def test_the_default_keeps_every_earlier_run_name():
    cfg = RunConfig()
    fields = {k: v for k, v in cfg.to_dict().items() if k not in {*NOT_HASHED, *HASHED_IF_SET}}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    assert cfg.run_id().endswith(digest)
    assert RunConfig(val_split="classes").run_id() != cfg.run_id()


def test_class_validation_outside_the_metric_protocol_is_a_one_line_error(tmp_path):
    args = ["run", "--protocol", "classify", "--val-split", "classes", "--results", tmp_path]
    out = CliRunner().invoke(main, [str(a) for a in args])
    errors = [line for line in out.output.splitlines() if line.startswith("Error")]
    assert out.exit_code == 1 and errors == out.output.strip().splitlines()[-1:]
    assert (
        "applies to the metric, query-gallery and cross-style protocols only" in errors[0]
        and "Traceback" not in out.output
    )
    assert not list(tmp_path.iterdir())


def test_a_run_records_its_validation_split(tmp_path):
    args = "run --dataset digits --loss softmax --dims 16 --epochs 1 --val-split classes"
    out = CliRunner().invoke(main, [*args.split(), "--results", str(tmp_path)])
    assert out.exit_code == 0, out.output
    (run,) = [p for p in tmp_path.glob("digits-softmax-*") if (p / "metrics.json").is_file()]
    assert json.loads((run / "metrics.json").read_text())["val_split"] == "classes"
    assert json.loads((run / "config.json").read_text())["val_split"] == "classes"
    train = np.load(run / "train_embeddings.npz")
    assert set(train["labels"]) == {0, 1, 2}


def test_too_few_images_per_class_says_how_many_are_needed(tmp_path, monkeypatch):
    from tests.fixtures.folder import make_folder
    from tests.test_protocols import FAST

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path, classes=4, per_class=2)  # 2 training classes x 2 images
    with pytest.raises(ValueError, match="needs at least 5 images in each of the 2 training"):
        carve_validation(np.repeat([0, 1], 2), 0.2)
    args = ["run", "--loss", "softmax", "--dataset", f"folder:{root}", *FAST]
    out = CliRunner().invoke(main, [*args, "--results", str(tmp_path / "r")])
    assert out.exit_code != 0 and "Traceback" not in out.output
    (line,) = [x for x in out.output.splitlines() if x.startswith("Error: ")]
    assert "needs at least 5 images" in line and "has 2" in line
    assert "--val-split classes" in line and "--val-fraction" in line
    # the classify protocol refuses --val-split classes: its error does not advise it
    with pytest.raises(ValueError, match="needs at least 5") as err:
        carve_validation(np.repeat([0, 1], 2), 0.2, classes_allowed=False)
    assert "--val-split classes" not in str(err.value) and "--val-fraction 0" in str(err.value)


def test_val_fraction_zero_trains_on_every_image_and_tests_the_last_epoch(tmp_path):
    args = ["--loss", "softmax", "--dataset", "digits", "--epochs", "2", "--dims", "8"]
    out = CliRunner().invoke(
        main, ["run", *args, "--val-fraction", "0", "--results", str(tmp_path)]
    )
    assert out.exit_code == 0, out.output
    (run,) = [p for p in tmp_path.iterdir() if "-softmax-" in p.name]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["best_epoch"] == 2
    assert json.loads((run / "config.json").read_text())["val_fraction"] == 0
    assert "val_map@r" not in (run / "history.csv").read_text()
    assert len(load_dataset("digits", val_fraction=0).train) == len(
        load_dataset("digits").train
    ) + len(load_dataset("digits").val)
    pairs = CliRunner().invoke(
        main,
        ["run", *args, "--protocol", "pairs", "--val-fraction", "0", "--results", str(tmp_path)],
    )
    assert pairs.exit_code != 0 and "--val-fraction above 0" in pairs.output
