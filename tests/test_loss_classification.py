"""The classification-style losses against hand-written loops on a small batch: NCA (PML's
NCALoss) and softmax cross-entropy with its learned classifier (tests/loss_reference.py)."""

from __future__ import annotations

import pytest
import torch

import losses
from tests.loss_reference import batch, close, grad_of, log_sum_exp, rows, sq_dist, unit_rows

# --------------------------------------------------------------------------------------------
# NCA
# --------------------------------------------------------------------------------------------


def nca_reference(x, labels, scale):
    """PML's NCALoss: squared distances of unit embeddings, softmax over k != i, and the mean
    of -log(sum of same-label probabilities) over the examples that have another of their
    label in the batch (the others have probability 0 and are dropped)."""
    u = unit_rows(x)
    n = len(u)
    y = labels.tolist()
    per_example = []
    for i in range(n):
        if not any(y[j] == y[i] for j in range(n) if j != i):
            continue
        den = sum(torch.exp(-scale * sq_dist(u[i], u[k])) for k in range(n) if k != i)
        num = sum(
            torch.exp(-scale * sq_dist(u[i], u[j])) for j in range(n) if j != i and y[j] == y[i]
        )
        per_example.append(-torch.log(num / den))
    return sum(per_example) / len(per_example), len(per_example)


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_nca_matches_loop(scale):
    params = {} if scale == 1.0 else {"softmax_scale": scale}
    loss = losses.build_loss("nca", params, num_train=100, num_classes=4, dims=4)
    x0, y = batch(10, [0, 1, 2, 0, 1, 5, 2, 0, 7])  # classes 5 and 7 are singletons
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    ref, count = nca_reference(x_ref, y, scale)
    (g_ref,) = grad_of(ref, x_ref)
    assert count == 7
    close(value, ref)
    close(g, g_ref)


# --------------------------------------------------------------------------------------------
# Softmax
# --------------------------------------------------------------------------------------------


def test_softmax_matches_log_softmax_loop():
    num_classes, dims = 5, 4
    torch.manual_seed(11)
    loss = losses.build_loss("softmax", {}, num_train=100, num_classes=num_classes, dims=dims)
    loss = loss.double()
    weight, bias = loss.classifier.weight, loss.classifier.bias
    assert list(loss.parameters()) == [weight, bias]
    assert weight.shape == (num_classes, dims) and bias.shape == (num_classes,)
    assert all(p.requires_grad for p in loss.parameters())

    x0, y = batch(12, [0, 1, 2, 3, 4, 0, 2, 2])
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    gx, gw, gb = grad_of(value, x, weight, bias)

    x_ref = x0.clone().requires_grad_()
    w_ref = weight.detach().clone().requires_grad_()
    b_ref = bias.detach().clone().requires_grad_()
    r = rows(x_ref)
    total = 0.0
    for i in range(len(r)):
        logits = [
            sum(w_ref[c, t] * r[i][t] for t in range(dims)) + b_ref[c] for c in range(num_classes)
        ]
        total = total - (logits[int(y[i])] - log_sum_exp(logits))
    ref = total / len(r)
    gx_ref, gw_ref, gb_ref = grad_of(ref, x_ref, w_ref, b_ref)
    close(value, ref)
    close(gx, gx_ref)
    close(gw, gw_ref)
    close(gb, gb_ref)
