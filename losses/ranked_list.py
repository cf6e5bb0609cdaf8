from pytorch_metric_learning.losses import RankedListLoss as PMLRankedListLoss

from losses.pml_adapter import AdaptedLoss
from losses.registry import register_loss


@register_loss("ranked-list")
class RankedListLoss(AdaptedLoss):
    """Wang et al. 2019's ranked list loss: each example of the batch is a query against the
    rest, on Euclidean distances d of L2-normalised embeddings, with the boundary
    alpha = 1 + margin / 2. Its violating positives (d > alpha - margin) and negatives
    (d < alpha) give L_P, the mean of d - (alpha - margin) weighted by
    exp(Tp (d - (alpha - margin))), and L_N, the mean of alpha - d weighted by
    exp(Tn (alpha - d)); the query's loss is (1 - imbalance) L_P + imbalance L_N, and the
    batch's the mean over all its queries (PML's RankedListLoss; Tp = 0 is the paper's
    RLL-Simpler, its positives unweighted).

    As PML: a part without violators is 0 (a singleton class's query keeps L_N); each weighted
    mean's denominator has 1e-5 more per example of the batch; gradients flow through the
    weights too, where the authors' code scales each pair's gradient by its weight, held
    constant."""

    sources = {
        "margin": "Wang et al. 2019 (m = 0.4, the authors' released In-Shop configuration); "
        "alpha = 1 + m / 2 = 1.2 follows, PML's default boundary and the authors' code's",
        "Tn": "Wang et al. 2019 (T_n = 10, the authors' released CUB-200 configuration; "
        "In-Shop's has 12)",
        "imbalance": "PML's default (0.5): the positive and negative sets weighted equally",
        "Tp": "PML's default (0), Wang et al. 2019's RLL-Simpler",
    }
    search_space = {"margin": ("float", 0.1, 0.8), "Tn": ("float", 0.0, 20.0)}

    memory_ok = False  # PML's CrossBatchMemory refuses it (it takes no reference embeddings)
    family = "ranking"
    pml_class = PMLRankedListLoss
    params = ("margin", "Tn", "imbalance", "Tp")  # alpha follows from the margin
    defaults = {"margin": 0.4, "Tn": 10.0}  # PML has none
