"""The Tiny ImageNet pair-verification report Eq. 4: the contrastive loss of Chopra/Hadsell in
squared form, over online pairs.

    L = 1/(2N) sum_n y_n D_n^2 + (1 - y_n) max(0, m - D_n)^2,   y_n = 1 for a similar pair,

with D the Euclidean distance between the raw (not normalised) embeddings and N the number of
pairs: those of the balanced generator (`miners.pair_generator`). The report gives no value for
m; the default 1.0 is the usual one for this form (it is a scale on raw embeddings).
"""

from __future__ import annotations

import torch

from losses.base import BenchLoss
from losses.domains import COUNT
from losses.registry import register_loss
from miners.pair_generator import balanced_pairs


def contrastive_squared(
    x: torch.Tensor, i: torch.Tensor, j: torch.Tensor, same: torch.Tensor, margin: float
) -> torch.Tensor:
    """Eq. 4 over the pairs (i, j); `same` marks the similar ones."""
    sq = (x[i] - x[j]).pow(2).sum(dim=1)
    # The positive term uses D^2 directly: no square root, so no infinite gradient at D = 0.
    neg = (margin - sq.clamp_min(1e-12).sqrt()).clamp_min(0).pow(2)
    return torch.where(same, sq, neg).sum() / (2 * len(i))


@register_loss("contrastive-squared")
class ContrastiveSquaredLoss(BenchLoss):
    """The Tiny ImageNet pair-verification report Eq. 4: y D^2 + (1 - y) max(0, m - D)^2 over
    balanced online pairs, raw D."""

    sources = {
        "margin": (
            "chosen here: the Tiny ImageNet pair-verification report Eq. 4 has a margin m "
            "without a value"
        ),
        "pairs_per_anchor": "chosen here, as bce-pair's",
    }
    search_space = {"margin": ("float", 0.2, 2.0)}

    class_balanced = True
    domains = {"pairs_per_anchor": COUNT}

    def __init__(self, margin: float = 1.0, pairs_per_anchor: int = 1):
        super().__init__()
        self.margin = float(margin)
        self.pairs_per_anchor = int(pairs_per_anchor)

    def pairs(self, embeddings: torch.Tensor, labels: torch.Tensor):
        """(i, j, same) of this batch."""
        return balanced_pairs(labels, self.pairs_per_anchor)

    def forward(self, embeddings, labels, indices=None):
        i, j, same = self.pairs(embeddings, labels.to(embeddings.device))
        if len(i) == 0:
            return embeddings.sum() * 0.0
        return contrastive_squared(embeddings, i, j, same, self.margin)
