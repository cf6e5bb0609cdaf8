from pytorch_metric_learning.losses import NTXentLoss as PMLNTXentLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("ntxent")
class NTXentLoss(AdaptedLoss):
    """Sohn 2016 / Chen et al. 2020: NT-Xent with labels, each positive pair's cross-entropy
    against its anchor's negatives over cosine similarities / temperature (PML's NTXentLoss)."""

    search_space = {"temperature": ("log", 0.01, 1.0)}

    memory_ok = True
    family = "ranking"
    pml_class = PMLNTXentLoss
