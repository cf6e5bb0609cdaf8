from pytorch_metric_learning.losses import SignalToNoiseRatioContrastiveLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("snr")
class SNRContrastiveLoss(AdaptedLoss):
    """Yuan et al. 2019: contrastive loss on the signal-to-noise-ratio distance var(a - b) /
    var(a) (PML's SignalToNoiseRatioContrastiveLoss).

    PML's SNRDistance L2-normalises the embeddings first (its default); the paper's regulariser
    towards zero-mean embeddings is not applied (PML's default)."""

    search_space = {"pos_margin": ("float", 0.0, 0.5), "neg_margin": ("float", 0.3, 2.0)}

    memory_ok = True
    family = "ranking"
    pml_class = SignalToNoiseRatioContrastiveLoss
    params = ("pos_margin", "neg_margin")  # ContrastiveLoss's, which PML's class passes on
