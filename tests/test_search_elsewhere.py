"""The searches outside `run` go to the device too (issue 44): `linear`'s evaluation and mprec,
and `visualize`'s galleries. Here the torch path runs on CPU tensors and is checked against
faiss's on sets without ties, where both find the same neighbours in the same order."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bench.cli import main
from bench.evaluation.health import HEALTH_KEYS
from bench.evaluation.retrieval import mprec_at_k
from bench.runs import store
from bench.util import torch_knn
from bench.util.torch_knn import nearest_others

CPU = torch.device("cpu")


def points(n: int = 300, dims: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dims)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 7, 299, 500])  # 500: more than the other rows
def test_each_rows_nearest_others_are_faiss_s(k):
    x = points()
    dist, found = nearest_others(x, k, CPU)
    assert found.shape == dist.shape == (300, min(k, 299))
    faiss_dist, faiss_found = nearest_others(x, k)
    assert np.array_equal(found, faiss_found)
    np.testing.assert_allclose(dist, faiss_dist, rtol=1e-5)
    assert not (found == np.arange(300)[:, None]).any()  # never the row itself


def test_mprec_on_the_device_is_faiss_s():
    x, labels = points(), np.random.default_rng(2).integers(0, 12, 300)
    on_device = mprec_at_k(x, labels, device=CPU)
    assert len(on_device) == 50
    np.testing.assert_array_equal(on_device, mprec_at_k(x, labels))


def test_linear_evaluates_and_ranks_on_the_device_it_is_given(tmp_path, monkeypatch):
    args = ["linear", "--method", "pca", "--dims", "4", "--seeds", "0", "--device", "cpu"]
    assert CliRunner().invoke(main, [*args, "--results", tmp_path / "faiss"]).exit_code == 0
    searched = []
    real = torch_knn.torch_neighbours
    monkeypatch.setattr(torch_knn, "torch_neighbours", lambda *a: searched.append(a) or real(*a))
    monkeypatch.setattr(torch_knn, "search_device", lambda device: CPU)  # the CPU as a GPU
    out = CliRunner().invoke(main, [*args, "--results", tmp_path / "torch"])
    assert out.exit_code == 0, out.output
    # mprec's search and the health's closest class means, and the health of both
    # baselines, given the same search (`Compute`: before, they derived their own from the
    # device, which this test's stand-in did not reach); the evaluator searches with its own
    # chunks of TorchSearch
    assert len(searched) == 4
    (faiss_run,) = (tmp_path / "faiss").glob("digits-linear-pca-*")
    (torch_run,) = (tmp_path / "torch").glob("digits-linear-pca-*")
    faiss_metrics, torch_metrics = store.read_metrics(faiss_run), store.read_metrics(torch_run)
    for key in ("mprec@1", "mprec@10", "map@r", "recall@1"):
        assert torch_metrics[key] == pytest.approx(faiss_metrics[key], abs=1e-6), key
    for key in HEALTH_KEYS:  # the same embedding's health, to float64 rounding
        assert torch_metrics[key] == pytest.approx(faiss_metrics[key], rel=1e-9), key


def test_visualize_refuses_a_device_it_does_not_know(tmp_path):
    out = CliRunner().invoke(main, ["visualize", str(tmp_path), "--device", "tpu"])
    assert out.exit_code == 1 and "unknown --device 'tpu'" in out.output.splitlines()[-1]
