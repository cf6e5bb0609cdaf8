"""A class fold holds out validation classes from among the training classes; the training
classes are still numbered 0..T-1 (what a classifier head needs: arcface, softmax, the proxy
losses), every split keeps one number per class, and the class names follow the numbers."""

import numpy as np
import pytest

from bench.data.datasets import load_dataset
from bench.data.splits import training_classes_first
from tests.conftest import cli


def test_training_classes_come_first_and_an_order_already_so_is_kept():
    labels = np.array([10, 11, 12, 13, 14, 10, 14, 12])
    numbered, order = training_classes_first(labels, np.array([0, 4, 5, 6]))  # 10 and 14 train
    assert order.tolist() == [0, 4, 1, 2, 3]
    assert numbered.tolist() == [0, 2, 3, 4, 1, 0, 1, 3]
    numbered, order = training_classes_first(labels, np.array([0, 1, 5]))  # 10, 11: first already
    assert order.tolist() == [0, 1, 2, 3, 4] and numbered.tolist() == (labels - 10).tolist()


@pytest.mark.parametrize("val_split", ["classes:0/2", "classes:1/2", "classes", "images"])
def test_digits_training_labels_are_the_first_numbers_under_any_validation(val_split):
    data = load_dataset("digits", val_split=val_split)
    train = np.unique(data.train.labels)
    assert train.tolist() == list(range(data.num_train_classes))
    names = np.array(data.class_names)
    seen = set(names[train])
    if val_split.startswith("classes"):
        assert not seen & set(names[np.unique(data.val.labels)])  # held-out classes
    assert set(names[np.unique(data.test.labels)]) == {"5", "6", "7", "8", "9"}
    assert seen | set(names[np.unique(data.val.labels)]) == {"0", "1", "2", "3", "4"}
    for split in (data.train, data.val, data.test):  # a digit's images are alike across splits
        assert len(np.unique(split.labels)) == len(set(names[split.labels]))


def test_a_classifier_head_loss_tunes_on_class_folds(tmp_path):
    args = ["tune", "--dataset", "digits", "--dims", "8", "--loss", "arcface", "--trials", "1"]
    out = cli(*args, "--epochs", "1", "--folds", "2", "--no-retrain", "--results", tmp_path)
    assert out.exit_code == 0, out.output
    assert "failed" not in out.output.lower() and "IndexError" not in out.output
