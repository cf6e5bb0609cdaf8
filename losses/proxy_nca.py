from pytorch_metric_learning.losses import ProxyNCALoss as PMLProxyNCALoss

from losses.nca import NCALoss
from losses.registry import register_loss


@register_loss("proxy-nca")
class ProxyNCALoss(NCALoss):
    """Movshovitz-Attias et al. 2017: NCA against one learned proxy per class (PML's
    ProxyNCALoss).

    PML's NCALoss distance (squared L2 of L2-normalised embeddings and proxies) in a softmax over
    every proxy, the example's own included: the paper leaves its own proxy out of the
    denominator. Its scale's source and search space are NCA's, as PML's class is a subclass
    of NCA's."""

    family = "proxy"
    pml_class = PMLProxyNCALoss
    params = ("softmax_scale",)  # NCALoss's, which PML's class passes on
