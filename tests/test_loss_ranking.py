"""The ranking and contrastive losses against hand-written loops on a small batch: FastAP
(Cakir et al. 2019), the SNR contrastive loss (Yuan et al. 2019), NT-Xent with labels (Sohn
2016 / Chen et al. 2020), SupCon (Khosla et al. 2020, Eq. 2) and the angular loss (Wang et al.
2017); tests/loss_reference.py."""

from __future__ import annotations

import math

import pytest
import torch

import losses
from tests.loss_reference import (
    batch,
    close,
    dot,
    log_one_plus_sum_exp,
    log_sum_exp,
    matches_reference,
    mean_nonzero,
    sq_dist,
    unit_rows,
    val,
)

# Class 7 is a singleton: an anchor without positives, a negative for the others.
LABELS = [0, 1, 2, 0, 1, 2, 0, 7, 1, 2, 0]


def check(name, params, reference, *args, seed=14):
    """The registered loss against `reference(x, y, *args)`: value and embedding gradient."""
    loss = losses.build_loss(name, params, num_train=100, num_classes=8, dims=4)
    matches_reference(loss, LABELS, lambda x, y: reference(x, y, *args), seed)


def others(y, i, same):
    return [j for j in range(len(y)) if j != i and (y[j] == y[i]) == same]


# --------------------------------------------------------------------------------------------
# FastAP (Cakir et al. 2019)
# --------------------------------------------------------------------------------------------


def fastap_reference(x, labels, bins):
    """Per anchor with positives: squared distances of unit embeddings (in [0, 4]) spread over
    bins + 1 centres z_l = 4 l / bins by the triangular kernel max(0, 1 - |d - z_l| / delta),
    delta = 4 / bins; h+ and h the positives' and all others' soft histograms, H+ and H their
    running sums; FastAP = sum_l h+_l H+_l / H_l over N+ (bins where h+ H+ or H is 0 left
    out); the loss is the mean of 1 - FastAP."""
    u = unit_rows(x)
    y = labels.tolist()
    delta = 4.0 / bins
    centres = [4.0 * k / bins for k in range(bins + 1)]
    per_anchor = []
    for i in range(len(u)):
        pos = others(y, i, True)
        if not pos:
            continue
        d = {j: sq_dist(u[i], u[j]) for j in range(len(u)) if j != i}

        def kernel(j, z, d=d):
            return torch.clamp(1 - torch.abs(d[j] - z) / delta, min=0)

        h_pos = [sum(kernel(j, z) for j in pos) for z in centres]
        h_all = [sum(kernel(j, z) for j in d) for z in centres]
        ap = 0.0
        for k in range(len(centres)):
            running_pos, running_all = sum(h_pos[: k + 1]), sum(h_all[: k + 1])
            if val(h_pos[k] * running_pos) > 0 and val(running_all) > 0:
                ap = ap + h_pos[k] * running_pos / running_all
        per_anchor.append(1 - ap / len(pos))
    return sum(per_anchor) / len(per_anchor)


@pytest.mark.parametrize("bins", [10, 4])
def test_fastap_matches_histogram_loop(bins):
    assert losses.loss_defaults("fastap") == {"num_bins": 10}
    check("fastap", {} if bins == 10 else {"num_bins": bins}, fastap_reference, bins)


def test_fastap_is_zero_when_every_positive_ranks_first():
    # Each class's examples at one point, the classes at distinct bin centres' distance: every
    # anchor's positives all come before its negatives, so its AP is 1.
    loss = losses.build_loss("fastap", {}, num_train=100, num_classes=3, dims=3)
    x = torch.eye(3, dtype=torch.float64).repeat_interleave(3, dim=0)
    assert float(loss(x, torch.arange(3).repeat_interleave(3))) == pytest.approx(0, abs=1e-12)


# --------------------------------------------------------------------------------------------
# SNR contrastive (Yuan et al. 2019)
# --------------------------------------------------------------------------------------------


def snr_reference(x, labels, pos_margin, neg_margin):
    """d(a, b) = var(b - a) / var(a) of the unit embeddings (not symmetric: every ordered
    pair); the mean of the non-zero (d - pos_margin)_+ over positive pairs plus that of
    (neg_margin - d)_+ over negative pairs."""
    u = unit_rows(x)
    y = labels.tolist()

    def var(v):
        mean = sum(v) / len(v)
        return sum((a - mean) ** 2 for a in v) / (len(v) - 1)

    pos, neg = [], []
    for i in range(len(u)):
        for j in range(len(u)):
            if i == j:
                continue
            d = var([b - a for a, b in zip(u[i], u[j], strict=True)]) / var(u[i])
            if y[i] == y[j]:
                pos.append(torch.clamp(d - pos_margin, min=0))
            else:
                neg.append(torch.clamp(neg_margin - d, min=0))
    return mean_nonzero(pos) + mean_nonzero(neg)


@pytest.mark.parametrize("params", [{}, {"pos_margin": 0.3, "neg_margin": 1.6}])
def test_snr_matches_pair_loop(params):
    args = {**losses.loss_defaults("snr"), **params}
    assert losses.loss_defaults("snr") == {"pos_margin": 0.0, "neg_margin": 1.0}
    check("snr", params, snr_reference, args["pos_margin"], args["neg_margin"])


def test_snr_distance_ignores_the_embeddings_scale():
    loss = losses.build_loss("snr", {}, num_train=100, num_classes=8, dims=4)
    x, y = batch(15, LABELS)
    close(loss(x, y), loss(7.5 * x, y))


# --------------------------------------------------------------------------------------------
# NT-Xent with labels and SupCon
# --------------------------------------------------------------------------------------------


def cosine_table(x):
    u = unit_rows(x)
    return {(i, j): dot(u[i], u[j]) for i in range(len(u)) for j in range(len(u)) if i != j}


def ntxent_reference(x, labels, temperature):
    """Every ordered positive pair (a, p): -log of e^(s_ap / T) over itself plus e^(s_an / T)
    for each negative n of a; the mean over the positive pairs."""
    s = cosine_table(x)
    y = labels.tolist()
    per_pair = []
    for a in range(len(y)):
        negatives = [s[a, n] / temperature for n in others(y, a, False)]
        for p in others(y, a, True):
            positive = s[a, p] / temperature
            per_pair.append(log_sum_exp([positive, *negatives]) - positive)
    return sum(per_pair) / len(per_pair)


def supcon_reference(x, labels, temperature):
    """Eq. 2 (L_out): per anchor with positives, -1/|P| sum over its positives p of log of
    e^(s_ap / T) over the sum of e^(s_ak / T) for every k != a; the mean over those anchors."""
    s = cosine_table(x)
    y = labels.tolist()
    per_anchor = []
    for a in range(len(y)):
        positives = others(y, a, True)
        if not positives:
            continue
        denominator = log_sum_exp([s[a, k] / temperature for k in range(len(y)) if k != a])
        per_anchor.append(
            -sum(s[a, p] / temperature - denominator for p in positives) / len(positives)
        )
    return sum(per_anchor) / len(per_anchor)


@pytest.mark.parametrize(
    "name, reference, default",
    [("ntxent", ntxent_reference, 0.07), ("supcon", supcon_reference, 0.1)],
)
@pytest.mark.parametrize("temperature", [None, 0.5])
def test_contrastive_softmax_losses_match_loops(name, reference, default, temperature):
    assert losses.loss_defaults(name) == {"temperature": default}
    params = {} if temperature is None else {"temperature": temperature}
    check(name, params, reference, temperature or default)


def angular_reference(x, y, alpha_degrees):
    """For each positive pair (a, p) of unit embeddings: log(1 + sum over a's negatives n of
    exp(4 tan^2(alpha) (x_a + x_p).x_n - 2 (1 + tan^2(alpha)) x_a.x_p)); the mean over the
    positive pairs."""
    u, t2 = unit_rows(x), math.tan(math.radians(alpha_degrees)) ** 2
    terms = []
    for a in range(len(u)):
        for p in others(y, a, same=True):
            together = [ua + up for ua, up in zip(u[a], u[p], strict=True)]
            f = [4 * t2 * dot(together, u[n]) - 2 * (1 + t2) * dot(u[a], u[p])
                 for n in others(y, a, same=False)]  # fmt: skip
            terms.append(log_one_plus_sum_exp(f))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("alpha", [40.0, 50.0])
def test_angular_matches_its_loop_on_the_sphere(alpha):
    assert losses.loss_defaults("angular") == {"alpha": 40.0}
    check("angular", {"alpha": alpha}, angular_reference, alpha)


def test_angular_takes_the_negatives_on_the_sphere_too():
    """PML normalises only the anchor and the positive: scaling the embeddings changed its
    value; the registered loss gives the same for any scale, as the paper's formula does."""
    loss = losses.build_loss("angular", {})
    x, y = batch(3, LABELS)
    close(loss(3 * x, y), loss(x, y))
