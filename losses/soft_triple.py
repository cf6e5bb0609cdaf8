from pytorch_metric_learning.losses import SoftTripleLoss as PMLSoftTripleLoss

from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("soft-triple")
class SoftTripleLoss(PMLLoss):
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

    normalize_embeddings = True  # PML's CosineSimilarity normalises embeddings and centres
    lr_multiplier = 100.0
    family = "proxy"
    pml_class = PMLSoftTripleLoss

    def __init__(
        self,
        num_classes: int,
        dims: int,
        centers_per_class: int = 10,
        la: float = 20.0,
        gamma: float = 0.1,
        margin: float = 0.01,
    ):
        super().__init__(
            PMLSoftTripleLoss(
                num_classes,
                dims,
                centers_per_class=centers_per_class,
                la=la,
                gamma=gamma,
                margin=margin,
            )
        )
