"""Large margin nearest neighbour (Weinberger and Saul, JMLR 2009), Sharma et al. 2015's LMNN
baseline.

metric-learn 0.7.0 (its last release) cannot be used with scikit-learn >= 1.8: it passes
`force_all_finite`, which scikit-learn removed, to `check_X_y`. So this is LMNN's objective
written in torch, full-batch, over chunks of anchors:

    (1 - mu) sum_{i, j~>i} ||L(x_i - x_j)||^2
      + mu sum_{i, j~>i} sum_{l: y_l != y_i} [1 + ||L(x_i - x_j)||^2 - ||L(x_i - x_l)||^2]_+

with j~>i the k target neighbours of i (its nearest of its own class before learning). As the
paper's LMNN(r), the L2-normalised features are first reduced to 256 dimensions by PCA and a
rectangular d x 256 L is learned, starting from the first d principal directions; pca_dims =
dims gives its LMNN(s).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.decomposition import PCA

from bench.classic.linear_ml import l2_normalise, threads_for

CHUNK = 1 << 23  # at most this many anchor x target x impostor values at once
SMALL_LMNN = 1 << 24  # anchor x target x impostor triplets below which one thread is faster


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.pow(2).sum(1)[:, None] + b.pow(2).sum(1)[None] - 2 * a @ b.T).clamp_min(0)


def target_neighbours(z: torch.Tensor, labels: torch.Tensor, k: int):
    """(indices, valid): each row's k nearest others of its class; `valid` is False where its
    class has fewer than k others."""
    rows = max(1, CHUNK // (8 * len(z)))
    idx, dist = [], []
    for start in range(0, len(z), rows):
        part = slice(start, start + rows)
        d = squared_distances(z[part], z)
        other_class = labels[part, None] != labels[None]
        d[other_class] = float("inf")
        d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")
        top = d.topk(min(k, len(z) - 1), dim=1, largest=False)
        idx.append(top.indices)
        dist.append(top.values)
    return torch.cat(idx), torch.isfinite(torch.cat(dist))


def lmnn_loss(
    emb: torch.Tensor,
    labels: torch.Tensor,
    targets: torch.Tensor,
    valid: torch.Tensor,
    rows: slice,
    mu: float,
) -> torch.Tensor:
    """LMNN's objective summed over the anchors `rows` (embeddings already projected)."""
    d_all = squared_distances(emb[rows], emb)
    d_target = d_all.gather(1, targets[rows])
    ok = valid[rows].to(emb.dtype)
    pull = (d_target * ok).sum()
    impostor = (labels[rows, None] != labels[None]).to(emb.dtype)
    hinge = torch.relu(1 + d_target[:, :, None] - d_all[:, None, :])
    push = (hinge * impostor[:, None, :] * ok[:, :, None]).sum()
    return (1 - mu) * pull + mu * push


@torch.no_grad()
def lmnn_loss_and_gradient(
    proj: torch.Tensor,
    z: torch.Tensor,
    labels: torch.Tensor,
    targets: torch.Tensor,
    valid: torch.Tensor,
    mu: float,
) -> tuple[float, torch.Tensor]:
    """LMNN's objective over every anchor and its sub-gradient in L.

    With the active triplets fixed, the objective is sum_ij C_ij ||L(z_i - z_j)||^2 for pair
    weights C (pull and target terms +, impostor terms -), whose gradient is
    2 L Z^T (diag(S 1) - S) Z with S = C + C^T, computed as 2 ((diag(S 1) - S) Z L^T)^T Z
    one chunk of anchors (rows of C) at a time, never holding C whole.
    """
    emb = z @ proj.T
    n = len(z)
    c_emb, ct_emb = torch.zeros_like(emb), torch.zeros_like(emb)
    degree = torch.zeros(n, dtype=emb.dtype)
    loss = 0.0
    rows = max(1, CHUNK // (max(1, targets.shape[1]) * n))
    for start in range(0, n, rows):
        part = slice(start, start + rows)
        d_all = squared_distances(emb[part], emb)
        d_target = d_all.gather(1, targets[part])
        ok = valid[part]
        impostor = labels[part, None] != labels[None]
        margin = 1 + d_target[:, :, None] - d_all[:, None, :]
        active = (margin > 0) & impostor[:, None, :] & ok[:, :, None]
        loss += float((1 - mu) * (d_target * ok).sum() + mu * (margin * active).sum())
        # Pair weights of these anchors' rows of C: pull (1 - mu) and mu per active triplet on
        # (i, j), -mu per active triplet on (i, l).
        weights = torch.zeros_like(d_all)
        on_target = (1 - mu) * ok.to(emb.dtype) + mu * active.sum(2).to(emb.dtype)
        weights.scatter_add_(1, targets[part], on_target)
        weights -= mu * active.sum(1).to(emb.dtype)
        c_emb[part] += weights @ emb
        ct_emb += weights.T @ emb[part]
        degree[part] += weights.sum(1)
        degree += weights.sum(0)
    laplacian_emb = degree[:, None] * emb - c_emb - ct_emb
    return loss, 2 * laplacian_emb.T @ z


@dataclass
class LMNN:
    """LMNN(r) of Sharma et al. 2015: PCA to `pca_dims`, then a d x pca_dims projection learned by
    Adam on LMNN's objective (k target neighbours, pull weight 1 - mu), `max_iter` full-batch steps
    (metric-learn's parameter names). learn_rate 0.03 and 300 steps: of 0.01 and 0.03 with 100, 300
    and 1000 steps on digits (classify split, test mprec@10), within 0.006 of the best."""

    dims: int
    seed: int = 0
    k: int = 3
    mu: float = 0.5
    pca_dims: int = 256
    max_iter: int = 300
    learn_rate: float = 0.03

    def fit(self, x: np.ndarray, y: np.ndarray) -> LMNN:
        x = l2_normalise(x)
        p = min(max(self.pca_dims, self.dims), x.shape[1], len(x))
        self.pca = PCA(n_components=p, random_state=self.seed).fit(x)
        z = torch.from_numpy(self.pca.transform(x).astype(np.float32))
        labels = torch.from_numpy(np.asarray(y))
        targets, valid = target_neighbours(z, labels, self.k)
        proj = torch.eye(self.dims, p).requires_grad_(True)
        optimiser = torch.optim.Adam([proj], lr=self.learn_rate)
        with threads_for(len(z) ** 2 * targets.shape[1], small=SMALL_LMNN):
            for _ in range(self.max_iter):
                _, proj.grad = lmnn_loss_and_gradient(
                    proj.detach(), z, labels, targets, valid, self.mu
                )
                optimiser.step()
        self.projection = proj.detach().numpy()
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        z = self.pca.transform(l2_normalise(x)).astype(np.float32)
        return z @ self.projection.T
