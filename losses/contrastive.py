from pytorch_metric_learning.losses import ContrastiveLoss as PMLContrastiveLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("contrastive")
class ContrastiveLoss(AdaptedLoss):
    """Hadsell et al. 2006 on L2-normalised embeddings (PML's ContrastiveLoss, all batch pairs)."""

    sources = {
        "pos_margin": "PML's default (0)",
        "neg_margin": (
            "chosen here: no source states one (PML's default is 1.0); a candidate for tuning"
        ),
    }
    search_space = {"pos_margin": ("float", 0.0, 0.5), "neg_margin": ("float", 0.2, 1.5)}

    memory_ok = True
    pml_class = PMLContrastiveLoss
    defaults = {"neg_margin": 0.5}
