"""Linear metric learning with the pairwise hinge loss (Sharma et al. 2015 §2.1), and the pair
sampling and mini-batch SGD loop it shares with NML (`bench/nml.py`).

Both minimise sum over pairs of max(0, m - y_ij (b - d^2(x_i, x_j))), with y = +1 for a similar
and -1 for a dissimilar pair: similar pairs are pushed below b - m, dissimilar ones above b + m.
The paper visits one pair per SGD iteration; here a mini-batch of B pairs takes one step with
the sum of their sub-gradients, which is B of the paper's iterations at the same learning rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.decomposition import PCA
from tqdm import tqdm

PAIRS = 500_000  # Sharma et al. 2015 §4: up to 500,000 similar and dissimilar training pairs
ITERATIONS = 1_000_000  # and one million SGD iterations (one pair each)
SMALL_STEP = 1 << 20  # pairs x parameters of a step below which one thread is faster

# A function of (parameters, x_i, x_j, y) giving the sum of the pairs' sub-gradients.
Gradient = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def _encode(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(i, j).astype(np.int64) * n + np.maximum(i, j)


def _distinct(
    draw: Callable[[int], tuple[np.ndarray, np.ndarray]],
    want: int,
    n: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """`want` distinct unordered pairs from `draw` (fewer if it keeps repeating itself)."""
    codes = np.zeros(0, dtype=np.int64)
    for _ in range(50):
        i, j = draw(2 * (want - len(codes)) + 16)
        codes = np.unique(np.concatenate([codes, _encode(i, j, n)]))
        if len(codes) >= want:
            break
    if len(codes) > want:  # a random subset: np.unique sorted them
        codes = rng.choice(codes, want, replace=False)
    return codes // n, codes % n


def sample_pairs(
    labels: np.ndarray, n_pairs: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to n_pairs distinct pairs (i, j, y): half similar (y = +1), half dissimilar (y = -1),
    each half capped by how many such pairs exist."""
    labels = np.asarray(labels)
    n = len(labels)
    rng = np.random.default_rng(seed)
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    members = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    n_similar = int((counts * (counts - 1) // 2).sum())
    n_dissimilar = n * (n - 1) // 2 - n_similar

    def similar(size: int) -> tuple[np.ndarray, np.ndarray]:
        i = rng.integers(0, n, size)
        c = inverse[i]
        j = members[starts[c] + rng.integers(0, counts[c])]
        keep = i != j
        return i[keep], j[keep]

    def dissimilar(size: int) -> tuple[np.ndarray, np.ndarray]:
        i, j = rng.integers(0, n, size), rng.integers(0, n, size)
        keep = labels[i] != labels[j]
        return i[keep], j[keep]

    half = n_pairs // 2
    si, sj = _distinct(similar, min(n_pairs - half, n_similar), n, rng)
    di, dj = _distinct(dissimilar, min(half, n_dissimilar), n, rng)
    y = np.concatenate([np.ones(len(si)), -np.ones(len(di))]).astype(np.float32)
    order = rng.permutation(len(y))
    return np.concatenate([si, di])[order], np.concatenate([sj, dj])[order], y[order]


def hinge_loss(d2: torch.Tensor, y: torch.Tensor, bias: float, margin: float) -> torch.Tensor:
    """Per pair: max(0, m - y (b - d^2))."""
    return torch.relu(margin - y * (bias - d2))


@contextmanager
def threads_for(work: int, small: int = SMALL_STEP) -> Iterator[None]:
    """One torch thread for steps of fewer than `small` values: such steps run many times
    faster on one thread than on several (thread start-up dominates, and on a busy machine
    the threads wait for each other); larger ones (4096-d features) keep every thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1 if work < small else before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def pair_sgd(
    params: torch.Tensor,
    gradient: Gradient,
    x: torch.Tensor,
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    iterations: int,
    batch_size: int,
    lr: float,
    seed: int,
    desc: str,
    project: Callable[[torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """Plain SGD over the pairs in a random order (reshuffled after each pass), `batch_size`
    pairs a step, `iterations` pair visits in all; `project` (in place) after every step."""
    i, j, y = (torch.from_numpy(np.asarray(a)) for a in pairs)
    gen = torch.Generator().manual_seed(seed)
    steps = -(-iterations // batch_size)
    order = torch.randperm(len(y), generator=gen)
    at = 0
    with threads_for(batch_size * params.numel()):
        for _ in tqdm(range(steps), desc=desc, leave=False, mininterval=1.0):
            if at + batch_size > len(order):
                order, at = torch.randperm(len(y), generator=gen), 0
            batch = order[at : at + batch_size]
            at += batch_size
            params -= lr * gradient(params, x[i[batch]], x[j[batch]], y[batch])
            if project is not None:
                project(params)
    return params


def linear_distances(proj: torch.Tensor, xi: torch.Tensor, xj: torch.Tensor) -> torch.Tensor:
    """Squared distances ||L x_i - L x_j||^2 of each pair (Eq. 2)."""
    return ((xi - xj) @ proj.T).pow(2).sum(1)


def linear_gradient(bias: float, margin: float) -> Gradient:
    """Sum over the pairs of the hinge's sub-gradient in L: y 2 L (x_i - x_j)(x_i - x_j)^T where
    the hinge is active."""

    def gradient(proj, xi, xj, y):
        diff = xi - xj
        projected = diff @ proj.T
        active = hinge_loss(projected.pow(2).sum(1), y, bias, margin) > 0
        coef = (2 * y * active)[:, None] * projected
        return coef.T @ diff

    return gradient


def pca_rows(x: np.ndarray, dims: int, seed: int) -> np.ndarray:
    """The top `dims` principal directions of x (rows, orthonormal)."""
    return PCA(n_components=dims, random_state=seed).fit(x).components_.astype(np.float32)


@dataclass
class PairHinge:
    """What linear-ml and NML share: the pairwise hinge loss's bias b and margin m, `pairs`
    training pairs, `iterations` pair visits, `batch_size` pairs a step and the learning rate
    (linear-ml's defaults; NML declares its own b, m and lr)."""

    dims: int
    seed: int = 0
    bias: float = 1.0
    margin: float = 0.2
    pairs: int = PAIRS
    iterations: int = ITERATIONS
    lr: float = 0.01
    batch_size: int = 100

    def learned(
        self,
        start: np.ndarray,
        gradient: Callable[[float, float], Gradient],
        x: np.ndarray,
        y: np.ndarray,
        lr: float,
        desc: str,
        project: Callable[[torch.Tensor], None] | None = None,
    ) -> np.ndarray:
        """The parameters `start` after `pair_sgd` on the hinge (`gradient(bias, margin)`)
        over `pairs` sampled pairs of the normalised features x."""
        return pair_sgd(
            torch.from_numpy(start),
            gradient(self.bias, self.margin),
            torch.from_numpy(x),
            sample_pairs(y, self.pairs, self.seed),
            self.iterations,
            self.batch_size,
            lr,
            self.seed,
            desc=f"{desc} d={self.dims}",
            project=project,
        ).numpy()


@dataclass
class LinearML(PairHinge):
    """Linear metric learning (Sharma et al. 2015 §2.1): L (d x F) learned by SGD on the pairwise
    hinge loss over L2-normalised features; b = 1, m = 0.2, 500,000 pairs and 1,000,000 iterations
    as in the paper. It gives neither the learning rate nor the initialisation: L starts from the
    PCA projection, and lr = 0.01 a pair is the best of 0.01, 0.03 and 0.1 on the validation split
    of digits (classify protocol; fitted on the training split, mprec@10 at d = 8 and 16: 0.886,
    0.885, 0.875 on average)."""

    def fit(self, x: np.ndarray, y: np.ndarray) -> LinearML:
        x = l2_normalise(x)
        start = pca_rows(x, self.dims, self.seed)
        self.projection = self.learned(start, linear_gradient, x, y, self.lr, "linear-ml")
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return l2_normalise(x) @ self.projection.T
