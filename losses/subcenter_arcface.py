from pytorch_metric_learning.losses import SubCenterArcFaceLoss as PMLSubCenterArcFaceLoss

from losses.arcface import ARCFACE_SOURCES, ARCFACE_SPACE
from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("subcenter-arcface")
class SubCenterArcFaceLoss(PMLLoss):
    """Deng et al. 2020: ArcFace with several learned sub-centres per class, a class's cosine
    that of its closest sub-centre (PML's SubCenterArcFaceLoss).

    `margin` is in degrees, as PML takes it."""

    sources = {**ARCFACE_SOURCES, "sub_centers": "PML's default (3), also Deng et al. 2020's K"}
    search_space = {**ARCFACE_SPACE, "sub_centers": ("int", 1, 5)}

    normalize_embeddings = True  # PML's CosineSimilarity normalises embeddings and weights
    family = "classification"
    pml_class = PMLSubCenterArcFaceLoss

    def __init__(
        self,
        num_classes: int,
        dims: int,
        margin: float = 28.6,
        scale: float = 64.0,
        sub_centers: int = 3,
    ):
        super().__init__(
            PMLSubCenterArcFaceLoss(
                num_classes=num_classes,
                embedding_size=dims,
                margin=margin,
                scale=scale,
                sub_centers=sub_centers,
            )
        )
