from pytorch_metric_learning.losses import MarginLoss as PMLMarginLoss

from losses.margin import MARGIN_SOURCES, MARGIN_SPACE
from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("margin-class-beta")
class MarginClassBetaLoss(AdaptedLoss):
    """Wu et al. 2017: the margin loss with a learned boundary beta per class (PML's MarginLoss
    with learn_beta and num_classes, and its DistanceWeightedMiner).

    As `margin` otherwise; each triplet takes its anchor's class's beta, all starting at
    `beta`."""

    sources = MARGIN_SOURCES
    search_space = MARGIN_SPACE

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLMarginLoss
    params = ("margin", "beta", "nu")
    fixed = {"learn_beta": True, "miner": "pml:DistanceWeightedMiner"}
    sizes = ("num_classes",)  # a beta per class; pml:MarginLoss has one
