from pytorch_metric_learning.losses import NCALoss as PMLNCALoss

from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("nca")
class NCALoss(PMLLoss):
    """Goldberger et al. 2004 within the batch: softmax over -scale * squared distances of
    L2-normalised embeddings (PML's NCALoss)."""

    sources = {
        "softmax_scale": (
            "PML's default (1); on the unit sphere squared distances lie in [0, 4], so its "
            "softmax is soft; a candidate for tuning"
        ),
    }
    search_space = {"softmax_scale": ("log", 1.0, 64.0)}

    class_balanced = True  # with random batches most anchors have no positive in the batch
    normalize_embeddings = True
    pml_class = PMLNCALoss

    def __init__(self, softmax_scale: float = 1.0):
        super().__init__(PMLNCALoss(softmax_scale=softmax_scale))
