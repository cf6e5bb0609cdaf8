"""Large-margin softmax (Liu et al. 2016), SphereFace (Liu et al. 2017) and the instance loss
(Zheng et al. 2020) against hand-written loops on a small batch, value and gradient (embeddings
and class weights), at the defaults and at other parameters; what PML's InstanceLoss computes
instead; one backward pass of each on a batch of 16 classes x 4 (tests/loss_reference.py)."""

from __future__ import annotations

import math

import pytest
import torch
from pytorch_metric_learning.losses import InstanceLoss as PMLInstanceLoss

import losses
from losses import instance, large_margin_softmax, sphereface  # noqa: F401
from tests.loss_reference import (
    batch,
    close,
    cross_entropy,
    dot,
    grad_of,
    rows,
    unit_rows,
    val,
    value_and_grads,
)

NUM_CLASSES, DIMS = 5, 4
LABELS = [0, 1, 2, 3, 4, 0, 2, 2, 1]
BATCH_SEED = 10  # its true-class angles reach every piece of psi at m = 4

# --------------------------------------------------------------------------------------------
# L-Softmax and SphereFace
# --------------------------------------------------------------------------------------------


def norm(v) -> torch.Tensor:
    return torch.sqrt(dot(v, v))


def angle_interval(c, m: int) -> int:
    """k with the angle of cosine c in [k pi/m, (k+1) pi/m)."""
    return math.floor(math.acos(max(-1.0, min(1.0, val(c)))) / (math.pi / m))


def psi(c, m: int) -> torch.Tensor:
    """(-1)^k cos(m theta) - 2k, theta the angle of cosine c."""
    k = angle_interval(c, m)
    return (-1) ** k * torch.cos(m * torch.acos(torch.clamp(c, -1, 1))) - 2 * k


def margin_softmax_reference(x, labels, weights, margin, scale, weight_norms=True):
    """Mean cross-entropy over scale |W_j| |x| cos(theta_j), psi(theta) for the true class,
    W_j a column of PML's (dims, C) matrix; SphereFace (weight_norms False) drops |W_j|."""
    y = labels.tolist()
    columns = rows(weights.t())
    total = 0.0
    for i, r in enumerate(rows(x)):
        logits = []
        for j, w in enumerate(columns):
            c = dot(r, w) / (norm(r) * norm(w))
            if j == y[i]:
                c = psi(c, margin)
            logits.append(scale * norm(r) * (norm(w) if weight_norms else 1.0) * c)
        total = total + cross_entropy(logits, y[i])
    return total / len(y)


def sphereface_reference(x, labels, weights, margin, scale):
    return margin_softmax_reference(x, labels, weights, margin, scale, weight_norms=False)


CASES = [
    ("large-margin-softmax", {}, margin_softmax_reference, {"margin": 4, "scale": 1.0}),
    ("large-margin-softmax", {"margin": 3, "scale": 2.5}, margin_softmax_reference, {}),
    ("sphereface", {}, sphereface_reference, {"margin": 4, "scale": 1.0}),
    ("sphereface", {"margin": 2, "scale": 3.0}, sphereface_reference, {}),
]


def built(name: str, params: dict):
    torch.manual_seed(7)
    return losses.build_loss(name, params, num_train=100, num_classes=NUM_CLASSES, dims=DIMS)


@pytest.mark.parametrize("name, params, reference, defaults", CASES)
def test_margin_softmax_matches_loop(name, params, reference, defaults):
    loss = built(name, params).double()
    weights = loss.loss.W
    assert list(loss.parameters()) == [weights] and weights.requires_grad
    assert weights.shape == (DIMS, NUM_CLASSES)
    value_and_grads(loss, weights, batch(BATCH_SEED, LABELS), reference, **defaults, **params)


def test_the_defaults_are_those_the_references_take():
    for name, params, _, defaults in CASES:
        if not params:
            assert losses.loss_defaults(name) == defaults


@pytest.mark.parametrize("name", ["large-margin-softmax", "sphereface"])
def test_the_batch_reaches_every_piece_of_psi(name):
    # The true-class angles fall in every interval [k pi/4, (k+1) pi/4): the references'
    # (-1)^k and -2k are compared for each k, not only cos(4 theta).
    weights = rows(built(name, {}).loss.W.detach().double().t())
    x, y = batch(BATCH_SEED, LABELS)
    pieces = {
        angle_interval(dot(r, weights[c]) / (norm(r) * norm(weights[c])), 4)
        for r, c in zip(rows(x), y.tolist(), strict=True)
    }
    assert pieces == {0, 1, 2, 3}


# --------------------------------------------------------------------------------------------
# Instance loss
# --------------------------------------------------------------------------------------------

# Classes in blocks in random order, as PML's MPerClassSampler gives them, and a singleton.
INSTANCE_LABELS = [7, 7, 3, 3, 3, 5, 9, 9]


def first_of_label(labels: list[int]) -> list[int]:
    return [labels.index(c) for c in labels]


def instance_reference(x, gamma, targets):
    """Mean over i of -log softmax_j(gamma cos(x_i, x_j))[targets[i]], j over the whole batch."""
    u = unit_rows(x)
    total = 0.0
    for i, target in enumerate(targets):
        total = total + cross_entropy([gamma * dot(u[i], v) for v in u], target)
    return total / len(u)


def value_and_grad(loss, x0, labels) -> tuple[torch.Tensor, torch.Tensor]:
    x = x0.clone().requires_grad_()
    value = loss(x, labels)
    return value, grad_of(value, x)[0]


def reference_value_and_grad(x0, gamma, targets) -> tuple[torch.Tensor, torch.Tensor]:
    x = x0.clone().requires_grad_()
    value = instance_reference(x, gamma, targets)
    return value, grad_of(value, x)[0]


@pytest.mark.parametrize("params, gamma", [({}, 64.0), ({"gamma": 8.0}, 8.0)])
def test_instance_matches_loop(params, gamma):
    loss = losses.build_loss("instance", params, num_train=100, num_classes=4, dims=DIMS)
    assert list(loss.parameters()) == []
    x0, y = batch(21, INSTANCE_LABELS)
    value, g = value_and_grad(loss, x0, y)
    ref, g_ref = reference_value_and_grad(x0, gamma, first_of_label(INSTANCE_LABELS))
    close(value, ref)
    close(g, g_ref)


def test_instance_defaults():
    assert losses.loss_defaults("instance") == {"gamma": 64.0}


@pytest.mark.parametrize("labels", [[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 2], [0, 1, 2, 2, 0, 1]])
def test_instance_is_pmls_where_the_first_examples_are_the_sorted_labels(labels):
    # Distinct labels, or a two-stream batch labelled 0..K-1 twice: PML's rank columns are the
    # first examples of the labels, the layout PML's InstanceLoss was written for.
    x0, y = batch(22, labels)
    loss = losses.build_loss("instance", {}, num_train=100, num_classes=3, dims=DIMS)
    value, g = value_and_grad(loss, x0, y)
    pml_value, pml_g = value_and_grad(PMLInstanceLoss(), x0, y)
    close(value, pml_value)
    close(g, pml_g)


def test_pml_instance_uses_class_ranks_as_batch_columns():
    # Why losses/instance.py does not wrap PML: for labels [7, 7, 3, 3] PML's targets are the
    # ranks [1, 1, 0, 0] of the labels, read as columns, so class 3 targets an example of 7.
    x0, y = batch(23, [7, 7, 3, 3])
    ranks = [1, 1, 0, 0]
    assert [int(y[t]) for t in ranks] == [7, 7, 7, 7]
    pml_value, pml_g = value_and_grad(PMLInstanceLoss(), x0, y)
    ref, g_ref = reference_value_and_grad(x0, 64.0, ranks)
    close(pml_value, ref)
    close(pml_g, g_ref)
    loss = losses.build_loss("instance", {}, num_train=100, num_classes=2, dims=DIMS)
    value, _ = value_and_grad(loss, x0, y)
    assert abs(val(value) - val(pml_value)) > 1e-3


# --------------------------------------------------------------------------------------------
# One step on a class-balanced batch
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["large-margin-softmax", "sphereface", "instance"])
def test_one_backward_pass_on_16_classes_by_4(name):
    torch.manual_seed(5)
    loss = losses.build_loss(name, {}, num_train=640, num_classes=16, dims=8)
    labels = torch.randperm(16).repeat_interleave(4)
    x = torch.randn(64, 8, requires_grad=True)
    value = loss(x, labels)
    value.backward()
    assert torch.isfinite(value) and val(value) > 0
    for p in [x, *loss.parameters()]:
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
