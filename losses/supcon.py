from pytorch_metric_learning.losses import SupConLoss as PMLSupConLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("supcon")
class SupConLoss(AdaptedLoss):
    """Khosla et al. 2020: supervised contrastive loss, each anchor's mean log-probability of its
    positives in a softmax over cosine similarities / temperature (PML's SupConLoss)."""

    search_space = {"temperature": ("log", 0.01, 1.0)}

    memory_ok = True
    family = "ranking"
    pml_class = PMLSupConLoss
