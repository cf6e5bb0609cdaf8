from pytorch_metric_learning.losses import TripletMarginLoss

from losses.base import PMLLoss
from losses.registry import register_loss
from miners import build_miner


@register_loss("triplet")
class TripletLoss(PMLLoss):
    """Margin triplet loss on L2-normalised embeddings with the triplets a miner selects.

    The miner gets the loss's own margin (PML's TripletMarginMiner defaults to another one).
    """

    sources = {
        "margin": (
            "chosen here: no source document states one (PML's TripletMarginMiner default 0.2, "
            "its TripletMarginLoss default 0.05); on non-squared distances of L2-normalised "
            "embeddings"
        ),
        "miner": "Liu et al. 2019 compares all, semihard and easy-positive; semi-hard is FaceNet's",
    }
    search_space = {"margin": ("float", 0.05, 0.5)}

    class_balanced = True
    memory_ok = True
    normalize_embeddings = True
    pml_class = TripletMarginLoss

    def __init__(self, margin: float = 0.2, miner: str = "semihard"):
        super().__init__(TripletMarginLoss(margin=margin), build_miner(miner, margin=margin))
