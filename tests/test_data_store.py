import json

import numpy as np
import pytest
import torch

from bench.data.datasets import load_dataset
from bench.data.splits import carve_validation
from bench.data.tensor_sets import random_shift
from bench.runs import store
from bench.util import atomic
from bench.util.atomic import atomic_write_json


def test_digits_protocol_splits_classes_and_carves_validation_from_train():
    data = load_dataset("digits", val_fraction=0.2)
    n_train, n_val, n_test = len(data.train), len(data.val), len(data.test)
    assert n_train + n_val == 901 and n_test == 896  # digits 0-4 / 5-9
    assert n_val == pytest.approx(0.2 * 901, abs=1)
    assert sorted(np.unique(data.train.labels)) == [0, 1, 2, 3, 4]
    assert sorted(np.unique(data.val.labels)) == [0, 1, 2, 3, 4]
    assert data.num_train_classes == 5 and data.in_channels == 1
    # The test split holds the other five classes: none of its images is a training image.
    train = {data.train.images[i].numpy().tobytes() for i in range(n_train)}
    val = {data.val.images[i].numpy().tobytes() for i in range(n_val)}
    assert not train & val
    x, y, i = data.test[3]
    assert x.shape == (1, 8, 8) and i == 3 and 5 <= y <= 9  # the digit itself


def test_validation_split_is_stratified_and_fixed():
    labels = np.repeat([0, 1, 2, 3], 25)
    tr, va = carve_validation(labels, 0.2)
    assert np.bincount(labels[va]).tolist() == [5, 5, 5, 5]
    assert np.array_equal(va, carve_validation(labels, 0.2)[1])
    assert len(carve_validation(labels, 0.0)[1]) == 0


def test_train_items_are_shifted_and_eval_items_are_not():
    data = load_dataset("digits")
    torch.manual_seed(0)
    shifted = [torch.equal(data.train[0][0], data.train_eval[0][0]) for _ in range(20)]
    assert not all(shifted)
    assert torch.equal(data.train_eval[0][0], data.train_eval[0][0])
    img = torch.arange(16.0).reshape(1, 4, 4)
    out = random_shift(img, 1)
    assert out.shape == img.shape and out.sum() <= img.sum()


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown data set 'cars' \(did you mean cars196\?\); expected one of: digits, ",
    ):
        load_dataset("cars")


def test_atomic_writes_leave_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "run" / "metrics.json"
    atomic_write_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "fsync", boom)
    with pytest.raises(OSError):
        atomic_write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]


def test_a_run_is_finished_only_with_metrics(tmp_path):
    run = tmp_path / "r"
    atomic_write_json(run / "config.json", {})
    assert not store.is_finished(run)
    runs, problems = store.scan_runs(tmp_path)
    assert runs == [] and problems == ["r: unfinished (no metrics.json)"]
    atomic_write_json(run / "metrics.json", {"map@r": 0.5})
    assert store.is_finished(run)
    assert store.scan_runs(tmp_path)[0][0][1] == {"map@r": 0.5}


def test_an_interrupted_swap_brings_the_old_run_back(tmp_path):
    run, old = tmp_path / "r", tmp_path / ".r.old"
    atomic_write_json(old / "metrics.json", {"map@r": 0.5})  # renamed away, rerun not in place
    store.recover_run(run)
    assert json.loads((run / "metrics.json").read_text()) == {"map@r": 0.5} and not old.exists()
    staged = store.staging_folder(run)
    atomic_write_json(staged / "metrics.json", {"map@r": 0.6})
    store.replace_run(staged, run)
    assert json.loads((run / "metrics.json").read_text()) == {"map@r": 0.6}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
