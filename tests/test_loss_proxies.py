"""The proxy losses against hand-written loops on a small batch, with the proxies (centres)
read from the module: ProxyNCA (Movshovitz-Attias et al. 2017), Proxy Anchor (Kim et al.
2020, Eq. 4) and SoftTriple (Qian et al. 2019); tests/loss_reference.py."""

from __future__ import annotations

import pytest
import torch

import losses
from tests.loss_reference import (
    batch,
    cross_entropy,
    dot,
    log_one_plus_sum_exp,
    sq_dist,
    unit_rows,
    val,
    value_and_grads,
)

NUM_CLASSES, DIMS = 6, 4
# Classes 3 and 5 have no example in the batch: Proxy Anchor's positive term divides by the
# proxies that have positives, its negative term by all of them.
LABELS = [0, 1, 2, 0, 1, 4, 2, 0, 4, 1]


def build(name: str, params: dict | None = None):
    torch.manual_seed(3)
    loss = losses.build_loss(
        name, params or {}, num_train=100, num_classes=NUM_CLASSES, dims=DIMS
    ).double()
    assert all(p.requires_grad for p in loss.parameters())
    return loss


# --------------------------------------------------------------------------------------------
# ProxyNCA
# --------------------------------------------------------------------------------------------


def proxy_nca_reference(x, labels, proxies, scale):
    """Softmax over -scale * squared distances of unit embeddings to every unit proxy (PML's
    form: the example's own proxy is in the denominator too), mean over the examples."""
    u, p = unit_rows(x), unit_rows(proxies)
    per_example = []
    for i, y in enumerate(labels.tolist()):
        logits = [-scale * sq_dist(u[i], p[c]) for c in range(NUM_CLASSES)]
        per_example.append(cross_entropy(logits, y))
    return sum(per_example) / len(per_example)


@pytest.mark.parametrize("scale", [1.0, 8.0])
def test_proxy_nca_matches_loop(scale):
    loss = build("proxy-nca", {} if scale == 1.0 else {"softmax_scale": scale})
    proxies = loss.loss.proxies
    assert list(loss.parameters()) == [proxies] and proxies.shape == (NUM_CLASSES, DIMS)
    value_and_grads(loss, proxies, batch(4, LABELS, dims=DIMS), proxy_nca_reference, scale)


# --------------------------------------------------------------------------------------------
# Proxy Anchor (Kim et al. 2020, Eq. 4)
# --------------------------------------------------------------------------------------------


def proxy_anchor_reference(x, labels, proxies, margin, alpha):
    u, p = unit_rows(x), unit_rows(proxies)
    y = labels.tolist()
    with_positives = sorted(set(y))
    pos, neg = 0.0, 0.0
    for c in range(NUM_CLASSES):
        s = [dot(u[i], p[c]) for i in range(len(u))]
        pos_terms = [-alpha * (s[i] - margin) for i in range(len(u)) if y[i] == c]
        neg_terms = [alpha * (s[i] + margin) for i in range(len(u)) if y[i] != c]
        if pos_terms:
            pos = pos + log_one_plus_sum_exp(pos_terms)
        neg = neg + log_one_plus_sum_exp(neg_terms)
    return pos / len(with_positives) + neg / NUM_CLASSES


@pytest.mark.parametrize("params", [{}, {"margin": 0.3, "alpha": 8.0}])
def test_proxy_anchor_matches_eq4_loop(params):
    defaults = losses.loss_defaults("proxy-anchor")
    assert defaults == {"margin": 0.1, "alpha": 32.0}
    loss = build("proxy-anchor", params)
    proxies = loss.loss.proxies
    assert list(loss.parameters()) == [proxies] and proxies.shape == (NUM_CLASSES, DIMS)
    args = {**defaults, **params}
    ref = value_and_grads(
        loss,
        proxies,
        batch(4, LABELS, dims=DIMS),
        proxy_anchor_reference,
        args["margin"],
        args["alpha"],
    )
    assert val(ref) > 0


def test_proxy_anchor_trains_its_proxies_at_100x():
    cls = losses.get_loss_class("proxy-anchor")
    assert cls.lr_multiplier == 100.0 and "100x" in cls.sources["lr_multiplier"]


# --------------------------------------------------------------------------------------------
# SoftTriple (Qian et al. 2019)
# --------------------------------------------------------------------------------------------


def soft_triple_reference(x, labels, centres, per_class, la, gamma, margin):
    """Each class's similarity is its K centres' cosine similarities weighted by their softmax
    (scaled by 1 / gamma); cross-entropy over la * similarities, the true class's less the
    margin. Centre k of class c is column c * K + k of PML's (dims, C * K) matrix."""
    u, w = unit_rows(x), unit_rows(centres.t())
    per_example = []
    for i, y in enumerate(labels.tolist()):
        logits = []
        for c in range(NUM_CLASSES):
            s = [dot(u[i], w[c * per_class + k]) for k in range(per_class)]
            weights = [torch.exp(v / gamma) for v in s]
            relaxed = sum(a * b for a, b in zip(weights, s, strict=True)) / sum(weights)
            logits.append(la * (relaxed - (margin if c == y else 0.0)))
        per_example.append(cross_entropy(logits, y))
    return sum(per_example) / len(per_example)


@pytest.mark.parametrize(
    "params", [{}, {"centers_per_class": 3, "la": 8.0, "gamma": 0.5, "margin": 0.2}]
)
def test_soft_triple_matches_loop(params):
    defaults = losses.loss_defaults("soft-triple")
    assert defaults == {"centers_per_class": 10, "la": 20.0, "gamma": 0.1, "margin": 0.01}
    args = {**defaults, **params}
    loss = build("soft-triple", params)
    centres = loss.loss.fc
    assert list(loss.parameters()) == [centres]
    assert centres.shape == (DIMS, NUM_CLASSES * args["centers_per_class"])
    ref = value_and_grads(
        loss,
        centres,
        batch(4, LABELS, dims=DIMS),
        soft_triple_reference,
        args["centers_per_class"],
        args["la"],
        args["gamma"],
        args["margin"],
    )
    assert val(ref) > 0
