from pytorch_metric_learning.losses import TupletMarginLoss as PMLTupletMarginLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("tuplet-margin")
class TupletMarginLoss(AdaptedLoss):
    """Yu and Tao 2019: for each positive pair, log(1 + sum over the anchor's negatives of
    exp(s (cos theta_an - cos(theta_ap - beta)))), the positive's angle eased by the margin
    beta; the mean over the batch's positive pairs (PML's TupletMarginLoss, cosine similarity;
    the margin in degrees)."""

    sources = {
        "margin": "PML's default (5.73 degrees, 0.1 radian), with its documentation of Yu and "
        "Tao 2019's loss",
        "scale": "PML's default (64), with its documentation of Yu and Tao 2019's loss",
    }
    search_space = {"margin": ("float", 0.0, 20.0), "scale": ("log", 8.0, 128.0)}

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLTupletMarginLoss
