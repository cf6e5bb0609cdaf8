from pytorch_metric_learning.losses import LargeMarginSoftmaxLoss as PMLLargeMarginSoftmaxLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("large-margin-softmax")
class LargeMarginSoftmaxLoss(AdaptedLoss):
    """Liu et al. 2016 (L-Softmax): cross-entropy over |W_j| |x| cos(theta_j) to learned class
    weights W_j, the true class's cos(theta) replaced by psi(theta) = (-1)^k cos(m theta) - 2k
    for theta in [k pi/m, (k+1) pi/m], which asks for an m times smaller angle to the true class
    (PML's LargeMarginSoftmaxLoss).

    PML computes cos(m theta) from cos(theta) with the paper's multiple-angle expansion and
    treats k as a constant. Where it departs from the paper: no annealing (the paper trains with
    (lambda cos(theta) + psi(theta)) / (1 + lambda) as the true class's term, lambda decreasing
    during training), so the whole margin applies from the first step; and every logit is
    multiplied by `scale`, which the paper does not have (the default 1 keeps its logits)."""

    sources = {
        "margin": "PML's default (4), also the largest m Liu et al. 2016 train with",
        "scale": "PML's default (1): the paper's logits, which have no scale",
    }
    # The margin m is a whole multiple of the angle (its domain is PML's class's,
    # losses/domains.py); papers and PML train with m <= 4.
    search_space = {"margin": ("int", 2, 4), "scale": ("log", 0.25, 16.0)}

    family = "classification"
    pml_class = PMLLargeMarginSoftmaxLoss
