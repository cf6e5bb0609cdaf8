from pytorch_metric_learning.miners import BatchEasyHardMiner

from miners.registry import register_miner


@register_miner("batch-hard")
class BatchHardMiner(BatchEasyHardMiner):
    """Hermans et al. 2017's batch hard: each anchor's farthest positive with its closest
    negative, one triplet per anchor (PML's BatchHardMiner, distances on the unit sphere).

    `margin` is unused (the selection has none) but accepted so that every miner is built the
    same way.
    """

    def __init__(self, margin: float = 0.2, **kwargs):
        super().__init__(
            pos_strategy=BatchEasyHardMiner.HARD, neg_strategy=BatchEasyHardMiner.HARD, **kwargs
        )
        self.margin = margin
