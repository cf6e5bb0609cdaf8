import torch
import torch.nn.functional as F

from losses.base import BenchLoss
from losses.domains import POSITIVE
from losses.registry import register_loss


@register_loss("instance")
class InstanceLoss(BenchLoss):
    """Zheng et al. 2020 (instance loss): each embedding classified among the batch's embeddings
    by a softmax over gamma x cosine similarity (itself included), its target the first
    embedding of the batch with its label; with distinct labels each embedding is its own
    class, the paper's view of each instance as a class. Written here.

    PML's InstanceLoss is not used: its target column for example i is the rank of labels[i]
    among the batch's sorted distinct labels, a class rank used as a batch column. That column
    holds an example of labels[i] only when the batch's first K examples carry its K distinct
    labels in increasing order (labels 0..N-1, or a two-stream batch labelled 0..K-1 twice).
    The harness's class-balanced batches hold m consecutive examples per class in random class
    order: for labels [7, 7, 3, 3] PML's targets are columns [1, 1, 0, 0], so both examples of
    class 3 are pulled towards the first example of class 7; in batches of 16 classes x 4
    from PML's MPerClassSampler about 9 rows in 10 get a target of another class. Here the
    target is the first column with labels[i]: PML's column wherever PML's layout holds, and
    one of the right label always."""

    sources = {"gamma": "PML's default (64)"}
    search_space = {"gamma": ("log", 4.0, 128.0)}

    class_balanced = True  # with random batches nearly every label would be a singleton
    normalize_embeddings = True
    family = "classification"
    domains = {"gamma": POSITIVE}  # the softmax's scale: 0 trains nothing

    def __init__(self, gamma: float = 64.0):
        super().__init__()
        self.gamma = gamma

    def forward(self, embeddings, labels, indices=None):
        unit = F.normalize(embeddings, dim=1)
        logits = self.gamma * unit @ unit.t()
        same = labels.unsqueeze(1) == labels.unsqueeze(0)
        # argmax returns the first of equal maxima: the first column with the row's label.
        target = same.to(torch.float32).argmax(dim=1)
        return F.cross_entropy(logits, target)
