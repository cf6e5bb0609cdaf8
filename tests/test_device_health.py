"""The embedding health's parts in torch (issue 44), run here on CPU tensors: the same numbers
as the CPU's numpy and faiss parts, to float64 rounding, on the cases test_health.py checks by
hand, with scikit-learn and with loops."""

import math

import numpy as np
import pytest
import torch

from bench.evaluation import health
from bench.evaluation.device_health import DeviceHealth
from bench.evaluation.health import HEALTH_KEYS, embedding_health
from tests.test_health import axes

CPU = torch.device("cpu")


def both(x: np.ndarray, labels: np.ndarray) -> tuple[dict, dict]:
    return embedding_health(x, labels, seed=3), embedding_health(x, labels, seed=3, device=CPU)


def assert_same_health(numpy_health: dict, torch_health: dict) -> None:
    assert set(torch_health) == set(HEALTH_KEYS)
    for key in HEALTH_KEYS:
        mine, theirs = torch_health[key], numpy_health[key]
        if isinstance(theirs, int):
            assert mine == theirs, key
        elif math.isnan(theirs):
            assert math.isnan(mine), key
        else:
            assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize(
    "n, dims, classes",
    [(400, 24, 4), (20, 64, 3), (60, 6, 5), (3000, 48, 300)],  # covariance, Gram, exact, sampled
)
def test_torch_parts_give_the_cpus_numbers(n, dims, classes):
    rng = np.random.default_rng(n)
    labels = rng.integers(0, classes, n)
    x = (rng.standard_normal((n, dims)) * np.geomspace(10, 0.01, dims)).astype(np.float32)
    x += labels[:, None].astype(np.float32)
    if n == 3000:  # sampled pairs: the same draws, measured on the device
        assert n * (n - 1) // 2 > 2 * health.MAX_PAIRS
    assert_same_health(*both(x, labels))
    assert_same_health(*both(x.astype(np.float64), labels))


def test_torch_parts_on_the_hand_computed_and_undefined_cases():
    three = axes([3, 2, 1], 8)
    for labels in ([0, 0, 1, 1, 2, 2], [0] * 6, list(range(6))):  # classes, one, singletons
        assert_same_health(*both(three, np.array(labels)))
    on = embedding_health(three, np.array([0, 0, 1, 1, 2, 2]), device=CPU)
    assert on["health_pca_first_share"] == pytest.approx(18 / 28)
    assert on["health_intra_class_distance_mean"] == pytest.approx(4.0)
    constant = np.full((6, 4), 0.1, dtype=np.float32)
    assert_same_health(*both(constant, np.array([0, 0, 0, 1, 1, 1])))
    x = three.copy()
    x[0, 0] = np.nan
    assert_same_health(*both(x, np.arange(6)))


def test_pair_distances_in_chunks_are_plain_norms(monkeypatch):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 1024)).astype(np.float32)
    i, j = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    plain = np.linalg.norm((x[i] - x[j]).astype(np.float64), axis=1)
    from bench.evaluation import device_health

    for values in (1 << 10, 1 << 22):  # a pair a chunk, every pair in one
        monkeypatch.setattr(device_health, "CHUNK_VALUES", values)
        np.testing.assert_allclose(DeviceHealth(x, CPU).pair_distances(i, j), plain, rtol=1e-12)


def test_closest_class_means_are_the_nearest_pair_of_means():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 40, 2000)
    x = rng.standard_normal((2000, 32)) + 3 * rng.standard_normal((40, 32))[labels]
    means = np.stack([x[labels == c].mean(axis=0) for c in range(40)])
    gaps = np.linalg.norm(means[:, None] - means[None], axis=2)
    np.fill_diagonal(gaps, np.inf)
    found = DeviceHealth(x, CPU).closest_centroids(labels)
    assert found == pytest.approx(gaps.min(), rel=1e-12)
