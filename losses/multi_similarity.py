from pytorch_metric_learning.losses import MultiSimilarityLoss as PMLMultiSimilarityLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("multi-similarity")
class MultiSimilarityLoss(AdaptedLoss):
    """Wang et al. 2019's multi-similarity loss over every pair of the batch, unmined (PML's
    MultiSimilarityLoss on cosine similarities)."""

    # Wang et al. 2019's released code, the default configuration: alpha (scale_pos) 2, beta
    # (scale_neg) 40, base (thresh) 0.5 and the mining margin epsilon 0.1.
    sources = {
        "alpha": "PML's default (2), also Wang et al. 2019's released code's",
        "beta": (
            "PML's default (50); Wang et al. 2019's released code's default configuration has 40"
        ),
        "base": "PML's default (0.5), also Wang et al. 2019's released code's",
    }
    search_space = {
        "alpha": ("log", 0.5, 10.0),
        "beta": ("log", 10.0, 100.0),
        "base": ("float", 0.0, 1.0),
    }

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLMultiSimilarityLoss
