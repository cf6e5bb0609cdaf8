import torch
from pytorch_metric_learning.losses import SmoothAPLoss as PMLSmoothAPLoss

from losses.base import PMLLoss
from losses.registry import register_loss


def class_blocks(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch order that puts each class's examples together, and the labels under which
    PML 2.9's SmoothAPLoss takes those runs for the classes.

    PML cuts the batch into consecutive blocks of (batch size / number of classes) examples and
    takes each block for a class: a block is a class only where the batch has as many classes
    as examples of each. Labels of m values, each C times (C classes of m), make its blocks m
    long."""
    classes, counts = torch.unique(labels, return_counts=True)
    if len(counts.unique()) != 1:
        raise ValueError(
            "smooth-ap needs the same number of examples of each class in a batch (class-"
            f"balanced batches); got {sorted(counts.tolist())}"
        )
    order = torch.argsort(labels, stable=True)
    blocks = torch.arange(len(labels), device=labels.device) // len(classes)
    return order, blocks


@register_loss("smooth-ap")
class SmoothAPLoss(PMLLoss):
    """Brown et al. 2020: 1 - the average precision of each example's ranking of the batch by
    cosine similarity, each rank smoothed into 1 + the sum of sigmoid((s_qj - s_qi) /
    temperature) over the others j; the mean over the batch (PML's SmoothAPLoss).

    As PML and the authors' code, a query is one of its own positives (ranked first, at
    similarity 1) and ranks itself among the others, where the paper's AP is over the rest of
    the batch. Every class needs the same number of examples in the batch; PML 2.9 reads the
    classes off the batch layout (`class_blocks`), not off the labels."""

    sources = {
        "temperature": "PML's default (0.01), the value in the example of Brown et al. 2020's code"
    }
    search_space = {"temperature": ("log", 0.001, 0.1)}

    class_balanced = True
    memory_ok = False  # PML's class takes no reference embeddings (the memory's)
    normalize_embeddings = True  # PML's CosineSimilarity (the only distance it accepts)
    family = "ranking"
    pml_class = PMLSmoothAPLoss

    def __init__(self, temperature: float = 0.01):
        super().__init__(PMLSmoothAPLoss(temperature=temperature))

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor | None = None
    ) -> torch.Tensor:
        order, blocks = class_blocks(labels)
        return super().forward(embeddings[order], blocks, indices)
