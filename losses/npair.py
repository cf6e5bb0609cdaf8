from pytorch_metric_learning.distances import DotProductSimilarity
from pytorch_metric_learning.losses import NPairsLoss
from pytorch_metric_learning.regularizers import LpRegularizer

from losses.base import PMLLoss
from losses.registry import register_loss


@register_loss("npair")
class NPairLoss(PMLLoss):
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

    class_balanced = True
    examples_per_class = 2
    pml_class = NPairsLoss
    pml_names = {"l2_reg": "embedding_reg_weight"}

    def __init__(self, l2_reg: float = 0.002):
        super().__init__(
            NPairsLoss(
                distance=DotProductSimilarity(normalize_embeddings=False),
                embedding_regularizer=LpRegularizer(p=2, power=2),
                embedding_reg_weight=l2_reg,
            )
        )
