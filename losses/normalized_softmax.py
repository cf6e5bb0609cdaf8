from pytorch_metric_learning.losses import NormalizedSoftmaxLoss as PMLNormalizedSoftmaxLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("normalized-softmax")
class NormalizedSoftmaxLoss(AdaptedLoss):
    """Zhai and Wu 2019: cross-entropy over cosine similarities to learned class weights, divided
    by a temperature (PML's NormalizedSoftmaxLoss)."""

    search_space = {"temperature": ("log", 0.01, 0.5)}

    family = "classification"
    pml_class = PMLNormalizedSoftmaxLoss
