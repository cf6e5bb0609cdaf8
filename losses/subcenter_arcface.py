from pytorch_metric_learning.losses import SubCenterArcFaceLoss as PMLSubCenterArcFaceLoss

from losses.arcface import ArcFaceLoss
from losses.registry import register_loss


@register_loss("subcenter-arcface")
class SubCenterArcFaceLoss(ArcFaceLoss):
    """Deng et al. 2020: ArcFace with several learned sub-centres per class, a class's cosine
    that of its closest sub-centre (PML's SubCenterArcFaceLoss).

    `margin` is in degrees, as PML takes it; the margin's and scale's sources and search space
    are ArcFace's, as PML's class is a subclass of ArcFace's."""

    sources = {**ArcFaceLoss.sources, "sub_centers": "PML's default (3), also Deng et al. 2020's K"}
    search_space = {**ArcFaceLoss.search_space, "sub_centers": ("int", 1, 5)}

    pml_class = PMLSubCenterArcFaceLoss
