from pytorch_metric_learning.losses import SphereFaceLoss as PMLSphereFaceLoss

from losses.large_margin_softmax import LargeMarginSoftmaxLoss
from losses.registry import register_loss


@register_loss("sphereface")
class SphereFaceLoss(LargeMarginSoftmaxLoss):
    """Liu et al. 2017 (SphereFace, A-Softmax): cross-entropy over |x| cos(theta_j) to learned
    class weights of unit norm, the true class's cos(theta) replaced by psi(theta) =
    (-1)^k cos(m theta) - 2k for theta in [k pi/m, (k+1) pi/m], an angular margin (PML's
    SphereFaceLoss).

    PML computes cos(m theta) with the multiple-angle expansion and treats k as a constant.
    Where it departs from the paper: no annealing (the paper trains with (lambda cos(theta) +
    psi(theta)) / (1 + lambda) as the true class's term, lambda decreasing during training), so
    the whole margin applies from the first step; and every logit is multiplied by `scale`,
    which the paper does not have (the default 1 keeps its logits). The rest, its scale's
    source and search space among them, is L-Softmax's, as PML's class is a subclass of
    L-Softmax's."""

    sources = {
        **LargeMarginSoftmaxLoss.sources,
        "margin": "PML's default (4), also Liu et al. 2017's m",
    }
    pml_class = PMLSphereFaceLoss
