from losses.margin import MarginLoss
from losses.registry import register_loss


@register_loss("margin-class-beta")
class MarginClassBetaLoss(MarginLoss):
    """Wu et al. 2017: the margin loss with a learned boundary beta per class (PML's MarginLoss
    with learn_beta and num_classes, and its DistanceWeightedMiner).

    As `margin` otherwise (its sources and search space too); each triplet takes its anchor's
    class's beta, all starting at `beta`."""

    params = ("margin", "beta", "nu")
    fixed = {"learn_beta": True, "miner": "pml:DistanceWeightedMiner"}
    sizes = ("num_classes",)  # a beta per class; pml:MarginLoss has one
