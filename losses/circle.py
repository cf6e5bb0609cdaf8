from pytorch_metric_learning.losses import CircleLoss as PMLCircleLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("circle")
class CircleLoss(AdaptedLoss):
    """Sun et al. 2020: circle loss over every pair of the batch, each similarity weighted by
    its distance from its optimum (PML's CircleLoss on cosine similarities)."""

    sources = {
        "m": (
            "PML's default (0.4), which PML gives as Sun et al. 2020's setting for fine-grained "
            "image retrieval"
        ),
        "gamma": (
            "PML's default (80), which PML gives as Sun et al. 2020's setting for fine-grained "
            "image retrieval"
        ),
    }
    search_space = {"m": ("float", 0.1, 0.5), "gamma": ("log", 16.0, 256.0)}

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLCircleLoss
