"""Each loss gets the batches it declares: N-pair N classes x 2, NCA and every pair or triplet
loss class-balanced, the rest random; --m-per-class overrides."""

import numpy as np
import pytest

from bench.train.loaders import epoch_loader, load_data, train_loader
from bench.train.presets import make_configs
from losses import build_loss
from tests.conftest import cli

DATA = "glyphs:classes=80,instances=6,size=12"  # 40 training classes


def batch_labels(loss: str, **overrides) -> list[np.ndarray]:
    (cfg,) = make_configs(DATA, loss, (8,), {}, **overrides)
    data = load_data(cfg)
    built = build_loss(
        loss, cfg.loss_params, num_train=len(data.train), num_classes=data.num_train_classes, dims=8
    )
    loader = epoch_loader(train_loader(cfg, built, data), seed=0)
    return [labels.numpy() for _, labels, _ in loader]


def class_counts(labels: np.ndarray) -> set[int]:
    return set(np.unique(labels, return_counts=True)[1].tolist())


def test_npair_batches_hold_n_distinct_classes_times_two():
    batches = batch_labels("npair")
    assert batches and all(len(b) == 64 for b in batches)
    for labels in batches:
        assert class_counts(labels) == {2} and len(np.unique(labels)) == 32


def test_m_per_class_overrides_the_declaration():
    for labels in batch_labels("npair", m_per_class=8):
        assert class_counts(labels) == {8} and len(np.unique(labels)) == 8


@pytest.mark.parametrize("loss", ["nca", "contrastive", "triplet", "lifted", "triplet-nca"])
def test_pair_and_triplet_losses_and_nca_get_class_balanced_batches(loss):
    for labels in batch_labels(loss):
        assert class_counts(labels) == {4}  # the glyphs preset: 16 classes x 4


def test_softmax_batches_are_random():
    counts = set().union(*(class_counts(b) for b in batch_labels("softmax")))
    assert len(counts) > 1  # not a fixed number per class


def test_run_records_the_sampler(tmp_path):
    args = ["run", "--loss", "npair", "--dataset", DATA, "--epochs", "1", "--dims", "8"]
    out = cli(*args, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    (run,) = [p for p in tmp_path.iterdir() if "-npair-" in p.name]
    assert '"sampler": "32 classes x 2"' in (run / "metrics.json").read_text()
