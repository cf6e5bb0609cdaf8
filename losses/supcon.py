from pytorch_metric_learning.losses import SupConLoss as PMLSupConLoss

from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("supcon")
class SupConLoss(PMLLoss):
    """Khosla et al. 2020: supervised contrastive loss, each anchor's mean log-probability of its
    positives in a softmax over cosine similarities / temperature (PML's SupConLoss)."""

    sources = {"temperature": "PML's default (0.1)"}
    search_space = {"temperature": ("log", 0.01, 1.0)}

    class_balanced = True
    memory_ok = True
    normalize_embeddings = True  # PML's CosineSimilarity
    family = "ranking"
    pml_class = PMLSupConLoss

    def __init__(self, temperature: float = 0.1):
        super().__init__(PMLSupConLoss(temperature=temperature))
