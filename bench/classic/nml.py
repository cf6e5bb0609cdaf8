"""NML, the nonlinear metric learning of Sharma et al. 2015 §3: a 'nonlinear projection' of
L1-normalised (histogram) features onto d learned pre-images l_k with the chi2 kernel,

    phi(x) = (K(l_1, x), ..., K(l_d, x)),   K(l, x) = sum_f 2 l_f x_f / (l_f + x_f),

compared with Euclidean distance, d^2(x_i, x_j) = ||phi(x_i) - phi(x_j)||^2 (Eq. 8), and learned
by SGD on the pairwise hinge loss max(0, m - y (b - d^2)) with b = 0.1 and m = 0.02.

The sub-gradient of a pair in l_k (Eq. 10) is

    y 2 (K(l_k, x_i) - K(l_k, x_j)) (dK(l_k, x_i)/dl_k - dK(l_k, x_j)/dl_k),
    dK(l, x)/dl_f = 2 x_f^2 / (l_f + x_f)^2,

where the hinge is active, zero elsewhere. For L1-normalised l and x, K = 1 - chi2(l, x) / 2
lies in [0, 1] and is 1 only for l = x (the paper's bound on the distances).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bench.classic.linear_ml import PairHinge, hinge_loss

EPS = 1e-12  # 0/0 terms (l_f = x_f = 0) of the kernel and its gradient count as 0
CHUNK = 1 << 22  # at most this many pair x row x feature values in memory at once


def l1_normalise(x: np.ndarray) -> np.ndarray:
    if (x < 0).any():
        raise ValueError(
            "nml needs non-negative features (the chi2 kernel compares histograms), e.g. CNN "
            "features after a ReLU; these have negative values"
        )
    sums = x.sum(axis=1, keepdims=True)
    return (x / np.maximum(sums, 1e-12)).astype(np.float32)


def _ratios(pre_images: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x_bf / (l_kf + x_bf) for every row b, pre-image k and feature f, 0 where both are 0:
    K(l_k, x_b) = 2 sum_f l_kf r_bkf and dK(l_k, x_b)/dl_kf = 2 r_bkf^2. (B, d, F), in place."""
    ratio = (pre_images[None] + x[:, None]).clamp_min_(EPS)
    if pre_images.requires_grad or x.requires_grad:  # autograd (tests) cannot divide in place
        return x[:, None] / ratio
    return torch.div(x[:, None], ratio, out=ratio)


def _rows_per_chunk(pre_images: torch.Tensor) -> int:
    return max(1, CHUNK // max(1, pre_images.numel()))


def chi2_kernel(pre_images: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """K(l_k, x_b) for every row b of x and pre-image k: (B, d)."""
    out = [
        2 * torch.einsum("kf,bkf->bk", pre_images, _ratios(pre_images, xs))
        for xs in x.split(_rows_per_chunk(pre_images))
    ]
    return torch.cat(out) if out else x.new_zeros(0, len(pre_images))


def nml_gradient(bias: float, margin: float):
    """The sum over the pairs of their sub-gradients (Eq. 10), vectorised over the pairs: the
    kernel and its derivative share the ratios x / (l + x), computed once per side."""

    def gradient(pre_images, xi, xj, y):
        grad = torch.zeros_like(pre_images)
        rows = _rows_per_chunk(pre_images)
        for a, b, s in zip(xi.split(rows), xj.split(rows), y.split(rows), strict=True):
            ra, rb = _ratios(pre_images, a), _ratios(pre_images, b)
            diff = 2 * (
                torch.einsum("kf,bkf->bk", pre_images, ra)
                - torch.einsum("kf,bkf->bk", pre_images, rb)
            )
            active = hinge_loss(diff.pow(2).sum(1), s, bias, margin) > 0
            coef = 2 * (s * active)[:, None] * diff  # (B, d): y 2 (K(l_k, x_i) - K(l_k, x_j))
            grad += 2 * torch.einsum("bk,bkf->kf", coef, ra.square_())
            grad -= 2 * torch.einsum("bk,bkf->kf", coef, rb.square_())
        return grad

    return gradient


def _non_negative(pre_images: torch.Tensor) -> None:
    # The kernel is defined for histograms: the pre-images stay non-negative (projected SGD).
    pre_images.clamp_(min=0)


@dataclass
class NML(PairHinge):
    """Sharma et al. 2015's nonlinear embedding. b = 0.1 and m = 0.02 as in the paper; it gives
    neither the learning rate nor the initialisation: the pre-images start as d training vectors
    drawn at random, and stay non-negative (clipped at 0 after every step).

    `lr` is in units of 1/F, the mean entry of an L1-normalised F-dimensional vector: a pair's
    sub-gradient has entries of the same size for any F (the kernel is additive and its
    derivative homogeneous of degree 0) while the pre-images' entries shrink as 1/F, so the
    step is lr / F and one default serves 64-d pixels and 4096-d CNN features alike. lr = 0.1
    is the best of 0.03, 0.1 and 0.3 on the validation split of digits (classify protocol;
    fitted on the training split, mprec@10 at d = 8 and 16: 0.856, 0.864, 0.859 on average);
    untested on CNN features (no pretrained weights here)."""

    bias: float = 0.1
    margin: float = 0.02
    lr: float = 0.1

    def fit(self, x: np.ndarray, y: np.ndarray) -> NML:
        x = l1_normalise(x)
        rng = np.random.default_rng(self.seed)
        start = x[rng.choice(len(x), self.dims, replace=len(x) < self.dims)]
        lr = self.lr / x.shape[1]
        self.pre_images = self.learned(start, nml_gradient, x, y, lr, "nml", _non_negative)
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(l1_normalise(x))
        return chi2_kernel(torch.from_numpy(self.pre_images), x).numpy()
