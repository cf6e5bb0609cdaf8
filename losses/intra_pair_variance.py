from pytorch_metric_learning.losses import IntraPairVarianceLoss as PMLIntraPairVarianceLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("intra-pair-variance")
class IntraPairVarianceLoss(AdaptedLoss):
    """Yu and Tao 2019's intra-pair variance loss: the squared shortfall of each positive pair's
    cosine similarity below (1 - pos_eps) times the positives' mean, and of each negative's
    excess over (1 + neg_eps) times the negatives' mean; each averaged over its pairs, the two
    summed (PML's IntraPairVarianceLoss). The paper adds it to the tuplet margin loss; here it
    runs alone, as PML's class does."""

    sources = {
        "pos_eps": "PML's default (0.01), with its documentation of Yu and Tao 2019's loss",
        "neg_eps": "PML's default (0.01), with its documentation of Yu and Tao 2019's loss",
    }
    search_space = {"pos_eps": ("log", 0.001, 0.1), "neg_eps": ("log", 0.001, 0.1)}

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLIntraPairVarianceLoss
