from pytorch_metric_learning.miners import BaseMiner
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from miners.registry import register_miner


@register_miner("all")
class AllTripletsMiner(BaseMiner):
    """Batch-All: every (anchor, positive, negative) triplet of the batch."""

    def __init__(self, margin: float = 0.2, **kwargs):
        super().__init__(**kwargs)
        self.margin = margin

    def mine(self, embeddings, labels, ref_emb, ref_labels):
        return lmu.get_all_triplets_indices(labels, ref_labels)
