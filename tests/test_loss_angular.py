"""The classification / angular losses against hand-written loops on a small batch, with the
class weights read from the module: normalised softmax (Zhai and Wu 2019), CosFace (Wang et
al. 2018), ArcFace (Deng et al. 2019) and sub-centre ArcFace (Deng et al. 2020);
tests/loss_reference.py."""

from __future__ import annotations

import math

import pytest
import torch

import losses
from tests.loss_reference import batch, cross_entropy, dot, unit_rows, val, value_and_grads

NUM_CLASSES, DIMS = 5, 4
LABELS = [0, 1, 2, 3, 4, 0, 2, 2, 1]


def cosines(x, weights, per_class=1):
    """Cosine similarity of each example to each class: to its weight (a column of PML's
    (dims, C * K) matrix), or with sub-centres the largest over the class's K columns
    c * K + k."""
    u, w = unit_rows(x), unit_rows(weights.t())
    return [
        [
            max((dot(r, w[c * per_class + k]) for k in range(per_class)), key=val)
            for c in range(NUM_CLASSES)
        ]
        for r in u
    ]


def mean_cross_entropy(rows_of_logits, labels):
    y = labels.tolist()
    return sum(cross_entropy(logits, y[i]) for i, logits in enumerate(rows_of_logits)) / len(y)


def normalized_softmax_reference(x, labels, weights, temperature):
    return mean_cross_entropy(
        [[c / temperature for c in row] for row in cosines(x, weights)], labels
    )


def cosface_reference(x, labels, weights, margin, scale):
    y = labels.tolist()
    logits = [
        [scale * (c - (margin if k == y[i] else 0.0)) for k, c in enumerate(row)]
        for i, row in enumerate(cosines(x, weights))
    ]
    return mean_cross_entropy(logits, labels)


def arcface_reference(x, labels, weights, margin, scale, per_class=1):
    """The true class's logit is s cos(theta + m), m in radians (PML takes degrees); where
    theta + m would pass pi, s (cos theta - m sin m) keeps it decreasing in theta (the
    authors' code's fallback, as PML's)."""
    m = math.radians(margin)
    y = labels.tolist()
    logits = []
    for i, row in enumerate(cosines(x, weights, per_class)):
        out = []
        for k, c in enumerate(row):
            if k == y[i]:
                theta = torch.acos(torch.clamp(c, -1, 1))
                if val(theta) <= math.pi - m:
                    c = torch.cos(theta + m)
                else:
                    c = torch.cos(theta) - m * math.sin(m)
            out.append(scale * c)
        logits.append(out)
    return mean_cross_entropy(logits, labels)


CASES = [
    ("normalized-softmax", {}, normalized_softmax_reference, {"temperature": 0.05}),
    ("normalized-softmax", {"temperature": 0.3}, normalized_softmax_reference, {}),
    ("cosface", {}, cosface_reference, {"margin": 0.35, "scale": 64.0}),
    ("cosface", {"margin": 0.1, "scale": 8.0}, cosface_reference, {}),
    ("arcface", {}, arcface_reference, {"margin": 28.6, "scale": 64.0}),
    ("arcface", {"margin": 60.0, "scale": 4.0}, arcface_reference, {}),
    (
        "subcenter-arcface",
        {},
        arcface_reference,
        {"margin": 28.6, "scale": 64.0, "per_class": 3},
    ),
    (
        "subcenter-arcface",
        {"margin": 10.0, "scale": 4.0, "sub_centers": 2},
        arcface_reference,
        {"per_class": 2},
    ),
]


@pytest.mark.parametrize("name, params, reference, defaults", CASES)
def test_angular_loss_matches_loop(name, params, reference, defaults):
    torch.manual_seed(7)
    loss = losses.build_loss(
        name, params, num_train=100, num_classes=NUM_CLASSES, dims=DIMS
    ).double()
    weights = loss.loss.W
    assert list(loss.parameters()) == [weights] and weights.requires_grad
    per_class = params.get("sub_centers", defaults.get("per_class", 1))
    assert weights.shape == (DIMS, NUM_CLASSES * per_class)

    args = {**defaults, **{k: v for k, v in params.items() if k != "sub_centers"}}
    value_and_grads(loss, weights, batch(13, LABELS, dims=DIMS), reference, **args)


def test_the_defaults_are_those_the_references_take():
    for name, params, _, defaults in CASES:
        if not params:
            expected = {k: v for k, v in defaults.items() if k != "per_class"}
            if "per_class" in defaults:
                expected["sub_centers"] = defaults["per_class"]
            assert losses.loss_defaults(name) == expected


def test_arcface_fallback_branch_is_reached():
    # With a 60-degree margin, some true-class angle of the test batch passes pi - m: the
    # fallback of arcface_reference is exercised, not only cos(theta + m).
    torch.manual_seed(7)
    loss = losses.build_loss("arcface", {}, num_train=100, num_classes=NUM_CLASSES, dims=DIMS)
    x0, y = batch(13, LABELS, dims=DIMS)
    rows = cosines(x0, loss.loss.W.detach().double())
    angles = [
        math.degrees(math.acos(float(row[c]))) for row, c in zip(rows, y.tolist(), strict=True)
    ]
    assert max(angles) > 180 - 60
