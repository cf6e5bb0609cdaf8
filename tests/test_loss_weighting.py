"""The pair-weighting losses against hand-written loops on a small batch: multi-similarity
(Wang et al. 2019, Eq. 7) without and with its mining, the margin loss (Wu et al. 2017) with
one and with per-class learned betas on the triplets its miner drew, the distance-weighted
miner's draws against Wu et al. 2017's weights, circle loss (Sun et al. 2020, Eq. 6), the
tuplet margin and intra-pair variance losses (Yu and Tao 2019) and the generalised lifted
structure loss (Hermans et al. 2017); tests/loss_reference.py."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

import losses
from tests.loss_reference import (
    batch,
    close,
    dist_table,
    dot,
    grad_of,
    log_one_plus_sum_exp,
    log_sum_exp,
    unit_rows,
    val,
)

# Class 7 is a singleton: an anchor without positives, a negative for the others.
LABELS = [0, 1, 2, 0, 1, 2, 0, 7, 1, 2]


def build(name, params=None, num_classes=8):
    torch.manual_seed(5)
    return losses.build_loss(
        name, params or {}, num_train=100, num_classes=num_classes, dims=4
    ).double()


def similarities(x):
    u = unit_rows(x)
    return {(i, j): dot(u[i], u[j]) for i in range(len(u)) for j in range(len(u)) if i != j}


def pairs_of(labels):
    y = labels.tolist()
    n = len(y)
    pos = {i: [j for j in range(n) if j != i and y[j] == y[i]] for i in range(n)}
    neg = {i: [k for k in range(n) if y[k] != y[i]] for i in range(n)}
    return pos, neg


# --------------------------------------------------------------------------------------------
# Multi-similarity (Wang et al. 2019)
# --------------------------------------------------------------------------------------------


def ms_reference(s, pos, neg, n, alpha, beta, base):
    """Eq. 7 per anchor over its (kept) pairs, the mean over all n anchors. As PML, an anchor
    without positive pairs keeps its negative term (the authors' code skips such an anchor; a
    class-balanced batch has none)."""
    total = 0.0
    for i in range(n):
        pos_terms = [-alpha * (s[i, j] - base) for j in pos[i]]
        neg_terms = [beta * (s[i, k] - base) for k in neg[i]]
        if pos_terms:
            total = total + log_one_plus_sum_exp(pos_terms) / alpha
        if neg_terms:
            total = total + log_one_plus_sum_exp(neg_terms) / beta
    return total / n


def ms_mined(s, pos, neg, epsilon):
    """Wang et al. 2019's pair mining: a positive is kept when less similar than the anchor's
    most similar negative + epsilon, a negative when more similar than its least similar
    positive - epsilon."""
    kept_pos, kept_neg = {}, {}
    for i in pos:
        hardest_neg = max((val(s[i, k]) for k in neg[i]), default=float("-inf"))
        easiest_pos = min((val(s[i, j]) for j in pos[i]), default=float("inf"))
        kept_pos[i] = [j for j in pos[i] if val(s[i, j]) - epsilon < hardest_neg]
        kept_neg[i] = [k for k in neg[i] if val(s[i, k]) + epsilon > easiest_pos]
    return kept_pos, kept_neg


MS_PARAMS = [{}, {"alpha": 1.0, "beta": 10.0, "base": 0.2}]


@pytest.mark.parametrize("mined", [False, True])
@pytest.mark.parametrize("params", MS_PARAMS)
def test_multi_similarity_matches_eq7_loop(mined, params):
    name = "multi-similarity-miner" if mined else "multi-similarity"
    defaults = losses.loss_defaults(name)
    args = {**defaults, **params}
    loss = build(name, params)
    x0, y = batch(8, LABELS)
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)

    x_ref = x0.clone().requires_grad_()
    s = similarities(x_ref)
    pos, neg = pairs_of(y)
    if mined:
        all_pairs = sum(len(v) for v in pos.values()) + sum(len(v) for v in neg.values())
        pos, neg = ms_mined(s, pos, neg, args["epsilon"])
        kept = sum(len(v) for v in pos.values()) + sum(len(v) for v in neg.values())
        assert 0 < kept < all_pairs  # the mining matters in this batch
    ref = ms_reference(s, pos, neg, len(y), args["alpha"], args["beta"], args["base"])
    (g_ref,) = grad_of(ref, x_ref)
    close(value, ref)
    close(g, g_ref)


# --------------------------------------------------------------------------------------------
# Margin loss (Wu et al. 2017)
# --------------------------------------------------------------------------------------------


def margin_reference(x, labels, triplets, betas, margin, nu, per_class):
    """Over the miner's triplets: (d_ap - beta + margin)_+ + (beta - d_an + margin)_+, summed
    and divided by the number of non-zero terms; plus nu * beta (per class: nu * the anchor's
    class's beta for every triplet, over the same divisor)."""
    d = dist_table(unit_rows(x))
    y = labels.tolist()
    terms, reg = [], 0.0
    for a, p, n in triplets:
        beta = betas[y[a]] if per_class else betas[0]
        terms.append(torch.clamp(d[a, p] - beta + margin, min=0))
        terms.append(torch.clamp(beta - d[a, n] + margin, min=0))
        reg = reg + nu * beta
    divisor = sum(1 for t in terms if val(t) > 0)
    return sum(terms) / divisor + (reg / divisor if per_class else nu * betas[0])


@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("params", [{}, {"margin": 0.4, "beta": 0.9, "nu": 0.1}])
def test_margin_matches_loop_on_the_mined_triplets(per_class, params):
    name = "margin-class-beta" if per_class else "margin"
    args = {"margin": 0.2, "beta": 1.2, "nu": 0.0, **params}
    loss = build(name, params)
    beta = loss.loss.beta
    assert list(loss.parameters()) == [beta]
    assert beta.shape == ((8,) if per_class else (1,))
    with torch.no_grad():  # distinct betas per class, so that the wrong one would show
        beta += 0.05 * torch.arange(len(beta), dtype=beta.dtype)
    drawn = []
    loss.miner.register_forward_hook(lambda module, args, out: drawn.append(out))

    x0, y = batch(9, [0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 3])
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    gx, gb = grad_of(value, x, beta)
    (triplets,) = drawn
    triplets = list(zip(*(t.tolist() for t in triplets), strict=True))
    assert len(triplets) > 5

    x_ref = x0.clone().requires_grad_()
    b_ref = beta.detach().clone().requires_grad_()
    ref = margin_reference(x_ref, y, triplets, b_ref, args["margin"], args["nu"], per_class)
    gx_ref, gb_ref = grad_of(ref, x_ref, b_ref)
    close(value, ref)
    close(gx, gx_ref)
    close(gb, gb_ref)


def test_margin_with_a_fixed_beta_has_no_parameters():
    assert list(build("margin", {"learn_beta": False}).parameters()) == []


def test_distance_weighted_miner_draws_negatives_by_wu_et_al_weights():
    """Wu et al. 2017, Sec. 4: a negative at distance d is drawn with probability proportional
    to 1 / q(d) = d^(2 - n) (1 - d^2 / 4)^(-(n - 3) / 2) on the n-sphere, d cut below at 0.5,
    never when d >= 1.4 (a zero loss). Frequencies of 1500 calls' draws against those
    weights."""
    dims = 4
    loss = build("margin")
    x0, y = batch(12, [0, 0, 1, 1, 2, 2, 3, 3], dims=dims)
    x0 = x0 + 0.8  # closer together: some negatives below the 0.5 cut-off, some beyond 1.4
    d = {k: val(v) for k, v in dist_table(unit_rows(x0)).items()}
    labels = y.tolist()
    expected = {}
    for a in range(len(labels)):
        w = {}
        for n in range(len(labels)):
            if labels[n] != labels[a] and d[a, n] < 1.4:
                c = max(d[a, n], 0.5)
                w[n] = c ** (2 - dims) * (1 - c * c / 4) ** (-(dims - 3) / 2)
        expected[a] = {n: v / sum(w.values()) for n, v in w.items()}
    negatives = [d[a, n] for a, n in d if labels[a] != labels[n]]
    assert min(negatives) < 0.5 and max(negatives) >= 1.4
    assert sum(len(p) > 2 for p in expected.values()) >= 4

    draws = 1500
    counts = {a: Counter() for a in expected}
    torch.manual_seed(0)
    for _ in range(draws):
        anchors, _, negatives = loss.miner(x0, y)
        for a, n in zip(anchors.tolist(), negatives.tolist(), strict=True):
            counts[a][n] += 1
    drawn = {}
    for a, probabilities in expected.items():
        assert set(counts[a]) <= set(probabilities)  # nothing beyond 1.4, no positive
        drawn[a] = sum(counts[a].values())  # one draw per (anchor, positive) and call
        if not probabilities:  # every negative at 1.4 or beyond: the anchor gets no triplet
            assert drawn[a] == 0
            continue
        assert drawn[a] >= draws
        for n, p in probabilities.items():
            assert abs(counts[a][n] / drawn[a] - p) < 0.05, (a, n)


# --------------------------------------------------------------------------------------------
# Circle loss (Sun et al. 2020)
# --------------------------------------------------------------------------------------------


def circle_reference(s, pos, neg, m, gamma):
    """Eq. 6 with alpha_p = (1 + m - s_p)_+ and alpha_n = (s_n + m)_+ held constant in the
    gradient (as the authors' code and PML), margins 1 - m and m; softplus of the two
    log-sum-exps per anchor having both; the mean over those anchors."""
    per_anchor = []
    for i in pos:
        if not pos[i] or not neg[i]:
            continue
        lp = [
            -gamma * torch.clamp(1 + m - s[i, j].detach(), min=0) * (s[i, j] - (1 - m))
            for j in pos[i]
        ]
        ln = [gamma * torch.clamp(s[i, k].detach() + m, min=0) * (s[i, k] - m) for k in neg[i]]
        z = log_sum_exp(lp) + log_sum_exp(ln)
        per_anchor.append(torch.clamp(z, min=0) + torch.log1p(torch.exp(-torch.abs(z))))
    return sum(per_anchor) / len(per_anchor)


@pytest.mark.parametrize("params", [{}, {"m": 0.25, "gamma": 16.0}])
def test_circle_matches_eq6_loop(params):
    assert losses.loss_defaults("circle") == {"m": 0.4, "gamma": 80.0}
    args = {**losses.loss_defaults("circle"), **params}
    matches_pair_loop("circle", params, 10, circle_reference, args["m"], args["gamma"])


def matches_pair_loop(name, params, seed, reference, *args):
    """The loss's value and gradient against `reference(similarities, positives, negatives,
    *args)` on the batch of `seed`."""
    x0, y = batch(seed, LABELS)
    x = x0.clone().requires_grad_()
    value = build(name, params)(x, y)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    ref = reference(similarities(x_ref), *pairs_of(y), *args)
    (g_ref,) = grad_of(ref, x_ref)
    close(value, ref)
    close(g, g_ref)


# --------------------------------------------------------------------------------------------
# Tuplet margin (Yu and Tao 2019)
# --------------------------------------------------------------------------------------------


def tuplet_reference(s, pos, neg, margin_degrees, scale):
    """For each positive pair (a, p): log(1 + sum over a's negatives n of
    exp(scale (cos theta_an - cos(theta_ap - beta)))), beta the margin in radians; the mean
    over every positive pair (an anchor without negatives adds 0 for each of its pairs)."""
    beta = math.radians(margin_degrees)
    terms = []
    for a in pos:
        for p in pos[a]:
            eased = torch.cos(torch.acos(s[a, p]) - beta)
            terms.append(log_one_plus_sum_exp([scale * (s[a, n] - eased) for n in neg[a]]))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("params", [{}, {"margin": 12.0, "scale": 16.0}])
def test_tuplet_margin_matches_its_loop(params):
    assert losses.loss_defaults("tuplet-margin") == {"margin": 5.73, "scale": 64.0}
    args = {**losses.loss_defaults("tuplet-margin"), **params}
    matches_pair_loop("tuplet-margin", params, 11, tuplet_reference, args["margin"], args["scale"])


# --------------------------------------------------------------------------------------------
# Generalised lifted structure (Hermans et al. 2017)
# --------------------------------------------------------------------------------------------


def generalized_lifted_reference(s, pos, neg, neg_margin, pos_margin):
    """For each anchor: relu(log sum over positives of exp(d_ap - pos_margin) + log sum over
    negatives of exp(neg_margin - d_an)), a sum over no pair counted as 0 (PML's); the mean
    over every anchor. Euclidean distances of unit vectors, sqrt(2 - 2 cos)."""

    def d(i, j):
        return torch.sqrt(torch.clamp(2 - 2 * s[i, j], min=0))

    terms = []
    for a in pos:
        lp = log_sum_exp([d(a, p) - pos_margin for p in pos[a]]) if pos[a] else 0.0
        ln = log_sum_exp([neg_margin - d(a, n) for n in neg[a]]) if neg[a] else 0.0
        terms.append(torch.clamp(lp + ln, min=0))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("params", [{}, {"neg_margin": 0.5, "pos_margin": 0.1}])
def test_generalized_lifted_matches_its_loop(params):
    assert losses.loss_defaults("generalized-lifted") == {"neg_margin": 1.0, "pos_margin": 0.0}
    args = {**losses.loss_defaults("generalized-lifted"), **params}
    reference, margins = generalized_lifted_reference, (args["neg_margin"], args["pos_margin"])
    matches_pair_loop("generalized-lifted", params, 12, reference, *margins)


# --------------------------------------------------------------------------------------------
# Intra-pair variance (Yu and Tao 2019)
# --------------------------------------------------------------------------------------------


def intra_pair_variance_reference(s, pos, neg, pos_eps, neg_eps):
    """relu((1 - pos_eps) mean_pos - s_ap)^2 averaged over the positive pairs, plus
    relu(s_an - (1 + neg_eps) mean_neg)^2 averaged over the negative pairs; each mean over
    the ordered pairs of the batch; the means are not detached, so they take part in the
    gradient, as in PML."""
    ps = [s[a, p] for a in pos for p in pos[a]]
    ns = [s[a, n] for a in neg for n in neg[a]]
    mean_pos, mean_neg = sum(ps) / len(ps), sum(ns) / len(ns)
    pos_loss = sum(torch.clamp((1 - pos_eps) * mean_pos - v, min=0) ** 2 for v in ps) / len(ps)
    neg_loss = sum(torch.clamp(v - (1 + neg_eps) * mean_neg, min=0) ** 2 for v in ns) / len(ns)
    return pos_loss + neg_loss


@pytest.mark.parametrize("params", [{}, {"pos_eps": 0.05, "neg_eps": 0.002}])
def test_intra_pair_variance_matches_its_loop(params):
    assert losses.loss_defaults("intra-pair-variance") == {"pos_eps": 0.01, "neg_eps": 0.01}
    args = {**losses.loss_defaults("intra-pair-variance"), **params}
    eps = (args["pos_eps"], args["neg_eps"])
    matches_pair_loop("intra-pair-variance", params, 13, intra_pair_variance_reference, *eps)
