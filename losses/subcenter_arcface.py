from pytorch_metric_learning.losses import SubCenterArcFaceLoss as PMLSubCenterArcFaceLoss

from losses.arcface import ARCFACE_SOURCES, ARCFACE_SPACE
from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("subcenter-arcface")
class SubCenterArcFaceLoss(AdaptedLoss):
    """Deng et al. 2020: ArcFace with several learned sub-centres per class, a class's cosine
    that of its closest sub-centre (PML's SubCenterArcFaceLoss).

    `margin` is in degrees, as PML takes it."""

    sources = {**ARCFACE_SOURCES, "sub_centers": "PML's default (3), also Deng et al. 2020's K"}
    search_space = {**ARCFACE_SPACE, "sub_centers": ("int", 1, 5)}

    family = "classification"
    pml_class = PMLSubCenterArcFaceLoss
