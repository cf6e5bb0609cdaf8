from pytorch_metric_learning.losses import NCALoss as PMLNCALoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("nca")
class NCALoss(AdaptedLoss):
    """Goldberger et al. 2004 within the batch: softmax over -scale * squared distances of
    L2-normalised embeddings (PML's NCALoss)."""

    sources = {
        "softmax_scale": (
            "PML's default (1); on the unit sphere squared distances lie in [0, 4], so its "
            "softmax is soft; a candidate for tuning"
        ),
    }
    search_space = {"softmax_scale": ("log", 1.0, 64.0)}

    pml_class = PMLNCALoss
