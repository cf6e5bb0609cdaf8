from pytorch_metric_learning.losses import MarginLoss as PMLMarginLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("margin")
class MarginLoss(AdaptedLoss):
    """Wu et al. 2017: margin loss on distance-weighted negatives (PML's MarginLoss with its
    DistanceWeightedMiner), one boundary beta for all classes.

    L2 distances of L2-normalised embeddings (PML's LpDistance; the miner requires it); the
    miner draws each (anchor, positive)'s negative with probability inverse to the density of
    distances on the sphere, cut off at 0.5 and 1.4 (PML's defaults)."""

    # Wu et al. 2017's released example (Apache MXNet's gluon embedding_learning example) uses
    # the same margin 0.2, initial beta 1.2, nu 0 and sampler cut-offs 0.5 and 1.4 as PML's
    # defaults.
    sources = {
        "margin": "PML's default (0.2), also alpha in Wu et al. 2017's released example",
        "beta": "PML's default (1.2), also the initial beta of Wu et al. 2017's released example",
        "nu": "PML's default (0: beta unregularised), also Wu et al. 2017's released example's",
        "lr_multiplier": (
            "chosen here (1): Wu et al. 2017's example trains beta by SGD at 0.1 beside Adam at "
            "1e-4 for the network, which gives no multiple of one SGD learning rate"
        ),
        "learn_beta": ("Wu et al. 2017 learn beta with the network (PML's default keeps it fixed)"),
    }
    search_space = {"margin": ("float", 0.01, 0.5), "beta": ("float", 0.5, 1.6)}

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLMarginLoss
    params = ("margin", "beta", "nu", "learn_beta")
    defaults = {"learn_beta": True}
    fixed = {"miner": "pml:DistanceWeightedMiner"}
