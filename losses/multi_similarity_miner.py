from losses.multi_similarity import MultiSimilarityLoss
from losses.registry import register_loss


@register_loss("multi-similarity-miner")
class MultiSimilarityMinerLoss(MultiSimilarityLoss):
    """Wang et al. 2019: the multi-similarity loss over the pairs its own mining keeps (PML's
    MultiSimilarityLoss with its MultiSimilarityMiner).

    A positive pair is kept when it is less similar than the anchor's most similar negative
    plus epsilon, a negative when it is more similar than the least similar positive minus
    epsilon."""

    sources = {
        **MultiSimilarityLoss.sources,
        "epsilon": "PML's default (0.1), also Wang et al. 2019's released code's margin",
    }
    search_space = {**MultiSimilarityLoss.search_space, "epsilon": ("float", 0.0, 0.5)}

    params = ("alpha", "beta", "base", "epsilon")  # epsilon: its miner's
    fixed = {"miner": "pml:MultiSimilarityMiner"}
