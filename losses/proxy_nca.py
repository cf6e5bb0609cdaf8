from pytorch_metric_learning.losses import ProxyNCALoss as PMLProxyNCALoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("proxy-nca")
class ProxyNCALoss(AdaptedLoss):
    """Movshovitz-Attias et al. 2017: NCA against one learned proxy per class (PML's
    ProxyNCALoss).

    PML's NCALoss distance (squared L2 of L2-normalised embeddings and proxies) in a softmax over
    every proxy, the example's own included: the paper leaves its own proxy out of the
    denominator."""

    sources = {
        "softmax_scale": (
            "PML's default (1); on the unit sphere squared distances lie in [0, 4], so its "
            "softmax is soft; a candidate for tuning"
        ),
    }
    search_space = {"softmax_scale": ("log", 1.0, 64.0)}

    family = "proxy"
    pml_class = PMLProxyNCALoss
    params = ("softmax_scale",)  # NCALoss's, which PML's class passes on
