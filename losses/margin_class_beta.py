from pytorch_metric_learning.losses import MarginLoss as PMLMarginLoss
from pytorch_metric_learning.miners import DistanceWeightedMiner

from losses.base import PMLLoss
from losses.margin import MARGIN_SOURCES, MARGIN_SPACE
from losses.registry import register_loss


@register_loss("margin-class-beta")
class MarginClassBetaLoss(PMLLoss):
    """Wu et al. 2017: the margin loss with a learned boundary beta per class (PML's MarginLoss
    with learn_beta and num_classes, and its DistanceWeightedMiner).

    As `margin` otherwise; each triplet takes its anchor's class's beta, all starting at
    `beta`."""

    sources = MARGIN_SOURCES
    search_space = MARGIN_SPACE

    class_balanced = True
    memory_ok = True
    normalize_embeddings = True
    family = "pair weighting"
    pml_class = PMLMarginLoss

    def __init__(self, num_classes: int, margin: float = 0.2, beta: float = 1.2, nu: float = 0.0):
        super().__init__(
            PMLMarginLoss(
                margin=margin, nu=nu, beta=beta, learn_beta=True, num_classes=num_classes
            ),
            DistanceWeightedMiner(),
        )
