import torch
import torch.nn.functional as F
from torch import nn

from losses.base import BenchLoss
from losses.registry import register_loss


@register_loss("softmax")
class SoftmaxLoss(BenchLoss):
    """A linear classifier on the embedding with cross-entropy; the embedding is evaluated."""

    def __init__(self, num_classes: int, dims: int):
        super().__init__()
        self.classifier = nn.Linear(dims, num_classes)

    def forward(self, embeddings, labels, indices=None):
        return F.cross_entropy(self.classifier(embeddings), labels)

    @torch.no_grad()
    def class_probabilities(self, queries, train, train_labels, num_classes):
        """The classifier's softmax (its argmax is the prediction)."""
        return torch.softmax(self.classifier(queries.to(self.classifier.weight)), dim=1).cpu()
