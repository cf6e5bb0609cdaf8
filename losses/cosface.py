from pytorch_metric_learning.losses import CosFaceLoss as PMLCosFaceLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("cosface")
class CosFaceLoss(AdaptedLoss):
    """Wang et al. 2018 (CosFace): cross-entropy over scale x cosine similarities to learned
    class weights, the true class's less a margin (PML's CosFaceLoss)."""

    sources = {
        "margin": "PML's default (0.35), also Wang et al. 2018's",
        "scale": "PML's default (64), also Wang et al. 2018's",
    }
    search_space = {"margin": ("float", 0.05, 0.5), "scale": ("log", 8.0, 128.0)}

    family = "classification"
    pml_class = PMLCosFaceLoss
