"""The Tiny ImageNet pair-verification report Algorithm 1: offline class-centroid hard-negative pair
mining.

`refresh` takes the embeddings of the whole training set, computes each class's mean and stores,
for each class, its `closest` nearest other class means (Euclidean). Mining then forms the
balanced online pairs of `miners.pair_generator`, drawing each anchor's negatives from the
batch examples whose class is among the closest classes of the anchor's class; when the batch
holds none of them, or before the first refresh, any negative of the batch will do.
"""

from __future__ import annotations

import torch
from pytorch_metric_learning.miners import BaseMiner

from miners.pair_generator import balanced_pairs
from miners.registry import register_miner


def closest_classes(centroids: torch.Tensor, m: int) -> torch.Tensor:
    """(C, min(m, C - 1)): each centroid's nearest other centroids, nearest first."""
    d = torch.cdist(centroids, centroids, compute_mode="donot_use_mm_for_euclid_dist")
    d.fill_diagonal_(float("inf"))
    return d.topk(min(m, len(centroids) - 1), dim=1, largest=False).indices


def class_means(embeddings: torch.Tensor, labels: torch.Tensor):
    """The sorted classes present and the mean embedding of each."""
    classes, inverse = labels.unique(return_inverse=True)
    sums = torch.zeros(len(classes), embeddings.shape[1], dtype=embeddings.dtype)
    sums = sums.to(embeddings.device).index_add_(0, inverse, embeddings)
    return classes, sums / torch.bincount(inverse).unsqueeze(1).to(sums)


@register_miner("centroid-hard-negative")
class CentroidHardNegativeMiner(BaseMiner):
    """The Tiny ImageNet pair-verification report Algorithm 1: negatives from the closest class
    centroids, balanced pairs."""

    def __init__(self, margin: float = 0.2, closest: int = 5, pairs_per_anchor: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.margin = margin  # unused: `build_miner` gives every miner one
        self.closest = int(closest)
        self.pairs_per_anchor = int(pairs_per_anchor)
        # Row c: the closest classes of label c (-1 for labels absent from training); empty
        # until the first refresh. A buffer, so that a resumed run keeps it.
        self.register_buffer("table", torch.empty(0, 0, dtype=torch.long))

    @torch.no_grad()
    def refresh(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        classes, means = class_means(embeddings.detach(), labels.to(embeddings.device))
        nearest = classes[closest_classes(means, self.closest)]
        table = torch.full((int(classes.max()) + 1, nearest.shape[1]), -1, dtype=torch.long)
        table = table.to(nearest.device)
        table[classes] = nearest
        self.table = table

    def hard_negatives(self, labels: torch.Tensor) -> torch.Tensor | None:
        """(B, B): whether j's class is among the closest classes of i's; None before refresh."""
        if len(self.table) == 0:
            return None
        table = self.table.to(labels.device)
        rows = table[labels.clamp(max=len(table) - 1)]
        hard = (rows.unsqueeze(2) == labels.view(1, 1, -1)).any(dim=1)
        return hard & (labels < len(table)).unsqueeze(1)

    def mine(self, embeddings, labels, ref_emb=None, ref_labels=None):
        i, j, same = balanced_pairs(labels, self.pairs_per_anchor, self.hard_negatives(labels))
        return i[same], j[same], i[~same], j[~same]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The table's shape is only known after a refresh: take the checkpoint's.
        saved = state_dict.get(prefix + "table")
        if saved is not None:
            self.table = torch.empty_like(saved, device=self.table.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
