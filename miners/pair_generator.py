"""The Tiny ImageNet pair-verification report's Data Generator, online: balanced positive and
negative pairs within the batch.

Every anchor gets `pairs_per_anchor` positive partners (same label, never itself) and as many
negative partners (another label), drawn with the torch RNG so that the trainer's per-epoch
seeding makes them reproducible. Partners are distinct while the batch has enough candidates;
with fewer, the candidates are cycled so the count stays exact. An anchor that has no positive or
no negative in the batch forms no pair at all, which keeps positives and negatives balanced.
"""

from __future__ import annotations

import torch


def pick_partners(candidates: torch.Tensor, k: int) -> torch.Tensor:
    """k random candidate columns for each row of a (R, B) mask; every row needs a candidate."""
    keys = torch.rand(candidates.shape, device=candidates.device).masked_fill(~candidates, -1.0)
    order = keys.argsort(dim=1, descending=True)  # a random permutation of the candidates first
    count = candidates.sum(dim=1, keepdim=True)
    slots = torch.arange(k, device=candidates.device).unsqueeze(0) % count
    return order.gather(1, slots)


def balanced_pairs(
    labels: torch.Tensor, pairs_per_anchor: int, negatives: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pairs (i, j) with `same` (True for a positive pair): positives first, then negatives.

    `negatives`, a (B, B) mask, restricts each anchor's negatives to the masked ones when the
    batch has any (a hard-negative miner's choice); otherwise any other label will do.
    """
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    pos_mask, neg_mask = same & ~eye, ~same
    if negatives is not None:
        preferred = neg_mask & negatives.to(labels.device)
        neg_mask = torch.where(preferred.any(dim=1, keepdim=True), preferred, neg_mask)
    anchors = torch.nonzero(pos_mask.any(dim=1) & neg_mask.any(dim=1)).squeeze(1)
    pos = pick_partners(pos_mask[anchors], pairs_per_anchor).flatten()
    neg = pick_partners(neg_mask[anchors], pairs_per_anchor).flatten()
    i = anchors.repeat_interleave(pairs_per_anchor).repeat(2)
    flags = torch.ones(len(pos), dtype=torch.bool, device=labels.device)
    return i, torch.cat([pos, neg]), torch.cat([flags, ~flags])
