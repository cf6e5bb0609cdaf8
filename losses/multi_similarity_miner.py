from pytorch_metric_learning.losses import MultiSimilarityLoss as PMLMultiSimilarityLoss
from pytorch_metric_learning.miners import MultiSimilarityMiner

from losses.base import PMLLoss
from losses.multi_similarity import MS_SOURCES, MS_SPACE
from losses.registry import register_loss


@register_loss("multi-similarity-miner")
class MultiSimilarityMinerLoss(PMLLoss):
    """Wang et al. 2019: the multi-similarity loss over the pairs its own mining keeps (PML's
    MultiSimilarityLoss with its MultiSimilarityMiner).

    A positive pair is kept when it is less similar than the anchor's most similar negative
    plus epsilon, a negative when it is more similar than the least similar positive minus
    epsilon."""

    sources = {
        **MS_SOURCES,
        "epsilon": "PML's default (0.1), also Wang et al. 2019's released code's margin",
    }
    search_space = {**MS_SPACE, "epsilon": ("float", 0.0, 0.5)}

    class_balanced = True
    memory_ok = True
    normalize_embeddings = True  # PML's CosineSimilarity, in the loss and the miner
    family = "pair weighting"
    pml_class = PMLMultiSimilarityLoss

    def __init__(
        self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5, epsilon: float = 0.1
    ):
        super().__init__(
            PMLMultiSimilarityLoss(alpha=alpha, beta=beta, base=base),
            MultiSimilarityMiner(epsilon=epsilon),
        )
