from pytorch_metric_learning.miners import BatchEasyHardMiner

from miners.registry import register_miner


@register_miner("easy-positive")
class EasyPositiveSemiHardNegativeMiner(BatchEasyHardMiner):
    """Xuan et al. 2019: each anchor's closest positive with a semi-hard negative for it.

    The negative is the closest one still farther than that positive; `margin` is unused
    (the selection has none) but accepted so that every miner is built the same way.
    """

    def __init__(self, margin: float = 0.2, **kwargs):
        super().__init__(
            pos_strategy=BatchEasyHardMiner.EASY, neg_strategy=BatchEasyHardMiner.SEMIHARD, **kwargs
        )
        self.margin = margin
