"""The losses of Liu et al. 2019 and of the Tiny ImageNet pair-verification report against
hand-written references on a small batch.

triplet-nca (Liu et al. 2019: NCA-form triplet loss), bce-pair (the report's Eq. 2-3),
contrastive-squared (Eq. 4) and contrastive-centroid (Eq. 4 with Algorithm 1's negatives). The
references are plain loops over triplets or pairs on 0-d float64 tensors, so that autograd gives
reference gradients. The pair losses draw their pairs at random; the references get the same
pairs by calling the generator under the same torch seed.
"""

from __future__ import annotations

import math

import pytest
import torch

import losses.bce_pair  # noqa: F401  (the imports register the losses)
import losses.contrastive_centroid  # noqa: F401
import losses.contrastive_squared  # noqa: F401
import losses.triplet_nca  # noqa: F401
import miners.centroid_hard_negative  # noqa: F401  (registers the miner)
from losses.registry import build_loss, loss_defaults
from miners import build_miner
from miners.centroid_hard_negative import CentroidHardNegativeMiner, closest_classes
from miners.pair_generator import balanced_pairs
from tests.loss_reference import rows, unit_rows

F64 = torch.float64
LABELS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


def dot(u, v) -> torch.Tensor:
    return sum(a * b for a, b in zip(u, v, strict=True))


def dist(u, v) -> torch.Tensor:
    return torch.sqrt(sum((a - b) ** 2 for a, b in zip(u, v, strict=True)))


def batch(seed: int, labels=LABELS, dims: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return torch.randn(len(labels), dims, dtype=F64), torch.tensor(labels)


def close(a, b, tol=1e-10):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), rtol=tol, atol=tol
    )


def value_and_grad(loss, x0, labels, seed=0):
    """The loss and its gradient on a copy of x0, the torch RNG seeded first."""
    x = x0.clone().requires_grad_()
    torch.manual_seed(seed)
    value = loss(x, labels)
    (g,) = torch.autograd.grad(value, x)
    return value.detach(), g


def same_pairs(labels, k, seed=0, negatives=None) -> list[tuple[int, int, bool]]:
    torch.manual_seed(seed)
    i, j, same = balanced_pairs(labels, k, negatives)
    return list(zip(i.tolist(), j.tolist(), same.tolist(), strict=True))


# --------------------------------------------------------------------------------------------
# triplet-nca
# --------------------------------------------------------------------------------------------


def nca_triplets(x, labels, rule: str, margin: float = 0.2) -> list[tuple[int, int, int]]:
    """All (a, p, n); "semihard": 0 < d(a,n) - d(a,p) <= margin (PML's TripletMarginMiner);
    "easy-positive": per anchor its closest positive and the closest negative strictly farther
    (PML's BatchEasyHardMiner(EASY, SEMIHARD)). Distances of unit vectors, by loops."""
    u = [[float(v) for v in r] for r in unit_rows(x.detach())]
    y = labels.tolist()
    n = len(y)
    d = [[math.dist(u[i], u[j]) for j in range(n)] for i in range(n)]
    if rule == "easy-positive":
        out = []
        for a in range(n):
            p = min((j for j in range(n) if j != a and y[j] == y[a]), key=lambda j: d[a][j])
            farther = [j for j in range(n) if y[j] != y[a] and d[a][j] > d[a][p]]
            if farther:
                out.append((a, p, min(farther, key=lambda j: d[a][j])))
        return out
    out = []
    for a in range(n):
        for p in range(n):
            for q in range(n):
                if p == a or y[p] != y[a] or y[q] == y[a]:
                    continue
                if rule == "semihard" and not 0 < d[a][q] - d[a][p] <= margin:
                    continue
                out.append((a, p, q))
    return out


def triplet_nca_reference(x, triplets, temperature):
    """Mean of -ln(exp(s_ap/T) / (exp(s_ap/T) + exp(s_an/T))), s the cosine similarity."""
    u = unit_rows(x)
    total = 0.0
    for a, p, n in triplets:
        e_ap = torch.exp(dot(u[a], u[p]) / temperature)
        e_an = torch.exp(dot(u[a], u[n]) / temperature)
        total = total - torch.log(e_ap / (e_ap + e_an))
    return total / len(triplets)


@pytest.mark.parametrize(
    "miner, temperature, margin",
    [("all", 0.1, 0.2), ("all", 0.5, 0.2), ("semihard", 0.1, 0.2), ("semihard", 0.3, 0.5)],
)
def test_triplet_nca_matches_triplet_loop(miner, temperature, margin):
    params = {"miner": miner, "temperature": temperature, "margin": margin}
    loss = build_loss("triplet-nca", params, num_train=100, num_classes=3, dims=4)
    assert loss.miner.margin == margin
    x0, y = batch(7)
    value, g = value_and_grad(loss, x0, y)
    triplets = nca_triplets(x0, y, miner, margin)
    if miner == "all":
        assert len(triplets) == 12 * 3 * 8
    else:
        assert 0 < len(triplets) < 12 * 3 * 8
    x_ref = x0.clone().requires_grad_()
    ref = triplet_nca_reference(x_ref, triplets, temperature)
    close(value, ref)
    close(g, torch.autograd.grad(ref, x_ref)[0])


def test_triplet_nca_converts_pair_style_miner_output_to_triplets():
    loss = build_loss("triplet-nca", {"miner": "easy-positive"}, num_train=100, dims=4)
    x0, y = batch(8)
    value, g = value_and_grad(loss, x0, y)
    triplets = nca_triplets(x0, y, "easy-positive")
    assert len(triplets) > 0
    x_ref = x0.clone().requires_grad_()
    ref = triplet_nca_reference(x_ref, triplets, 0.1)
    close(value, ref)
    close(g, torch.autograd.grad(ref, x_ref)[0])


def test_triplet_nca_defaults_and_no_triplet():
    assert loss_defaults("triplet-nca") == {"miner": "semihard", "temperature": 0.1, "margin": 0.2}
    loss = build_loss("triplet-nca", {}, num_train=10, num_classes=2, dims=2)
    x = torch.randn(3, 2, requires_grad=True)
    value = loss(x, torch.tensor([0, 1, 2]))  # no positive pair: no triplet
    assert float(value.detach()) == 0.0
    value.backward()
    assert float(x.grad.abs().max()) == 0.0


# --------------------------------------------------------------------------------------------
# Balanced pairs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_balanced_pairs_per_anchor(k):
    # Class 3 has 2 members (one positive each), class 9 is a singleton (no positive).
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 9])
    pairs = same_pairs(labels, k, seed=3)
    y = labels.tolist()
    for a in range(len(y)):
        pos = [j for i, j, s in pairs if i == a and s]
        neg = [j for i, j, s in pairs if i == a and not s]
        if y[a] == 9:
            assert pos == [] and neg == []
            continue
        assert len(pos) == len(neg) == k
        assert all(y[j] == y[a] and j != a for j in pos)
        assert all(y[j] != y[a] for j in neg)
        others = sum(1 for j in range(len(y)) if j != a and y[j] == y[a])
        assert len(set(pos)) == min(k, others)  # distinct while there are enough
        assert len(set(neg)) == k
    assert [s for _, _, s in pairs] == sorted((s for _, _, s in pairs), reverse=True)


def test_balanced_pairs_are_reproducible_and_random():
    labels = torch.tensor(LABELS)
    assert same_pairs(labels, 2, seed=1) == same_pairs(labels, 2, seed=1)
    assert same_pairs(labels, 2, seed=1) != same_pairs(labels, 2, seed=2)


def test_balanced_pairs_one_class_or_empty():
    i, j, same = balanced_pairs(torch.tensor([4, 4, 4]), 2)  # no negative anywhere
    assert len(i) == len(j) == len(same) == 0


def test_balanced_pairs_restricted_negatives_fall_back_per_anchor():
    labels = torch.tensor(LABELS)
    allowed = torch.zeros(12, 12, dtype=torch.bool)
    allowed[:4, 8:] = True  # class 0 may pair only with class 2; others have no preference
    pairs = same_pairs(labels, 3, seed=4, negatives=allowed)
    for a, j, s in pairs:
        if not s:
            assert LABELS[j] != LABELS[a]
            if a < 4:
                assert LABELS[j] == 2
    assert {LABELS[j] for a, j, s in pairs if not s and a >= 4} == {0, 1, 2}


# --------------------------------------------------------------------------------------------
# bce-pair
# --------------------------------------------------------------------------------------------


def bce_reference(x, pairs, w, b):
    """Eq. 2-3 by loops: batch-normalised distances (biased variance, eps 1e-5), then
    -1/(2N) sum y log s + (1 - y) log(1 - s), s = sigmoid(w d_hat + b)."""
    r = rows(x)
    d = [dist(r[i], r[j]) for i, j, _ in pairs]
    n = len(d)
    mean = sum(d) / n
    var = sum((v - mean) ** 2 for v in d) / n
    total = 0.0
    for (_, _, same), dn in zip(pairs, d, strict=True):
        s = 1 / (1 + torch.exp(-(w * (dn - mean) / torch.sqrt(var + 1e-5) + b)))
        total = total + (torch.log(s) if same else torch.log(1 - s))
    return -total / (2 * n)


@pytest.mark.parametrize("k, w, b", [(1, -1.0, 0.0), (3, -1.75, 0.25)])
def test_bce_pair_matches_pair_loop(k, w, b):
    loss = build_loss("bce-pair", {"pairs_per_anchor": k}, num_train=100, dims=4).double()
    with torch.no_grad():
        loss.weight.fill_(w)
        loss.bias.fill_(b)
    x0, y = batch(9, [0, 0, 0, 1, 1, 1, 2, 2, 2, 5])  # 5: a singleton, no pair
    x = x0.clone().requires_grad_()
    torch.manual_seed(11)
    value = loss(x, y)
    gx, gw, gb = torch.autograd.grad(value, [x, loss.weight, loss.bias])

    pairs = same_pairs(y, k, seed=11)
    assert len(pairs) == 2 * 9 * k
    x_ref = x0.clone().requires_grad_()
    w_ref = torch.tensor(w, dtype=F64, requires_grad=True)
    b_ref = torch.tensor(b, dtype=F64, requires_grad=True)
    ref = bce_reference(x_ref, pairs, w_ref, b_ref)
    close(value, ref)
    want = torch.autograd.grad(ref, [x_ref, w_ref, b_ref])
    for got, expected in zip((gx, gw, gb), want, strict=True):
        close(got, expected)
    assert float(gw) != 0.0 and float(gb) != 0.0


def test_bce_pair_parameters_are_w_and_b():
    assert loss_defaults("bce-pair") == {"pairs_per_anchor": 1}
    loss = build_loss("bce-pair", {}, num_train=100, num_classes=3, dims=4)
    assert [name for name, _ in loss.named_parameters()] == ["weight", "bias"]
    assert loss.weight.item() == -1.0 and loss.bias.item() == 0.0
    assert all(p.requires_grad for p in loss.parameters())


# --------------------------------------------------------------------------------------------
# contrastive-squared and contrastive-centroid
# --------------------------------------------------------------------------------------------


def contrastive_reference(x, pairs, margin):
    """Eq. 4 by loops: 1/(2N) sum y D^2 + (1 - y) max(0, m - D)^2 on raw embeddings."""
    r = rows(x)
    total = 0.0
    for i, j, same in pairs:
        d = dist(r[i], r[j])
        total = total + (d**2 if same else torch.clamp(margin - d, min=0) ** 2)
    return total / (2 * len(pairs))


@pytest.mark.parametrize("k, margin", [(1, 1.0), (2, 3.0)])
def test_contrastive_squared_matches_pair_loop(k, margin):
    params = {"pairs_per_anchor": k, "margin": margin}
    loss = build_loss("contrastive-squared", params, num_train=100, dims=4)
    x0, y = batch(12)
    value, g = value_and_grad(loss, x0, y, seed=5)
    pairs = same_pairs(y, k, seed=5)
    r = rows(x0)
    active = [float(dist(r[i], r[j])) < margin for i, j, s in pairs if not s]
    if margin > 1:
        assert any(active) and not all(active)  # both sides of the hinge are tested
    x_ref = x0.clone().requires_grad_()
    ref = contrastive_reference(x_ref, pairs, margin)
    close(value, ref)
    close(g, torch.autograd.grad(ref, x_ref)[0])


def brute_closest(centroids: list[list[float]], m: int) -> list[list[int]]:
    c = len(centroids)
    out = []
    for a in range(c):
        by = sorted((math.dist(centroids[a], centroids[b]), b) for b in range(c) if b != a)
        out.append([b for _, b in by[:m]])
    return out


@pytest.mark.parametrize("m", [1, 3, 6, 20])
def test_closest_classes_by_brute_force(m):
    torch.manual_seed(13)
    centroids = torch.randn(7, 3, dtype=F64)
    got = closest_classes(centroids, m)
    assert got.shape == (7, min(m, 6))
    assert got.tolist() == brute_closest(centroids.tolist(), m)


def training_set(seed: int = 14):
    """Non-contiguous labels (as the metric protocol's training classes may be), 5 each."""
    classes = [2, 3, 5, 7, 8, 11]
    torch.manual_seed(seed)
    centres = 3 * torch.randn(len(classes), 4, dtype=F64)
    labels = torch.tensor([c for c in classes for _ in range(5)])
    emb = centres.repeat_interleave(5, dim=0) + torch.randn(len(labels), 4, dtype=F64)
    return emb, labels, classes


def closest_by_label(emb, labels, classes, m) -> dict[int, list[int]]:
    """Each class's m closest classes by the distance of their mean embeddings, by loops."""
    means = []
    for c in classes:
        members = [emb[i].tolist() for i in range(len(labels)) if int(labels[i]) == c]
        means.append([sum(v[t] for v in members) / len(members) for t in range(emb.shape[1])])
    near = brute_closest(means, m)
    return {c: [classes[b] for b in near[a]] for a, c in enumerate(classes)}


def test_contrastive_centroid_negatives_come_from_the_closest_classes():
    emb, labels, classes = training_set()
    m = 2
    loss = build_loss("contrastive-centroid", {"closest_classes": m, "pairs_per_anchor": 3})
    loss.refresh(emb, labels)
    near = closest_by_label(emb, labels, classes, m)
    assert loss.miner.table[classes].tolist() == [near[c] for c in classes]

    # Two examples of each class; class 13 was never seen in training.
    y = torch.tensor([c for c in classes + [13] for _ in range(2)])
    fallback = 0
    for seed in range(5):
        torch.manual_seed(seed)
        x = torch.randn(len(y), 4, dtype=F64)
        i, j, same = loss.pairs(x, y)
        present = set(y.tolist())
        for a, n in zip(i[~same].tolist(), j[~same].tolist(), strict=True):
            ya, yn = int(y[a]), int(y[n])
            assert yn != ya
            if ya in near and set(near[ya]) & present:
                assert yn in near[ya]
            else:
                fallback += 1
        assert int(same.sum()) == int((~same).sum()) == 3 * len(y)
    assert fallback == 5 * 2 * 3  # class 13's anchors: any negative

    # Only the closest class of 2 in the batch: 2's negatives are all of it.
    target = near[2][0]
    far = [c for c in classes if c not in near[2] and c != 2][0]
    y = torch.tensor([2, 2, target, target, far, far])
    i, j, same = loss.pairs(torch.randn(6, 4, dtype=F64), y)
    assert {int(y[n]) for a, n in zip(i[~same], j[~same], strict=True) if int(y[a]) == 2} == {
        target
    }
    # None of them in the batch: any negative.
    y = torch.tensor([2, 2, far, far])
    i, j, same = loss.pairs(torch.randn(4, 4, dtype=F64), y)
    assert all(int(y[n]) == far for a, n in zip(i[~same], j[~same], strict=True) if a < 2)


def test_contrastive_centroid_value_and_fallback_before_refresh():
    x0, y = batch(15)
    plain = build_loss("contrastive-squared", {"margin": 3.0, "pairs_per_anchor": 2})
    centroid = build_loss("contrastive-centroid", {"margin": 3.0, "pairs_per_anchor": 2})
    # Before any refresh: the uniform pairs of contrastive-squared.
    close(value_and_grad(centroid, x0, y, 6)[0], value_and_grad(plain, x0, y, 6)[0])

    centroid.refresh(*batch(16, [0] * 5 + [1] * 5 + [2] * 5))
    torch.manual_seed(7)
    i, j, same = centroid.pairs(x0, y)
    pairs = list(zip(i.tolist(), j.tolist(), same.tolist(), strict=True))
    value, g = value_and_grad(centroid, x0, y, 7)
    x_ref = x0.clone().requires_grad_()
    ref = contrastive_reference(x_ref, pairs, 3.0)
    close(value, ref)
    close(g, torch.autograd.grad(ref, x_ref)[0])


def test_centroid_table_survives_a_checkpoint():
    emb, labels, _ = training_set()
    loss = build_loss("contrastive-centroid", {"closest_classes": 2})
    loss.refresh(emb, labels)
    resumed = build_loss("contrastive-centroid", {"closest_classes": 2})
    resumed.load_state_dict(loss.state_dict())
    assert torch.equal(resumed.miner.table, loss.miner.table)


def test_the_centroid_miner_is_refused_where_no_loss_refreshes_it():
    # triplet, triplet-nca and pml: losses take --miner but never refresh a miner: its table
    # stayed empty and every negative was any of the batch's (run as Algorithm 1's)
    for loss in ("triplet", "triplet-nca", "pml:ContrastiveLoss"):
        with pytest.raises(ValueError, match="only --loss contrastive-centroid computes"):
            build_loss(loss, {"miner": "centroid-hard-negative"})
    with pytest.raises(ValueError, match="or another --miner"):
        build_miner("centroid-hard-negative", margin=0.3)


def test_the_centroid_miner_mines_balanced_pairs_after_a_refresh():
    miner = CentroidHardNegativeMiner()
    emb, labels, _ = training_set()
    miner.refresh(emb, labels)
    a, p, n_anchor, n = miner(emb[::2], labels[::2])
    assert len(a) == len(p) == len(n_anchor) == len(n) > 0
    assert (labels[::2][a] == labels[::2][p]).all() and (a != p).all()
    assert (labels[::2][n_anchor] != labels[::2][n]).all()


# --------------------------------------------------------------------------------------------
# Declarations and stability
# --------------------------------------------------------------------------------------------

# The losses of this file; their declarations are checked with every loss's in
# tests/test_loss_registry.py.
PAPER_LOSSES = ("bce-pair", "contrastive-centroid", "contrastive-squared", "triplet-nca")


def test_contrastive_centroid_defaults_and_refresh_interval():
    assert loss_defaults("contrastive-centroid") == {
        "margin": 1.0,
        "pairs_per_anchor": 1,
        "closest_classes": 5,
        "refresh_every": 1,
    }
    assert loss_defaults("contrastive-squared") == {"margin": 1.0, "pairs_per_anchor": 1}
    loss = build_loss("contrastive-centroid", {"refresh_every": 4})
    assert loss.refresh_interval == 4


@pytest.mark.parametrize("name", PAPER_LOSSES)
@pytest.mark.parametrize("coincident", [False, True])
def test_forward_backward_is_finite(name, coincident):
    loss = build_loss(name, {}, num_train=20, num_classes=3, dims=8)
    torch.manual_seed(17)
    loss.refresh(torch.randn(30, 8), torch.arange(30) % 3)
    x = torch.randn(12, 8)
    if coincident:  # every embedding the same: zero distances, zero variance
        x = x[:1].repeat(12, 1)
    x.requires_grad_()
    value = loss(x, torch.tensor(LABELS))
    value.backward()
    assert torch.isfinite(value)
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in loss.parameters())
