from pytorch_metric_learning.losses import (
    GeneralizedLiftedStructureLoss as PMLGeneralizedLiftedStructureLoss,
)

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("generalized-lifted")
class GeneralizedLiftedStructureLoss(AdaptedLoss):
    """Hermans et al. 2017's generalised lifted structure loss: for each anchor, the hinge
    (at 0) of log(sum over its positives of exp(d_ap - pos_margin)) + log(sum over its
    negatives of exp(neg_margin - d_an)), on Euclidean distances of L2-normalised embeddings;
    the mean over the batch's anchors (PML's GeneralizedLiftedStructureLoss)."""

    sources = {
        "neg_margin": "PML's default (1), with its documentation of Hermans et al. 2017's loss",
    }
    search_space = {"neg_margin": ("float", 0.2, 1.5)}

    memory_ok = True
    family = "pair weighting"
    pml_class = PMLGeneralizedLiftedStructureLoss
