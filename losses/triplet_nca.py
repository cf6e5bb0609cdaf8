"""Liu et al. 2019's triplet loss in NCA form (Sec. 2.1) on unit-length embeddings:

    -ln( exp(s_ap / T) / (exp(s_ap / T) + exp(s_an / T)) ) = softplus((s_an - s_ap) / T),

with s the cosine similarity, averaged over the miner's triplets. The paper gives no T. The
default 0.1 is the one in the released code of the same group's NCA-form triplet loss
(GWUvision/HardNegative, Xuan et al.: `-log_softmax([S_ap, S_an] / 0.1)`); Goldberger's NCA
taken literally, exp(-||a - b||^2) of unit vectors, would be T = 0.5. `margin` only selects the
miner's semi-hard negatives; the loss itself has none.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from losses.base import BenchLoss
from losses.domains import POSITIVE
from losses.registry import register_loss
from miners import build_miner


def triplet_nca(x: torch.Tensor, triplets, temperature: float) -> torch.Tensor:
    """Mean over (a, p, n) of softplus((s_an - s_ap) / T), s the cosine similarity."""
    a, p, n = triplets
    u = F.normalize(x, dim=1)
    s_ap = (u[a] * u[p]).sum(dim=1)
    s_an = (u[a] * u[n]).sum(dim=1)
    return F.softplus((s_an - s_ap) / temperature).mean()


@register_loss("triplet-nca")
class TripletNCALoss(BenchLoss):
    """Liu et al. 2019: NCA-form triplet loss, -ln softmax of s_ap/T against s_an/T, mined."""

    sources = {
        "miner": "Liu et al. 2019's Semi-Hard Negative strategy (SHN)",
        "temperature": "chosen here: Liu et al. 2019 gives no temperature",
        "margin": (
            "chosen here: Liu et al. 2019 selects negatives 'within a margin' without a value"
        ),
    }
    search_space = {"temperature": ("log", 0.02, 0.5)}

    class_balanced = True
    normalize_embeddings = True
    domains = {"temperature": POSITIVE}  # it divides by it

    def __init__(self, miner: str = "semihard", temperature: float = 0.1, margin: float = 0.2):
        super().__init__()
        self.temperature = float(temperature)
        self.miner = build_miner(miner, margin=margin)

    def forward(self, embeddings, labels, indices=None):
        labels = labels.to(embeddings.device)
        triplets = lmu.convert_to_triplets(self.miner(embeddings, labels), labels)
        if len(triplets[0]) == 0:
            return embeddings.sum() * 0.0
        return triplet_nca(embeddings, triplets, self.temperature)
