"""The Tiny ImageNet pair-verification report Eq. 2-3: a binary cross-entropy pair classifier on
batch-normalised distances.

For the balanced online pairs (`miners.pair_generator`), with D_n the Euclidean distance of the
two raw embeddings,

    a_n = w (D_n - mean(D)) / std(D) + b,
    L = -1/(2N) sum_n y_n log sigmoid(a_n) + (1 - y_n) log(1 - sigmoid(a_n)),

y_n = 1 for a similar pair; the 1/(2N) is the report's. mean and std are over the pairs of the
batch, as batch normalisation (no affine part) computes them in training: biased variance plus
eps = 1e-5. w starts at -1 (small distances mean similar) and b at 0; both are parameters of the
loss, so the trainer optimises them with the network. The loss is training-only: evaluation
uses distances alone, and since a_n is monotone in D_n a threshold on sigmoid(a_n) is a
threshold on D_n, so no running statistics are kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from losses.base import BenchLoss
from losses.domains import COUNT
from losses.registry import register_loss
from miners.pair_generator import balanced_pairs

BN_EPS = 1e-5  # torch.nn.BatchNorm1d's default


def batch_normalise(d: torch.Tensor) -> torch.Tensor:
    """(d - mean) / sqrt(biased var + eps) over the batch of pairs."""
    return (d - d.mean()) / torch.sqrt(d.var(unbiased=False) + BN_EPS)


@register_loss("bce-pair")
class BCEPairLoss(BenchLoss):
    """The Tiny ImageNet pair-verification report Eq. 2-3: sigmoid(w * batchnorm(D) + b) with binary
    cross-entropy per pair."""

    sources = {
        "pairs_per_anchor": (
            "chosen here: each anchor gets one positive and one negative pair (the Tiny ImageNet "
            "pair-verification report Algorithm"
            " 1 draws one pair per image, positive or negative at random, 50-50 overall)"
        ),
    }
    search_space = {"pairs_per_anchor": ("int", 1, 4)}

    class_balanced = True
    domains = {"pairs_per_anchor": COUNT}

    def __init__(self, pairs_per_anchor: int = 1):
        super().__init__()
        self.pairs_per_anchor = int(pairs_per_anchor)
        self.weight = nn.Parameter(torch.tensor(-1.0))
        self.bias = nn.Parameter(torch.tensor(0.0))

    def forward(self, embeddings, labels, indices=None):
        i, j, same = balanced_pairs(labels.to(embeddings.device), self.pairs_per_anchor)
        if len(i) == 0:
            return embeddings.sum() * 0.0
        logits = self.weight * batch_normalise(pair_distances(embeddings, i, j)) + self.bias
        return F.binary_cross_entropy_with_logits(logits, same.to(logits.dtype)) / 2


def pair_distances(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Euclidean distances ||x_i - x_j||, with a finite gradient for coincident embeddings."""
    return (x[i] - x[j]).pow(2).sum(dim=1).clamp_min(1e-12).sqrt()
