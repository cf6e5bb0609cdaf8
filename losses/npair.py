from pytorch_metric_learning.losses import NPairsLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("npair")
class NPairLoss(AdaptedLoss):
    """Sohn 2016 multi-class N-pair loss: raw inner products, one pair per class in the batch,
    plus `l2_reg` times the squared L2 norm of the embeddings (the paper's 0.002).

    A batch holds N classes x 2 examples (the paper's N pairs): PML takes one pair per class, so
    more examples of a class would be left unused."""

    sources = {
        "l2_reg": (
            "Sohn 2016's embedding L2 regulariser (that paper is not among the source documents; "
            "the value is unchecked)"
        ),
    }
    search_space = {"l2_reg": ("log", 1e-4, 1e-1)}

    pml_class = NPairsLoss  # its batches and inner products: losses/pml_fixes.py
    params = ("l2_reg",)
    pml_names = {"l2_reg": "regularizer_weight"}
    defaults = {"l2_reg": 0.002}
    fixed = {"regularizer": "pml:LpRegularizer"}  # of the squared norm, as pml_fixes.py says
