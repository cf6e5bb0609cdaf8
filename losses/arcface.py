from pytorch_metric_learning.losses import ArcFaceLoss as PMLArcFaceLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("arcface")
class ArcFaceLoss(AdaptedLoss):
    """Deng et al. 2019 (ArcFace): cross-entropy over scale x cos(angle to learned class weights),
    the true class's angle plus a margin (PML's ArcFaceLoss).

    `margin` is in degrees, as PML takes it."""

    sources = {
        "margin": "PML's default (28.6 degrees), Deng et al. 2019's 0.5 radians",
        "scale": "PML's default (64), also Deng et al. 2019's",
    }
    search_space = {"margin": ("float", 5.0, 45.0), "scale": ("log", 8.0, 128.0)}

    family = "classification"
    pml_class = PMLArcFaceLoss
