from pytorch_metric_learning.miners import TripletMarginMiner

from miners.registry import register_miner


@register_miner("semihard")
class SemiHardNegativeMiner(TripletMarginMiner):
    """FaceNet semi-hard negatives: d(a,p) < d(a,n) < d(a,p) + margin, every positive pair."""

    def __init__(self, margin: float = 0.2, **kwargs):
        super().__init__(margin=margin, type_of_triplets="semihard", **kwargs)
