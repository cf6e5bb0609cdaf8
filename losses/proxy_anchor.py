from pytorch_metric_learning.losses import ProxyAnchorLoss as PMLProxyAnchorLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("proxy-anchor")
class ProxyAnchorLoss(AdaptedLoss):
    """Kim et al. 2020: each class proxy an anchor weighing its positives and negatives by
    cosine similarity (PML's ProxyAnchorLoss)."""

    sources = {
        "margin": "Kim et al. 2020 and PML's default (0.1)",
        "alpha": "Kim et al. 2020 and PML's default (32)",
        "lr_multiplier": (
            "Kim et al. 2020's released code trains the proxies at 100x the network's learning rate"
        ),
    }
    search_space = {"margin": ("float", 0.0, 0.4), "alpha": ("log", 4.0, 128.0)}

    family = "proxy"
    pml_class = PMLProxyAnchorLoss
