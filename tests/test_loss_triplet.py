"""The triplet loss against a hand-written loop over triplets on a small batch: with every
triplet, and with the semihard miner at the loss's own margin; the batch-hard miner (Hermans
et al. 2017) by a loop (tests/loss_reference.py)."""

from __future__ import annotations

import pytest
import torch

import losses
import miners
from tests.loss_reference import batch, close, dist_table, grad_of, mean_nonzero, unit_rows, val


def triplet_reference(x, labels, margin, semihard_margin=None):
    """Mean over triplets with non-zero loss; with `semihard_margin`, only the triplets that
    PML's TripletMarginMiner("semihard") keeps: 0 < d(a,n) - d(a,p) <= margin."""
    dist = dist_table(unit_rows(x))
    y = labels.tolist()
    n = len(y)
    terms = []
    for a in range(n):
        for p in range(n):
            if p == a or y[p] != y[a]:
                continue
            for q in range(n):
                if y[q] == y[a]:
                    continue
                gap = val(dist[a, q]) - val(dist[a, p])
                if semihard_margin is not None and not (0 < gap <= semihard_margin):
                    continue
                terms.append(torch.clamp(dist[a, p] - dist[a, q] + margin, min=0))
    return mean_nonzero(terms), len(terms)


TRIPLET_LABELS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


@pytest.mark.parametrize("margin", [0.2, 0.5])
def test_triplet_all_matches_triplet_loop(margin):
    loss = losses.build_loss(
        "triplet", {"miner": "all", "margin": margin}, num_train=100, num_classes=3, dims=4
    )
    x0, y = batch(7, TRIPLET_LABELS)
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    ref, count = triplet_reference(x_ref, y, margin)
    (g_ref,) = grad_of(ref, x_ref)
    assert count == 12 * 3 * 8
    close(value, ref)
    close(g, g_ref)


def test_triplet_default_miner_is_semihard_with_default_margin():
    assert losses.loss_defaults("triplet") == {"margin": 0.2, "miner": "semihard"}
    loss = losses.build_loss("triplet", {}, num_train=100, num_classes=3, dims=4)
    x0, y = batch(8, TRIPLET_LABELS)
    ref, count = triplet_reference(x0, y, 0.2, semihard_margin=0.2)
    assert 0 < count < 12 * 3 * 8
    close(loss(x0, y), ref)


@pytest.mark.parametrize("margin", [0.1, 0.5])
def test_triplet_semihard_uses_the_loss_margin(margin):
    loss = losses.build_loss(
        "triplet", {"miner": "semihard", "margin": margin}, num_train=100, num_classes=3, dims=4
    )
    assert loss.miner.margin == margin
    x0, y = batch(8, TRIPLET_LABELS)
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    ref, count = triplet_reference(x_ref, y, margin, semihard_margin=margin)
    (g_ref,) = grad_of(ref, x_ref)
    assert count > 0
    close(value, ref)
    close(g, g_ref)
    if margin > 0.2:
        # Had the miner kept PML's default margin (0.2), the value would differ.
        wrong, _ = triplet_reference(x0, y, margin, semihard_margin=0.2)
        assert abs(val(wrong) - val(ref)) > 1e-3


def test_batch_hard_mines_each_anchors_farthest_positive_and_closest_negative():
    """Hermans et al. 2017's batch hard, by a loop over a batch with a singleton class (its
    anchor has no positive, so no triplet); then triplet with it against the loop's triplets."""
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 3])
    x, _ = batch(21, labels.tolist())
    dist = dist_table(unit_rows(x))
    y = labels.tolist()
    expected = []
    for a in range(len(y)):
        pos = [p for p in range(len(y)) if p != a and y[p] == y[a]]
        neg = [q for q in range(len(y)) if y[q] != y[a]]
        if pos:
            expected.append((a, max(pos, key=lambda p: val(dist[a, p])),
                             min(neg, key=lambda q: val(dist[a, q]))))  # fmt: skip
    anchors, positives, anchors_again, negatives = miners.build_miner("batch-hard")(x, labels)
    assert anchors.tolist() == anchors_again.tolist()
    found = zip(anchors.tolist(), positives.tolist(), negatives.tolist(), strict=True)
    assert sorted(found) == expected
    loss = losses.build_loss("triplet", {"miner": "batch-hard", "margin": 0.3})
    value = loss(x, labels)
    terms = [torch.clamp(dist[a, p] - dist[a, q] + 0.3, min=0) for a, p, q in expected]
    close(value, mean_nonzero(terms))
