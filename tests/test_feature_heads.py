"""Any loss trained as a small head on cached feature vectors (`features:PATH.npz`)."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bench.cli import main
from bench.data.datasets import load_dataset, train_classes_first
from bench.evaluation.metrics import evaluate
from bench.models.embedding import build_model
from bench.models.small import MLPHead


def write_features(path, n_per_class=30, classes=(10, 11, 12, 20, 21, 22), dims=12, val=True):
    """Class-disjoint splits: the first three classes train (and validate), the rest test."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(max(classes) + 1, dims)) * 3
    labels = np.repeat(classes, n_per_class)
    features = (centres[labels] + rng.normal(size=(len(labels), dims))).astype(np.float32)
    split = np.where(np.isin(labels, classes[:3]), "train", "test")
    if val:
        split[(split == "train") & (np.arange(len(labels)) % 5 == 0)] = "val"
    np.savez(path, features=features, labels=labels, split=split)
    return features, labels, split


def test_training_classes_are_numbered_first_in_every_split():
    train, test = train_classes_first(np.array([7, 3, 7]), np.array([1, 3, 9]))
    assert train.tolist() == [1, 0, 1] and test.tolist() == [2, 0, 3]


@pytest.mark.parametrize("val", [True, False])
def test_feature_file_loads_as_splits(val, tmp_path):
    path = tmp_path / "f.npz"
    features, labels, split = write_features(path, val=val)
    data = load_dataset(f"features:{path}", val_fraction=0.2)
    assert data.in_channels == 12 and data.num_train_classes == 3
    assert len(data.test) == (split == "test").sum()
    np.testing.assert_array_equal(data.test.inputs(), features[split == "test"])
    assert set(data.train.labels) == {0, 1, 2} and set(data.test.labels) == {3, 4, 5}
    n_train = np.isin(labels, (10, 11, 12)).sum()
    assert len(data.train) + len(data.val) == n_train and len(data.val) == n_train // 5


def test_mlp_and_linear_heads_embed_vectors():
    assert MLPHead(12).out_features == 512
    assert build_model("mlp", 16, "none", 12)(torch.randn(4, 12)).shape == (4, 16)
    linear = build_model("linear", 8, "none", 12)
    assert sum(p.numel() for p in linear.parameters()) == 12 * 8 + 8  # a projection only
    with pytest.raises(ValueError, match="takes embedding='fc' only"):
        build_model("mlp", 512, "none", 12, embedding="gap")


@pytest.mark.parametrize(
    "args",
    [
        ["--loss", "nngk"],
        ["--loss", "softmax"],
        ["--loss", "triplet", "--backbone", "linear", "--dims", "8"],
    ],
)
def test_losses_train_a_head_on_cached_features(args, tmp_path):
    path = tmp_path / "f.npz"
    features, labels, split = write_features(path)
    results = tmp_path / "results"
    cmd = ["run", "--dataset", f"features:{path}", "--epochs", "2", *args, "--results", results]
    out = CliRunner().invoke(main, [str(a) for a in cmd], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    runs = {
        (lambda m: m.get("features") or m["loss"])(json.loads((p / "metrics.json").read_text())): p
        for p in results.iterdir()
        if (p / "metrics.json").is_file()
    }
    loss = args[1]
    metrics = json.loads((runs[loss] / "metrics.json").read_text())
    saved = np.load(runs[loss] / "test_embeddings.npz")
    assert metrics["map@r"] == pytest.approx(
        evaluate(saved["embeddings"], saved["labels"]).metrics["map@r"]
    )
    assert saved["embeddings"].shape[1] == (8 if "--dims" in args else 64)
    # The raw-inputs baseline is the cached features themselves, L2-normalised.
    baseline = json.loads((runs["raw inputs"] / "metrics.json").read_text())
    test = features[split == "test"]
    unit = test / np.linalg.norm(test, axis=1, keepdims=True)
    raw = evaluate(unit, np.searchsorted([20, 21, 22], labels[split == "test"])).metrics
    assert baseline["map@r"] == pytest.approx(raw["map@r"]) and baseline["dims"] == 12


def test_a_bad_features_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, features=np.zeros((4, 3), np.float32), labels=np.arange(4))
    out = CliRunner().invoke(main, ["run", "--dataset", f"features:{path}", "--results", tmp_path])
    assert out.exit_code == 1
    errors = [line for line in out.output.splitlines() if line.startswith("Error")]
    assert "missing array split" in errors[0] and errors == out.output.strip().splitlines()[-1:]
    assert not any(tmp_path.glob("*/metrics.json"))


@pytest.mark.parametrize(
    "dataset, backbone, says",
    [
        ("digits", "linear", "--backbone linear takes feature vectors (--dataset features:"),
        ("digits", "mlp", "--backbone mlp takes feature vectors"),
        ("FEATURES", "small_cnn", "--backbone small_cnn takes images, not a features file's"),
    ],
)
def test_a_backbone_for_the_other_kind_of_input_is_refused_before_anything_is_written(
    tmp_path, dataset, backbone, says
):
    # Before: torch's "mat1 and mat2 shapes cannot be multiplied", after a baseline of the
    # raw inputs labelled as the untrained head had been written, and a stub run folder.
    if dataset == "FEATURES":
        write_features(tmp_path / "f.npz")
        dataset = f"features:{tmp_path / 'f.npz'}"
    results = tmp_path / "results"
    cmd = ["run", "--dataset", dataset, "--backbone", backbone, "--pretrained", "none",
           "--loss", "contrastive", "--epochs", "1", "--dims", "8",
           "--results", results]  # fmt: skip
    out = CliRunner().invoke(main, [str(a) for a in cmd])
    assert out.exit_code == 1, out.output
    errors = [line for line in out.output.splitlines() if line.startswith("Error")]
    assert errors == out.output.strip().splitlines()[-1:] and says in errors[0], out.output
    assert not results.exists()
