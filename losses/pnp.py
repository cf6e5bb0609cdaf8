from pytorch_metric_learning.losses import PNPLoss as PMLPNPLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("pnp")
class PNPLoss(AdaptedLoss):
    """Li et al. 2022's PNP loss ("only penalizing negative instances before positive ones"):
    each example of the batch is a query; for each of its positives i,
    R = the sum over the query's negatives j of sigmoid((s_j - s_i) / anneal), a smooth count
    of the negatives ranked before i on cosine similarity s. The variant's function of R
    (O: R; Ds: log(1 + R); Dq: 1 - 1 / (1 + R)^alpha; Iu: (1 + R) log(1 + R);
    Ib: (b R - log(1 + b R)) / b^2) is averaged over the query's positives, then over the
    queries that have one (PML's PNPLoss; alpha is used by Dq only, b by Ib only).

    As PML and the authors' code, the query is one of its own positives (at s = 1, so R is
    about 0 for it), and the sigmoid's argument is clamped to [-50, 50]: at anneal 0.01,
    similarity differences beyond 0.5 pass no gradient."""

    sources = {
        "variant": "PML's default (O); PML's documentation gives Li et al. 2022's as Dq",
        "alpha": "Li et al. 2022 (8), as PML's documentation gives it; PML's default is 1",
        "b": "PML's default (2), also Li et al. 2022's, as PML's documentation gives it",
        "anneal": "PML's default (0.01), also Li et al. 2022's, as PML's documentation gives it",
    }
    search_space = {"anneal": ("log", 0.001, 0.1)}

    memory_ok = False  # PML's CrossBatchMemory refuses it (it takes no reference embeddings)
    family = "ranking"
    pml_class = PMLPNPLoss
    defaults = {"alpha": 8.0}
