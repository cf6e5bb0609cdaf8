from pytorch_metric_learning.losses import TripletMarginLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("triplet")
class TripletLoss(AdaptedLoss):
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

    memory_ok = True
    pml_class = TripletMarginLoss
    params = ("margin", "miner")
    defaults = {"margin": 0.2, "miner": "semihard"}
    margin_to_miner = True  # the one difference from pml:TripletMarginLoss with its miner
