from pytorch_metric_learning.miners import HDCMiner

from miners.registry import register_miner


@register_miner("hdc")
class HardAwareCascadeMiner(HDCMiner):
    """Yuan et al. 2017 (ICCV), Hard-Aware Deeply Cascaded Embedding: of all the batch's
    positive pairs the farthest `filter_percentage` (rounded up), and of all its negative pairs
    the closest `filter_percentage`, chosen over the whole batch, not per anchor (PML's
    HDCMiner, distances on the unit sphere). It gives pairs (a1, p, a2, n), not triplets.

    `filter_percentage` = 0.5 is PML 2.9's default. The paper cascades several models, each
    passing on the hardest samples of the one before; PML's class is a single level of that
    filter, and here it is applied once, to the one embedding's pairs.

    `margin` is unused (the selection has none) but accepted so that every miner is built the
    same way.
    """

    def __init__(self, margin: float = 0.2, filter_percentage: float = 0.5, **kwargs):
        super().__init__(filter_percentage=filter_percentage, **kwargs)
        self.margin = margin
