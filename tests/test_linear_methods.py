"""Sharma et al. 2015: NML, linear ML, LMNN against hand-written references, mprec@K, the features
file and the `features` and `linear` commands."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from bench.classic.linear_ml import (
    LinearML,
    hinge_loss,
    linear_distances,
    linear_gradient,
    sample_pairs,
)
from bench.classic.lmnn import lmnn_loss, lmnn_loss_and_gradient, target_neighbours
from bench.classic.methods import METHODS, method_defaults, run_linear_method
from bench.classic.nml import NML, chi2_kernel, nml_gradient
from bench.classic.projections import PCAProjection
from bench.cli import main
from bench.data.feature_files import FeatureSplits
from bench.data.features import load_features
from bench.evaluation.health import embedding_health
from bench.evaluation.metrics import METRIC_KEYS, evaluate
from bench.evaluation.retrieval import mprec_at_k
from bench.protocols import get_protocol

F64 = torch.float64  # the gradient checks compare to 1e-7


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def histograms(n: int, dims: int, seed: int) -> torch.Tensor:
    """L1-normalised non-negative rows with exact zeros, as ReLU features have."""
    x = torch.rand(n, dims, generator=torch.Generator().manual_seed(seed), dtype=F64)
    x[x < 0.3] = 0
    return x / x.sum(1, keepdim=True)


@pytest.fixture
def pair_batch():
    x = histograms(24, 7, seed=0)
    y = torch.tensor([1.0, -1.0, -1.0] * 4, dtype=F64)
    return x[:12], x[12:], y


def kernel_distances(pre: torch.Tensor, xi: torch.Tensor, xj: torch.Tensor) -> torch.Tensor:
    """d^2(x_i, x_j) of each pair in the kernel space (Eq. 8), through the kernel NML embeds by."""
    return (chi2_kernel(pre, xi) - chi2_kernel(pre, xj)).pow(2).sum(1)


def chi2_loop(pre: list[float], x: list[float]) -> float:
    return sum(2 * p * v / (p + v) for p, v in zip(pre, x, strict=True) if p + v > 0)


def test_nml_loss_equals_a_plain_loop_over_pairs(pair_batch) -> None:
    xi, xj, y = pair_batch
    pre = histograms(3, 7, seed=1)
    pre[0, :3] = 0  # zero entries of a pre-image where the features are zero too
    expected = 0.0
    for a, b, s in zip(xi.tolist(), xj.tolist(), y.tolist(), strict=True):
        d2 = sum((chi2_loop(p, a) - chi2_loop(p, b)) ** 2 for p in pre.tolist())
        expected += max(0.0, 0.02 - s * (0.1 - d2))
    got = hinge_loss(kernel_distances(pre, xi, xj), y, bias=0.1, margin=0.02).sum()
    assert float(got) == pytest.approx(expected, rel=1e-10)
    fitted = NML(dims=3)
    fitted.pre_images = pre.numpy()  # the embedding's distances are the loss's
    embedded = fitted.transform(xi.numpy()) - fitted.transform(xj.numpy())
    np.testing.assert_allclose((embedded**2).sum(1), kernel_distances(pre, xi, xj), rtol=1e-6)
    assert chi2_kernel(xi[:1], xi[:1]).item() == pytest.approx(1.0)  # K(x, x) = 1


def test_nml_gradient_is_the_derivative_of_its_loss(pair_batch) -> None:
    xi, xj, y = pair_batch
    pre = histograms(3, 7, seed=2)
    pre[1, 2] = 0
    auto = pre.clone().requires_grad_(True)
    loss = hinge_loss(kernel_distances(auto, xi, xj), y, bias=0.1, margin=0.02)
    assert 0 < int((loss > 0).sum()) < len(y)  # both active and inactive pairs
    loss.sum().backward()
    torch.testing.assert_close(nml_gradient(0.1, 0.02)(pre, xi, xj, y), auto.grad)


def test_chi2_kernel_derivative_is_the_papers_formula() -> None:
    pre, x = histograms(2, 5, seed=3), histograms(1, 5, seed=4)
    expected = 2 * x[0] ** 2 / (pre + x[0]) ** 2
    expected[(pre + x[0]) == 0] = 0
    auto = pre.clone().requires_grad_(True)
    chi2_kernel(auto, x).sum().backward()
    torch.testing.assert_close(auto.grad, expected)


def test_linear_ml_hinge_and_gradient_against_a_loop(pair_batch) -> None:
    xi, xj, y = pair_batch
    proj = torch.randn(3, 7, generator=torch.Generator().manual_seed(5), dtype=F64)
    expected = 0.0
    for a, b, s in zip(xi, xj, y, strict=True):
        d2 = float(((proj @ a - proj @ b) ** 2).sum())
        expected += max(0.0, 0.2 - float(s) * (1.0 - d2))
    got = hinge_loss(linear_distances(proj, xi, xj), y, bias=1.0, margin=0.2).sum()
    assert float(got) == pytest.approx(expected, rel=1e-10)
    auto = proj.clone().requires_grad_(True)
    hinge_loss(linear_distances(auto, xi, xj), y, 1.0, 0.2).sum().backward()
    torch.testing.assert_close(linear_gradient(1.0, 0.2)(proj, xi, xj, y), auto.grad)


def test_lmnn_loss_against_a_loop_and_its_gradient() -> None:
    gen = torch.Generator().manual_seed(6)
    z, labels = torch.randn(15, 4, generator=gen, dtype=F64), torch.tensor([0, 1, 2] * 5)
    targets, valid = target_neighbours(z, labels, 2)
    proj = torch.randn(2, 4, generator=gen, dtype=F64)
    emb = (z @ proj.T).tolist()
    dist = [[sum((a - b) ** 2 for a, b in zip(p, q, strict=True)) for q in emb] for p in emb]
    expected = 0.0
    for i in range(15):
        for j in targets[i].tolist():
            expected += 0.5 * dist[i][j]
            for m in range(15):
                if labels[m] != labels[i]:
                    expected += 0.5 * max(0.0, 1 + dist[i][j] - dist[i][m])
    auto = proj.clone().requires_grad_(True)
    loss = lmnn_loss(z @ auto.T, labels, targets, valid, slice(0, 15), mu=0.5)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-9)
    loss.backward()
    value, grad = lmnn_loss_and_gradient(proj, z, labels, targets, valid, mu=0.5)
    assert value == pytest.approx(expected, rel=1e-9)
    torch.testing.assert_close(grad, auto.grad)


def test_sample_pairs_are_distinct_and_balanced() -> None:
    labels = np.repeat(np.arange(4), 10)
    i, j, y = sample_pairs(labels, 200, seed=0)
    assert len(y) == 200 and (y == 1).sum() == 100
    assert np.array_equal(labels[i] == labels[j], y == 1) and (i != j).all()
    assert len(set(zip(np.minimum(i, j), np.maximum(i, j), strict=True))) == 200
    # Only 4 * 45 similar pairs exist: that half is capped.
    _, _, y = sample_pairs(labels, 1000, seed=0)
    assert (y == 1).sum() == 180 and (y == -1).sum() == 500


def test_mprec_by_hand() -> None:
    # On a line: 0 and 1 are class 0, 3, 4.5 and 7 class 1. Nearest others of each point:
    # 0: 1, 3, 4.5 | 1: 0, 3, 4.5 | 3: 4.5, 1, 0 | 4.5: 3, 7, 1 | 7: 4.5, 3, 1
    emb = np.array([[0.0], [1.0], [3.0], [4.5], [7.0]])
    labels = np.array([0, 0, 1, 1, 1])
    curve = mprec_at_k(emb, labels, max_k=3)
    # class 0: P@1 = 1, 1; P@2 = 1/2, 1/2; P@3 = 1/3, 1/3.
    # class 1: P@1 = 1, 1, 1; P@2 = 1/2, 1, 1; P@3 = 1/3, 2/3, 2/3.
    expected = [(1 + 1) / 2, (0.5 + 2.5 / 3) / 2, (1 / 3 + 5 / 9) / 2]
    np.testing.assert_allclose(curve, expected)


def test_mprec_against_a_brute_force_loop() -> None:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(60, 5)).astype(np.float32)
    labels = rng.integers(0, 4, 60)
    curve = mprec_at_k(emb, labels, max_k=50)
    per_query = np.zeros((60, 50))
    for q in range(60):
        dist = ((emb - emb[q]) ** 2).sum(1)
        dist[q] = np.inf
        order = np.argsort(dist)
        for k in range(1, 51):
            per_query[q, k - 1] = np.mean(labels[order[:k]] == labels[q])
    expected = np.mean([per_query[labels == c].mean(0) for c in np.unique(labels)], axis=0)
    np.testing.assert_allclose(curve, expected, rtol=1e-6)


def write_npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def good_arrays(n: int = 12) -> dict:
    rng = np.random.default_rng(0)
    split = np.array(["train"] * 6 + ["val"] * 2 + ["test"] * (n - 8))
    return dict(
        features=rng.random((n, 5)).astype(np.float32),
        labels=np.arange(n) % 3,
        split=split,
    )


def test_features_file_is_read_by_split(tmp_path) -> None:
    arrays = good_arrays()
    path = write_npz(tmp_path / "f.npz", **arrays)
    f = load_features(f"features:{path}")
    assert isinstance(f, FeatureSplits) and f.dims == 5
    assert (len(f.train), len(f.val), len(f.test)) == (6, 2, 4)
    np.testing.assert_array_equal(f.test, arrays["features"][8:])
    np.testing.assert_array_equal(f.val_labels, arrays["labels"][6:8])
    assert f.train_val()[0].shape == (8, 5)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"labels": None}, "missing array labels"),
        ({"split": np.array(["train"] * 6 + ["dev"] * 6)}, "split has values 'dev'"),
        ({"split": np.array(["train"] * 12)}, "no row has split 'test'"),
        ({"labels": np.arange(5)}, "labels has shape (5,)"),
        ({"features": np.zeros(12)}, "features has shape (12,)"),
        ({"split": np.zeros(12)}, "split has shape (12,) and dtype float64"),
        # Finite in float32, yet their squared lengths overflow (issue 43: a baseline of zeros).
        ({"features": good_arrays()["features"] * 1e30}, "features reach 9.97e+29 in 12 row(s)"),
    ],
)
def test_bad_features_file_is_a_one_line_error(tmp_path, change, message) -> None:
    arrays = {**good_arrays(), **change}
    path = write_npz(tmp_path / "f.npz", **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(ValueError) as err:
        load_features(f"features:{path}")
    text = str(err.value)
    assert message in text and "\n" not in text
    assert "expected an .npz with arrays features" in text


def test_features_up_to_1e15_load(tmp_path) -> None:
    arrays = good_arrays()
    path = write_npz(tmp_path / "f.npz", **{**arrays, "features": arrays["features"] * 1e15})
    assert load_features(f"features:{path}").train.max() == pytest.approx(9.97e14, rel=0.01)


def test_missing_or_unreadable_features_file(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such file; expected an .npz"):
        load_features(f"features:{tmp_path / 'none.npz'}")
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="not a readable .npz"):
        load_features(f"features:{tmp_path / 'bad.npz'}")
    with pytest.raises(ValueError, match="expected 'digits' or 'features:PATH.npz'"):
        load_features("cub")


def test_digits_features_are_the_metric_protocols_pixels() -> None:
    f = load_features("digits")
    assert f.dims == 64 and set(f.train_labels) == set(f.val_labels) == {0, 1, 2, 3, 4}
    assert set(f.test_labels) == {5, 6, 7, 8, 9} and len(f.test) == 896
    assert f.train.min() == 0 and f.train.max() == 1
    same = load_features("digits", protocol="classify")
    assert set(same.train_labels) == set(same.test_labels) == set(range(10))


def test_nml_needs_non_negative_features(tmp_path) -> None:
    arrays = good_arrays()
    arrays["features"][0, 0] = -1
    path = write_npz(tmp_path / "f.npz", **arrays)
    with pytest.raises(ValueError, match="non-negative features"):
        run_linear_method("nml", f"features:{path}", 2, results=tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_a_fit_that_diverges_is_a_one_line_error_that_writes_no_run(tmp_path) -> None:
    # Issue 43: at --lr 100 linear-ml's SGD overflowed, and faiss failed on the NaN embeddings
    # with a traceback, a run folder left holding only its config.
    args = ["--method", "linear-ml", "--dims", "8", "--pairs", "1000", "--iterations", "2000"]
    out = CliRunner().invoke(main, ["linear", *args, "--lr", "100", "--results", tmp_path])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    (error,) = out.output.split("Error: ")[1:]
    assert error.startswith("linear-ml d=8: the fit diverged") and error.count("\n") == 1
    assert "give a smaller --lr than 100" in out.output
    assert not list(tmp_path.glob("*linear-ml*"))


def test_linear_command_writes_every_method_on_digits(tmp_path) -> None:
    out = cli(
        "linear", "--dims", "8", "--pairs", "4000", "--iterations", "20000", "--results", tmp_path
    )
    assert out.exit_code == 0, out.output
    configs = {p: json.loads((p / "config.json").read_text()) for p in tmp_path.iterdir()}
    runs = {c["method"]: p for p, c in configs.items() if "method" in c}
    assert set(runs) == set(METHODS)
    # and the raw-inputs baseline of the report's table: the test pixels, L2-normalised
    (baseline,) = [p for p, c in configs.items() if c.get("features") == "raw inputs"]
    raw = load_features("digits")
    unit = raw.test / np.linalg.norm(raw.test, axis=1, keepdims=True)
    expected = evaluate(unit, raw.test_labels).metrics["map@r"]
    assert json.loads((baseline / "metrics.json").read_text())["map@r"] == pytest.approx(expected)
    for method, run_dir in runs.items():
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert set(METRIC_KEYS) | {"mprec@1", "mprec@10", "mprec@50"} <= set(metrics)
        assert set(get_protocol("linear").columns) <= set(metrics)  # the report's columns
        assert metrics["loss"] == method and metrics["protocol"] == "linear"
        assert metrics["miner"] is None and metrics["dataset"] == "digits"
        assert metrics["dims"] == (64 if method == "no-projection" else 8)
        assert run_dir.name.startswith(f"digits-linear-{method}-d{metrics['dims']}-s0-")
        curve = pd.read_csv(run_dir / "mprec.csv")
        assert curve["K"].tolist() == list(range(1, 51))
        assert curve["mprec"].iloc[9] == pytest.approx(metrics["mprec@10"])
        emb = np.load(run_dir / "test_embeddings.npz")
        assert emb["embeddings"].shape == (896, metrics["dims"])
        # the report's health table reads these (it left the methods out without them)
        health = embedding_health(emb["embeddings"], emb["labels"], seed=0)
        assert {k: metrics[k] for k in health} == pytest.approx(health, nan_ok=True)
    config = json.loads((runs["nml"] / "config.json").read_text())
    assert config["params"] == {**method_defaults("nml"), "pairs": 4000, "iterations": 20000}
    assert config["params"]["bias"] == 0.1 and config["params"]["margin"] == 0.02
    assert json.loads((runs["pca"] / "config.json").read_text())["params"] == {}
    # A second call skips the finished runs.
    again = cli("linear", "--method", "pca", "--dims", "8", "--results", tmp_path)
    assert again.exit_code == 0 and str(runs["pca"]) in again.output
    assert len(list(tmp_path.iterdir())) == len(METHODS) + 2  # and the two baselines


def test_linear_command_errors_write_nothing(tmp_path) -> None:
    results = tmp_path / "results"
    out = CliRunner().invoke(main, ["linear", "--method", "pca,svm", "--results", results])
    assert out.exit_code != 0
    assert "unknown method 'svm'; expected one of: nml, linear-ml, pca" in out.output
    out = CliRunner().invoke(
        main, ["linear", "--method", "pca", "--pairs", "10", "--results", results]
    )
    assert out.exit_code != 0 and "--pairs applies to nml, linear-ml only" in out.output
    out = CliRunner().invoke(
        main, ["linear", "--method", "pca", "--dims", "65", "--results", results]
    )
    assert out.exit_code != 0 and "exceeds the 64 feature dimensions" in out.output
    for option, value, message in [
        ("--pairs", "0", "0 is not in the range x>=1"),
        ("--lr", "0", "0.0 is not in the range x>0"),
    ]:
        out = CliRunner().invoke(main, ["linear", option, value, "--results", results])
        assert out.exit_code != 0
        assert out.output.strip() == f"Error: Invalid value for '{option}': {message}."
    assert not results.exists()


def test_nml_and_linear_ml_beat_pca_at_8_dims() -> None:
    """Sharma et al. 2015's claim on digits under its own protocol (the same classes in training and
    test; see README): mprec@10 at d = 8, with a tenth of the paper's iterations."""
    f = load_features("digits", protocol="classify")
    x, y = f.train_val()

    def mprec10(method) -> float:
        return mprec_at_k(method.fit(x, y).transform(f.test), f.test_labels)[9]

    pca = mprec10(PCAProjection(8))
    assert mprec10(NML(8, iterations=100_000)) > pca + 0.02
    assert mprec10(LinearML(8, iterations=100_000)) > pca + 0.02


def test_features_command_on_digits_then_linear(tmp_path) -> None:
    path = tmp_path / "digits.npz"
    out = cli("features", "--backbone", "small_cnn", "--pretrained", "none", "--out", path)
    assert out.exit_code == 0, out.output
    with np.load(path) as npz:
        features, labels, split = npz["features"], npz["labels"], npz["split"]
    assert features.dtype == np.float32 and features.min() >= 0 and labels.dtype == np.int64
    assert [int((split == s).sum()) for s in ("train", "val", "test")] == [720, 181, 896]
    assert set(labels[split == "test"]) == {5, 6, 7, 8, 9}
    again = cli("features", "--backbone", "small_cnn", "--pretrained", "none", "--out", path)
    assert again.output == f"{path}: exists, skipped (--force extracts again)\n"
    out = cli(
        "linear",
        "--dataset",
        f"features:{path}",
        "--method",
        "pca",
        "--dims",
        "8",
        "--results",
        tmp_path / "results",
    )
    assert out.exit_code == 0, out.output
    (run_dir,) = (tmp_path / "results").glob("*-linear-*")
    assert run_dir.name.startswith("features-") and "-linear-pca-d8-s0-" in run_dir.name
    (baseline,) = [  # the cached features as they are
        p
        for p in (tmp_path / "results").glob("*-untrained-*")
        if "raw" in (p / "config.json").read_text()
    ]
    assert json.loads((baseline / "metrics.json").read_text())["dims"] == features.shape[1]


def test_features_command_vgg16_fc7_after_relu(tmp_path, monkeypatch) -> None:
    from tests.fixtures.folder import make_folder

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path, classes=4, per_class=6)
    path = tmp_path / "vgg.npz"
    args = ["--backbone", "vgg16", "--pretrained", "none", "--dataset", f"folder:{root}"]
    out = cli("features", *args, "--resize", "32", "--crop", "32", "--out", path)
    assert out.exit_code == 0, out.output
    f = load_features(f"features:{path}")
    assert f.dims == 4096 and f.train.min() == 0 and f.train.max() > 0
    assert set(f.train_labels) == {0, 1} and set(f.test_labels) == {2, 3}
    run_dir = run_linear_method(
        "nml", f"features:{path}", 4, params={"iterations": 500}, results=tmp_path / "results"
    )
    assert (run_dir / "metrics.json").is_file()


def test_features_command_errors_are_one_line(tmp_path) -> None:
    out = CliRunner().invoke(main, ["features", "--dataset", "nope", "--out", tmp_path / "f.npz"])
    assert out.exit_code != 0 and "unknown data set 'nope'" in out.output
    assert not (tmp_path / "f.npz").exists()


def test_features_onto_another_extractions_file_names_whose_it_is(tmp_path, monkeypatch):
    # Before: "exists, skipped", and `linear --dataset features:PATH` then trained on digits.
    import bench.train.extract as extract

    def fake(dataset, *args, **kwargs):
        rows = np.arange(8, dtype=np.float32).reshape(4, 2) + len(dataset)
        return rows, np.array([0, 0, 1, 1]), np.array(["train", "train", "test", "test"])

    monkeypatch.setattr(extract, "extract_features", fake)
    path = tmp_path / "f.npz"
    args = ["features", "--backbone", "small_cnn", "--pretrained", "none", "--out", path]
    assert cli(*args).exit_code == 0
    before = path.read_bytes()
    out = cli(*args, "--dataset", "glyphs:classes=20")
    assert out.exit_code == 1 and out.output == (
        f"Error: --out {path} holds the features of digits (metric, small_cnn, none, seed 0), "
        "not of glyphs:classes=20 (metric, small_cnn, none, seed 0); give another --out (or "
        "leave it out: the default path names the data set and settings), or --force to "
        "replace them\n"
    )
    assert path.read_bytes() == before
    assert cli(*args, "--seed", "1").exit_code == 1  # other settings: not these features either
    assert cli(*args).output == f"{path}: exists, skipped (--force extracts again)\n"
    assert cli(*args, "--dataset", "glyphs:classes=20", "--force").exit_code == 0
    assert path.read_bytes() != before


def test_a_forced_refit_that_fails_keeps_the_finished_run(tmp_path, monkeypatch):
    # As `run --force`: the finished run is replaced only once the refit is written whole.
    run_dir = run_linear_method("pca", "digits", 4, results=tmp_path)
    before = (run_dir / "metrics.json").read_bytes()

    def fail(self, x, y):
        raise RuntimeError("the refit failed")

    monkeypatch.setattr(PCAProjection, "fit", fail)
    with pytest.raises(RuntimeError, match="the refit failed"):
        run_linear_method("pca", "digits", 4, results=tmp_path, force=True)
    assert (run_dir / "metrics.json").read_bytes() == before
    monkeypatch.undo()
    assert run_linear_method("pca", "digits", 4, results=tmp_path, force=True) == run_dir
    assert sorted(p.name for p in tmp_path.iterdir()) == [run_dir.name]  # no staging left


@pytest.mark.parametrize(
    "labels, says", [("one class", "items of 1 class"), ("singletons", "no class with two")]
)
def test_linear_refuses_a_test_split_retrieval_cannot_score(tmp_path, labels, says) -> None:
    # Before: mprec@1 = MAP@R = 1.0 (one class) or MAP@R nan (no class of two), exit 0, with
    # the run and the baselines written.
    rng = np.random.default_rng(0)
    train = np.repeat(np.arange(4), 10)
    test = np.zeros(20, np.int64) if labels == "one class" else np.arange(10, 30)
    features = rng.normal(size=(60, 6)).astype(np.float32)
    split = np.array(["train"] * 40 + ["test"] * 20)
    np.savez(
        tmp_path / "f.npz", features=features, labels=np.concatenate([train, test]), split=split
    )
    out = cli("linear", "--dataset", f"features:{tmp_path / 'f.npz'}", "--method", "pca",
              "--dims", "2", "--results", tmp_path / "r")  # fmt: skip
    assert out.exit_code == 1 and says in out.output and "the test split of features:" in out.output
    assert not (tmp_path / "r").exists()
