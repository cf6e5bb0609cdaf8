"""The pair losses against hand-written loops on a small batch: lifted structure (Song et al.
2016, Eq. 4, and PML's), contrastive (PML's reducers) and N-pair (Sohn 2016, PML's pairs and
regulariser); tests/loss_reference.py."""

from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning.losses import LiftedStructureLoss as PMLLiftedStructureLoss

import losses
from losses.lifted import lifted_structure_loss
from tests.loss_reference import (
    batch,
    close,
    dist_table,
    grad_of,
    log_sum_exp,
    mean_nonzero,
    rows,
    unit_rows,
    val,
)

# --------------------------------------------------------------------------------------------
# Lifted structure (Song et al. 2016, Eq. 4)
# --------------------------------------------------------------------------------------------

LIFTED_BATCHES = [
    (0, [0, 0, 1, 1, 2, 2, 0, 1]),
    (1, [3, 3, 3, 5, 5, 7, 7, 7, 9]),
    (2, [0, 1, 0, 1, 0, 1]),
]


def lifted_reference(x, labels, margin=1.0):
    u = unit_rows(x)
    dist = dist_table(u)
    n = len(u)
    y = labels.tolist()
    per_pair = []
    for i in range(n):
        for j in range(n):
            if i == j or y[i] != y[j]:
                continue
            s = sum(torch.exp(margin - dist[i, k]) for k in range(n) if y[k] != y[i])
            s = s + sum(torch.exp(margin - dist[j, q]) for q in range(n) if y[q] != y[j])
            j_ij = torch.log(s) + dist[i, j]
            per_pair.append(torch.clamp(j_ij, min=0) ** 2 / 2)
    return sum(per_pair) / len(per_pair)


@pytest.mark.parametrize("seed, labels", LIFTED_BATCHES)
def test_lifted_matches_pml_and_eq4_loop(seed, labels):
    x0, y = batch(seed, labels, dims=5)
    x = x0.clone().requires_grad_()
    value = lifted_structure_loss(x, y, neg_margin=1.0, pos_margin=0.0)
    (g,) = grad_of(value, x)

    x_pml = x0.clone().requires_grad_()
    pml = PMLLiftedStructureLoss(neg_margin=1, pos_margin=0)(x_pml, y)
    (g_pml,) = grad_of(pml, x_pml)

    x_ref = x0.clone().requires_grad_()
    ref = lifted_reference(x_ref, y)
    (g_ref,) = grad_of(ref, x_ref)

    assert val(ref) > 0
    close(value, pml)
    close(g, g_pml)
    close(value, ref)
    close(g, g_ref)

    registered = losses.build_loss("lifted", {}, num_train=100, num_classes=10, dims=5)
    close(registered(x0, y), ref)


def test_lifted_margins_match_pml():
    x0, y = batch(5, [0, 0, 1, 1, 2, 2, 2, 0])
    x = x0.clone().requires_grad_()
    value = lifted_structure_loss(x, y, neg_margin=0.7, pos_margin=0.2)
    pml = PMLLiftedStructureLoss(neg_margin=0.7, pos_margin=0.2)(x0, y)
    close(value, pml)
    assert abs(val(value) - val(lifted_reference(x0, y))) > 1e-3


# --------------------------------------------------------------------------------------------
# Contrastive
# --------------------------------------------------------------------------------------------


def contrastive_reference(x, labels, pos_margin, neg_margin):
    dist = dist_table(unit_rows(x))
    y = labels.tolist()
    pos, neg = [], []
    for (i, j), d in dist.items():
        if y[i] == y[j]:
            pos.append(torch.clamp(d - pos_margin, min=0))
        else:
            neg.append(torch.clamp(neg_margin - d, min=0))
    return mean_nonzero(pos) + mean_nonzero(neg), pos, neg


@pytest.mark.parametrize("params", [{}, {"pos_margin": 0.3, "neg_margin": 1.2}])
def test_contrastive_matches_pair_loop(params):
    defaults = losses.loss_defaults("contrastive")
    assert defaults == {"pos_margin": 0.0, "neg_margin": 0.5}
    margins = {**defaults, **params}
    loss = losses.build_loss("contrastive", params, num_train=100, num_classes=3, dims=4)
    x0, y = batch(6, [0, 0, 0, 1, 1, 1, 2, 2, 2, 0])
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)

    x_ref = x0.clone().requires_grad_()
    ref, pos, neg = contrastive_reference(x_ref, y, margins["pos_margin"], margins["neg_margin"])
    (g_ref,) = grad_of(ref, x_ref)
    close(value, ref)
    close(g, g_ref)
    # The batch makes the reducer matter: some pairs have zero loss, the plain mean differs.
    zero_pairs = [v for v in pos + neg if val(v) == 0]
    assert zero_pairs
    plain = sum(pos) / len(pos) + sum(neg) / len(neg)
    assert abs(val(plain) - val(ref)) > 1e-3


# --------------------------------------------------------------------------------------------
# N-pair (Sohn 2016)
# --------------------------------------------------------------------------------------------


def npair_reference(x, labels, l2_reg):
    """One (anchor, positive) pair per class with >= 2 examples: as PML's
    convert_to_pos_pairs_with_unique_labels picks it, the class's first example is the anchor
    and its second the positive. Cross-entropy over raw inner products, mean over pairs, plus
    l2_reg * the mean over all embeddings of the squared L2 norm (LpRegularizer(p=2, power=2)
    with its MeanReducer, scaled by embedding_reg_weight and added)."""
    r = rows(x)
    y = labels.tolist()
    pairs = []
    for c in sorted(set(y)):
        members = [i for i in range(len(y)) if y[i] == c]
        if len(members) >= 2:
            pairs.append((members[0], members[1]))

    def dot(u, v):
        return sum(a * b for a, b in zip(u, v, strict=True))

    ce = []
    for a, p in pairs:
        logits = [dot(r[a], r[q]) for _, q in pairs]
        ce.append(log_sum_exp(logits) - dot(r[a], r[p]))
    reg = sum(sum(v * v for v in row) for row in r) / len(r)
    return sum(ce) / len(ce) + l2_reg * reg, pairs


@pytest.mark.parametrize("l2_reg", [0.002, 0.5])
def test_npair_matches_loop(l2_reg):
    params = {} if l2_reg == 0.002 else {"l2_reg": l2_reg}
    loss = losses.build_loss("npair", params, num_train=100, num_classes=4, dims=4)
    # Class 9 is a singleton: no pair, but its embedding still counts in the regulariser.
    labels = [2, 0, 2, 1, 0, 2, 1, 9, 3, 3]
    x0, y = batch(9, labels)
    x0 = 2.0 * x0
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    ref, pairs = npair_reference(x_ref, y, l2_reg)
    (g_ref,) = grad_of(ref, x_ref)
    assert pairs == [(1, 4), (3, 6), (0, 2), (8, 9)]
    close(value, ref)
    close(g, g_ref)
