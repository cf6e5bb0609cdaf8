"""The ranked list loss (Wang et al. 2019) and the PNP loss (Li et al. 2022) against
hand-written loops on a small batch, at their defaults and at other settings;
tests/loss_reference.py."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import losses
from losses import pnp, ranked_list  # noqa: F401  (registers them)
from tests.loss_reference import (
    batch,
    dist_table,
    dot,
    matches_reference,
    unit_rows,
    val,
)

# Class 7 is a singleton: an anchor without positives, a negative for the others.
LABELS = [0, 1, 2, 0, 1, 2, 0, 7, 1, 2, 0]


def check(name, params, reference, seed=14):
    """The registered loss against `reference(x, labels, all parameters)`: value and
    embedding gradient, both non-trivial."""
    loss = losses.build_loss(name, params, num_train=100, num_classes=8, dims=4)
    given = {**losses.loss_defaults(name), **params}
    matches_reference(loss, LABELS, lambda x, y: reference(x, y.tolist(), given), seed, 1e-3)


def others(y, i, same):
    return [j for j in range(len(y)) if j != i and (y[j] == y[i]) == same]


# --------------------------------------------------------------------------------------------
# Ranked list loss (Wang et al. 2019)
# --------------------------------------------------------------------------------------------


def weighted_mean(violations, temperature, n):
    """The mean of the violations weighted by exp(temperature * violation); as PML, the
    denominator has 1e-5 for each of the batch's n examples (0 for no violations)."""
    weights = [torch.exp(temperature * v) for v in violations]
    return sum(w * v for w, v in zip(weights, violations, strict=True)) / (sum(weights) + n * 1e-5)


def rll_reference(x, y, p):
    """Per query i, on distances of unit embeddings and alpha = 1 + margin / 2: L_P over its
    positives with d > alpha - margin of d - (alpha - margin), weighted by Tp; L_N over its
    negatives with d < alpha of alpha - d, weighted by Tn; (1 - imbalance) L_P +
    imbalance L_N, the mean over all n queries."""
    d = dist_table(unit_rows(x))
    n, alpha = len(y), 1 + p["margin"] / 2
    near = alpha - p["margin"]
    per_query = []
    for i in range(n):
        pos = [d[i, j] - near for j in others(y, i, True) if val(d[i, j]) > near]
        neg = [alpha - d[i, k] for k in others(y, i, False) if val(d[i, k]) < alpha]
        l_p, l_n = weighted_mean(pos, p["Tp"], n), weighted_mean(neg, p["Tn"], n)
        per_query.append((1 - p["imbalance"]) * l_p + p["imbalance"] * l_n)
    return sum(per_query) / n


RLL_DEFAULTS = {"margin": 0.4, "Tn": 10.0, "imbalance": 0.5, "Tp": 0.0}


@pytest.mark.parametrize("params", [{}, {"margin": 0.8, "Tn": 3.0, "imbalance": 0.3, "Tp": 2.0}])
def test_ranked_list_matches_the_query_loop(params):
    assert losses.loss_defaults("ranked-list") == RLL_DEFAULTS
    # Both sides of both thresholds occur in the batch, so that choosing the violators matters.
    margin = {**RLL_DEFAULTS, **params}["margin"]
    alpha = 1 + margin / 2
    d = {k: val(v) for k, v in dist_table(unit_rows(batch(14, LABELS)[0])).items()}
    same = {k: LABELS[k[0]] == LABELS[k[1]] for k in d}
    assert {v > alpha - margin for k, v in d.items() if same[k]} == {True, False}
    assert {v < alpha for k, v in d.items() if not same[k]} == {True, False}
    check("ranked-list", params, rll_reference)


def test_ranked_list_boundary_follows_the_margin():
    """Classes at orthogonal unit vectors: positives at 0, negatives at sqrt(2). With margin
    0.8 the boundary 1.4 is below sqrt(2): no violator, a zero loss. With margin 1 it is 1.5:
    every query's L_N is 1.5 - sqrt(2) (its weights all equal), the loss half that."""
    x = torch.eye(3, dtype=torch.float64).repeat_interleave(3, dim=0)
    y = torch.arange(3).repeat_interleave(3)
    loss = losses.build_loss("ranked-list", {"margin": 0.8}, num_classes=3, dims=3)
    assert float(loss(x, y)) == 0
    loss = losses.build_loss("ranked-list", {"margin": 1.0}, num_classes=3, dims=3)
    w = 6 * math.exp(10 * (1.5 - math.sqrt(2)))
    expected = 0.5 * (1.5 - math.sqrt(2)) * w / (w + 9 * 1e-5)
    assert float(loss(x, y)) == pytest.approx(expected, rel=1e-12)


def test_ranked_list_builds_without_pml_overflow_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses.build_loss("ranked-list", {"Tn": 20.0}, num_classes=3, dims=3)


# --------------------------------------------------------------------------------------------
# PNP loss (Li et al. 2022)
# --------------------------------------------------------------------------------------------

PNP_SHAPES = {
    "O": lambda r, p: r,
    "Ds": lambda r, p: torch.log(1 + r),
    "Dq": lambda r, p: 1 - 1 / (1 + r) ** p["alpha"],
    "Iu": lambda r, p: (1 + r) * torch.log(1 + r),
    "Ib": lambda r, p: (p["b"] * r - torch.log(1 + p["b"] * r)) / p["b"] ** 2,
}


def pnp_reference(x, y, p):
    """Per query q with a positive in the batch: for q itself (as PML and the authors' code)
    and each positive i, R = sum over q's negatives j of sigmoid((s_qj - s_qi) / anneal) on
    cosine similarities; the variant's function of R averaged over them; the mean over those
    queries."""
    u = unit_rows(x)
    shape = PNP_SHAPES[p["variant"]]
    per_query = []
    for q in range(len(y)):
        pos = others(y, q, True)
        if not pos:
            continue
        terms = []
        for i in [q, *pos]:
            ahead = [(dot(u[q], u[j]) - dot(u[q], u[i])) / p["anneal"] for j in others(y, q, False)]
            terms.append(shape(sum(torch.sigmoid(t) for t in ahead), p))
        per_query.append(sum(terms) / len(terms))
    return sum(per_query) / len(per_query)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"variant": "Dq", "alpha": 4.0, "anneal": 0.1},
        {"variant": "Ds", "anneal": 0.05},
        {"variant": "Iu", "anneal": 0.05},
        {"variant": "Ib", "b": 3.0, "anneal": 0.05},
    ],
)
def test_pnp_matches_the_query_loop(params):
    assert losses.loss_defaults("pnp") == {"b": 2.0, "alpha": 8.0, "anneal": 0.01, "variant": "O"}
    check("pnp", params, pnp_reference)


@pytest.mark.parametrize("variant", ["O", "Dq"])
def test_pnp_is_zero_when_every_positive_ranks_first(variant):
    # Classes at orthogonal unit vectors: each positive (and the query) at similarity 1, each
    # negative at 0, so no negative is ranked before a positive.
    x = torch.eye(3, dtype=torch.float64).repeat_interleave(3, dim=0)
    loss = losses.build_loss("pnp", {"variant": variant}, num_classes=3, dims=3)
    assert float(loss(x, torch.arange(3).repeat_interleave(3))) == pytest.approx(0, abs=1e-12)


def test_pnp_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="variant"):
        losses.build_loss("pnp", {"variant": "Dx"}, num_classes=3, dims=3)


# --------------------------------------------------------------------------------------------
# Both, on the trainer's batches
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ranked-list", "pnp"])
def test_one_step_on_a_class_balanced_batch(name):
    """16 classes x 4 examples, as MPerClassSampler draws them: a finite, non-zero gradient."""
    torch.manual_seed(0)
    loss = losses.build_loss(name, {}, num_train=100, num_classes=16, dims=32)
    assert loss.class_balanced and loss.normalize_embeddings and not loss.memory_ok
    x = torch.randn(64, 32, requires_grad=True)
    loss(x, torch.arange(16).repeat_interleave(4)).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
