from pytorch_metric_learning.losses import AngularLoss as PMLAngularLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("angular")
class AngularLoss(AdaptedLoss):
    """Wang et al. 2017's angular loss: for each positive pair (a, p), log(1 + sum over the
    negatives n of exp(4 tan^2(alpha) (x_a + x_p).x_n - 2 (1 + tan^2(alpha)) x_a.x_p)) on
    L2-normalised embeddings; the mean over the batch's positive pairs (PML's AngularLoss, alpha
    in degrees, without the N-pair term the paper adds to it).

    The embeddings are normalised before PML's loss: PML normalises the anchor and positive but
    takes the negatives as given, where the paper's formula has every embedding on the sphere."""

    sources = {"alpha": "PML's default (40 degrees)"}
    search_space = {"alpha": ("float", 30.0, 55.0)}

    memory_ok = False  # the negatives would be the memory's, not normalised here
    family = "ranking"
    pml_class = PMLAngularLoss
