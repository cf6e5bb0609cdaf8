from pytorch_metric_learning.losses import FastAPLoss as PMLFastAPLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("fastap")
class FastAPLoss(AdaptedLoss):
    """Cakir et al. 2019: 1 - average precision of each anchor's ranking of the batch, from
    soft histograms of squared distances (PML's FastAPLoss).

    Squared L2 distances of L2-normalised embeddings (PML's default, in [0, 4]) in `num_bins`
    triangular bins."""

    search_space = {"num_bins": ("int", 5, 40)}

    family = "ranking"
    pml_class = PMLFastAPLoss
