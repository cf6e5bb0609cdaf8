"""The `hdc` miner (Yuan et al. 2017, PML's HDCMiner) against a loop over a small batch with a
singleton class: of all ordered positive pairs the farthest ceil(f * count), of all negative
pairs the closest ceil(f * count); then a pair loss (PML's ContrastiveLoss) over those pairs.

d(i, j) = d(j, i), so (i, j) and (j, i) tie; where the cut falls between them, which one PML's
topk keeps is arbitrary. Pairs are therefore compared unordered, with their counts."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

import losses
from miners import build_miner, hdc
from tests.loss_reference import batch, close, dist_table, grad_of, mean_nonzero, unit_rows, val

LABELS = [0, 0, 0, 1, 1, 1, 2, 2, 3]  # 3: a singleton, with negatives and no positive


def hardest(pairs, dist, fraction: float, farthest: bool) -> list[tuple[int, int]]:
    ranked = sorted(pairs, key=lambda e: val(dist[e]), reverse=farthest)
    return ranked[: math.ceil(fraction * len(pairs))]


def hdc_reference(x: torch.Tensor, fraction: float):
    """The loop's kept (positive, negative) ordered pairs and the distance table."""
    dist = dist_table(unit_rows(x))
    n = len(LABELS)
    ordered = [(i, j) for i in range(n) for j in range(n) if i != j]
    pos = [(i, j) for i, j in ordered if LABELS[i] == LABELS[j]]
    neg = [(i, j) for i, j in ordered if LABELS[i] != LABELS[j]]
    return hardest(pos, dist, fraction, True), hardest(neg, dist, fraction, False), dist


def unordered(pairs) -> Counter:
    return Counter(tuple(sorted(p)) for p in pairs)


@pytest.mark.parametrize("fraction", [None, 0.25, 0.8])
def test_hdc_keeps_the_hardest_fraction_of_positive_and_negative_pairs(fraction):
    x, labels = batch(5, LABELS)
    if fraction is None:
        miner, fraction = build_miner("hdc", margin=0.3), 0.5
        assert miner.margin == 0.3
    else:
        miner = hdc.HardAwareCascadeMiner(filter_percentage=fraction)
    assert miner.filter_percentage == fraction
    a1, p, a2, n = (t.tolist() for t in miner(x, labels))
    pos, neg, _ = hdc_reference(x, fraction)
    assert len(a1) == len(pos) == math.ceil(fraction * 14)
    assert len(a2) == len(neg) == math.ceil(fraction * 58)
    assert unordered(zip(a1, p, strict=True)) == unordered(pos)
    assert unordered(zip(a2, n, strict=True)) == unordered(neg)


def contrastive(pos, neg, dist) -> torch.Tensor:
    """PML's ContrastiveLoss at its defaults (margins 0 and 1): each kind averaged over its
    non-zero terms, the two summed."""
    pos_terms = [torch.clamp(dist[e], min=0) for e in pos]
    neg_terms = [torch.clamp(1 - dist[e], min=0) for e in neg]
    return mean_nonzero(pos_terms) + mean_nonzero(neg_terms)


def test_pair_loss_with_hdc_is_contrastive_over_the_mined_pairs():
    """The registered `contrastive` takes no miner; PML's ContrastiveLoss does through the
    adapter, and consumes the pairs as they are (the triplet losses would cross them into
    triplets)."""
    loss = losses.build_loss("pml:ContrastiveLoss", {"miner": "hdc"})
    x0, labels = batch(5, LABELS)
    x = x0.clone().requires_grad_()
    value = loss(x, labels)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    pos, neg, dist = hdc_reference(x_ref, 0.5)
    ref = contrastive(pos, neg, dist)
    (g_ref,) = grad_of(ref, x_ref)
    assert torch.isfinite(value) and torch.isfinite(g).all() and g.abs().sum() > 0
    close(value, ref)
    close(g, g_ref)
    # Over every pair (no miner) the value would differ.
    everything, every_neg, _ = hdc_reference(x0, 1.0)
    assert abs(val(contrastive(everything, every_neg, dist)) - val(ref)) > 1e-3
