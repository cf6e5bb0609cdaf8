from pytorch_metric_learning.losses import SoftTripleLoss as PMLSoftTripleLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("soft-triple")
class SoftTripleLoss(AdaptedLoss):
    """Qian et al. 2019: a softmax over classes each represented by several learned centres
    (PML's SoftTripleLoss).

    PML leaves out the paper's regulariser that merges redundant centres (tau)."""

    sources = {
        "centers_per_class": "PML's default (10), K in Qian et al. 2019's released code",
        "la": "PML's default (20), lambda in Qian et al. 2019's released code",
        "gamma": "PML's default (0.1), gamma in Qian et al. 2019's released code",
        "margin": "PML's default (0.01), delta in Qian et al. 2019's released code",
        "lr_multiplier": (
            "Qian et al. 2019's released code trains the centres at 100x the network's learning "
            "rate (0.01 against 1e-4)"
        ),
    }
    search_space = {
        "la": ("log", 4.0, 64.0),
        "gamma": ("log", 0.02, 0.5),
        "margin": ("float", 0.0, 0.3),
        "centers_per_class": ("int", 1, 16),
    }

    family = "proxy"
    pml_class = PMLSoftTripleLoss
