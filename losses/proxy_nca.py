from pytorch_metric_learning.losses import ProxyNCALoss as PMLProxyNCALoss

from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("proxy-nca")
class ProxyNCALoss(PMLLoss):
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

    normalize_embeddings = True
    family = "proxy"
    pml_class = PMLProxyNCALoss

    def __init__(self, num_classes: int, dims: int, softmax_scale: float = 1.0):
        super().__init__(PMLProxyNCALoss(num_classes, dims, softmax_scale=softmax_scale))
