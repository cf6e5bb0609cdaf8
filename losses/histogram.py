from pytorch_metric_learning.losses import HistogramLoss as PMLHistogramLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("histogram")
class HistogramLoss(AdaptedLoss):
    """Ustinova and Lempitsky 2016: the probability that a random negative pair of the batch
    is more similar than a random positive pair, estimated from soft histograms of their
    cosine similarities (PML's HistogramLoss).

    Each similarity is shared linearly between the two nearest of the `num_bins` + 1 nodes
    t_r = -1 + r delta, delta = 2 / num_bins, giving h+ and h- over the positive and the
    negative pairs (each unordered pair once); the loss is sum over r of h-_r sum_{q <= r}
    h+_q. As PML draws its pairs from the batch's triplets, a negative pair of two examples
    that both lack a positive in the batch is left out of h-, where the paper counts every
    negative pair; the similarities are kept below 1 (`BinnedCosine`, losses/pml_fixes.py)."""

    sources = {
        "num_bins": "PML's default (100, delta = 0.02), within the bin widths Ustinova and "
        "Lempitsky 2016 found the results insensitive to (0.005 to 0.04)"
    }
    search_space = {"num_bins": ("int", 50, 400)}

    memory_ok = False  # PML's class takes no reference embeddings (the memory's)
    family = "ranking"
    pml_class = PMLHistogramLoss
    params = ("num_bins",)  # delta follows
    pml_names = {"num_bins": "n_bins"}
    defaults = {"num_bins": 100}  # PML's, unset: neither n_bins nor delta given
