import warnings

import torch
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.losses import HistogramLoss as PMLHistogramLoss

from losses.base import PMLLoss
from losses.registry import register_loss


class BinnedCosine(CosineSimilarity):
    """Cosine similarity kept in [-1, 1 - delta / 1000]: PML 2.9 puts a similarity s into the
    bin floor((s + 1) / delta), so one of 1 (an example drawn twice in a batch) or one just
    outside [-1, 1] (rounding) falls outside its histogram: an index out of bounds."""

    def __init__(self, delta: float):
        super().__init__()
        self.top = 1.0 - delta / 1000

    def compute_mat(self, query_emb: torch.Tensor, ref_emb: torch.Tensor) -> torch.Tensor:
        return super().compute_mat(query_emb, ref_emb).clamp(-1.0, self.top)


@register_loss("histogram")
class HistogramLoss(PMLLoss):
    """Ustinova and Lempitsky 2016: the probability that a random negative pair of the batch
    is more similar than a random positive pair, estimated from soft histograms of their
    cosine similarities (PML's HistogramLoss).

    Each similarity is shared linearly between the two nearest of the `num_bins` + 1 nodes
    t_r = -1 + r delta, delta = 2 / num_bins, giving h+ and h- over the positive and the
    negative pairs (each unordered pair once); the loss is sum over r of h-_r sum_{q <= r}
    h+_q. As PML draws its pairs from the batch's triplets, a negative pair of two examples
    that both lack a positive in the batch is left out of h-, where the paper counts every
    negative pair; the similarities are kept below 1 (`BinnedCosine`)."""

    sources = {
        "num_bins": "PML's default (100, delta = 0.02), within the bin widths Ustinova and "
        "Lempitsky 2016 found the results insensitive to (0.005 to 0.04)"
    }
    search_space = {"num_bins": ("int", 50, 400)}

    class_balanced = True
    memory_ok = False  # PML's class takes no reference embeddings (the memory's)
    normalize_embeddings = True  # PML's CosineSimilarity
    family = "ranking"
    pml_class = PMLHistogramLoss
    pml_names = {"num_bins": "n_bins"}

    def __init__(self, num_bins: int = 100):
        distance = BinnedCosine(2 / num_bins)
        super().__init__(PMLHistogramLoss(n_bins=num_bins, distance=distance))

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor | None = None
    ) -> torch.Tensor:
        with warnings.catch_warnings():  # PML 2.9 indexes by a list of index lists, each step
            warnings.filterwarnings("ignore", "Using a non-tuple sequence", UserWarning)
            return super().forward(embeddings, labels, indices)
