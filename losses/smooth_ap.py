from pytorch_metric_learning.losses import SmoothAPLoss as PMLSmoothAPLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("smooth-ap")
class SmoothAPLoss(AdaptedLoss):
    """Brown et al. 2020: 1 - the average precision of each example's ranking of the batch by
    cosine similarity, each rank smoothed into 1 + the sum of sigmoid((s_qj - s_qi) /
    temperature) over the others j; the mean over the batch (PML's SmoothAPLoss).

    As PML and the authors' code, a query is one of its own positives (ranked first, at
    similarity 1) and ranks itself among the others, where the paper's AP is over the rest of
    the batch. Every class needs the same number of examples in the batch; PML 2.9 reads the
    classes off the batch layout (`class_blocks`, losses/pml_fixes.py), not off the labels."""

    sources = {
        "temperature": "PML's default (0.01), the value in the example of Brown et al. 2020's code"
    }
    search_space = {"temperature": ("log", 0.001, 0.1)}

    memory_ok = False  # PML's class takes no reference embeddings (the memory's)
    family = "ranking"
    pml_class = PMLSmoothAPLoss
