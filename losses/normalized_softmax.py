from pytorch_metric_learning.losses import NormalizedSoftmaxLoss as PMLNormalizedSoftmaxLoss

from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("normalized-softmax")
class NormalizedSoftmaxLoss(PMLLoss):
    """Zhai and Wu 2019: cross-entropy over cosine similarities to learned class weights, divided
    by a temperature (PML's NormalizedSoftmaxLoss)."""

    sources = {"temperature": "PML's default (0.05)"}
    search_space = {"temperature": ("log", 0.01, 0.5)}

    # PML's DotProductSimilarity normalises the embeddings (its default) and the loss the weights.
    normalize_embeddings = True
    family = "classification"
    pml_class = PMLNormalizedSoftmaxLoss

    def __init__(self, num_classes: int, dims: int, temperature: float = 0.05):
        super().__init__(PMLNormalizedSoftmaxLoss(num_classes, dims, temperature=temperature))
