import torch
import torch.nn.functional as F

from losses.base import BenchLoss
from losses.registry import register_loss


def lifted_structure_loss(
    embeddings: torch.Tensor, labels: torch.Tensor, neg_margin: float, pos_margin: float
) -> torch.Tensor:
    """Song et al. 2016, Eq. 4, on L2-normalised embeddings, as PML's LiftedStructureLoss
    computes it (the mean over ordered positive pairs of max(0, J_ij)^2 / 2) but vectorised:

        J_ij = log( sum_{k neg of i} exp(m - D_ik) + sum_{l neg of j} exp(m - D_jl) ) + D_ij.

    Both sums depend on one end of the pair only, so each is one logsumexp per row.
    """
    x = F.normalize(embeddings, dim=1)
    dist = torch.cdist(x, x)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    pos = same & ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    neg = ~same
    if not bool(pos.any()) or not bool(neg.any()):
        return embeddings.sum() * 0.0
    per_row = torch.logsumexp((neg_margin - dist).masked_fill(~neg, float("-inf")), dim=1)
    i, j = torch.nonzero(pos, as_tuple=True)
    j_ij = torch.logaddexp(per_row[i], per_row[j]) + dist[i, j] - pos_margin
    return (F.relu(j_ij).pow(2) / 2).mean()


@register_loss("lifted")
class LiftedStructureLoss(BenchLoss):
    """Lifted structured embedding loss (Song et al. 2016) over every pair of the batch."""

    sources = {
        "neg_margin": "PML's default (1.0); no source document states one",
        "pos_margin": "PML's default (0)",
    }
    search_space = {"neg_margin": ("float", 0.2, 2.0)}

    class_balanced = True
    normalize_embeddings = True

    def __init__(self, neg_margin: float = 1.0, pos_margin: float = 0.0):
        super().__init__()
        self.neg_margin = neg_margin
        self.pos_margin = pos_margin

    def forward(self, embeddings, labels, indices=None):
        return lifted_structure_loss(embeddings, labels, self.neg_margin, self.pos_margin)
