from pytorch_metric_learning.losses import ArcFaceLoss as PMLArcFaceLoss

from losses.base import PMLLoss
from losses.registry import register_loss

ARCFACE_SOURCES = {
    "margin": "PML's default (28.6 degrees), Deng et al. 2019's 0.5 radians",
    "scale": "PML's default (64), also Deng et al. 2019's",
}
ARCFACE_SPACE = {"margin": ("float", 5.0, 45.0), "scale": ("log", 8.0, 128.0)}


@register_loss("arcface")
class ArcFaceLoss(PMLLoss):
    """Deng et al. 2019 (ArcFace): cross-entropy over scale x cos(angle to learned class weights),
    the true class's angle plus a margin (PML's ArcFaceLoss).

    `margin` is in degrees, as PML takes it."""

    sources = ARCFACE_SOURCES
    search_space = ARCFACE_SPACE

    normalize_embeddings = True  # PML's CosineSimilarity normalises embeddings and weights
    family = "classification"
    pml_class = PMLArcFaceLoss

    def __init__(self, num_classes: int, dims: int, margin: float = 28.6, scale: float = 64.0):
        super().__init__(PMLArcFaceLoss(num_classes, dims, margin=margin, scale=scale))
