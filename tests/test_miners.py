"""The triplet miners against brute-force loops over a small batch.

Distances are Euclidean between L2-normalised embeddings, as PML's default LpDistance computes
them inside the miners; the loops recompute them from scratch in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from miners import build_miner, miner_names

F64 = torch.float64
LABELS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


def random_batch(seed: int, labels=LABELS, dims: int = 4):
    torch.manual_seed(seed)
    return torch.randn(len(labels), dims, dtype=F64), torch.tensor(labels)


def on_circle(degrees: list[float]) -> torch.Tensor:
    """Unit vectors in 2-D at the given angles (chord distance grows with the angle)."""
    rad = [math.radians(a) for a in degrees]
    return torch.tensor([[math.cos(a), math.sin(a)] for a in rad], dtype=F64)


def distances(x: torch.Tensor) -> list[list[float]]:
    """Euclidean distances of the L2-normalised rows, by loops."""
    unit = []
    for row in x.tolist():
        norm = math.sqrt(sum(v * v for v in row))
        unit.append([v / norm for v in row])
    n = len(unit)
    return [
        [
            math.sqrt(sum((a - b) ** 2 for a, b in zip(unit[i], unit[j], strict=True)))
            for j in range(n)
        ]
        for i in range(n)
    ]


def as_triplets(mined) -> list[tuple[int, int, int]]:
    """(a, p, n) triplets from a miner's (a, p, n) or (a1, p, a2, n) output."""
    if len(mined) == 4:
        a1, p, a2, n = mined
        assert torch.equal(a1, a2)  # one triplet per anchor, paired by position
        mined = (a1, p, n)
    a, p, n = (t.tolist() for t in mined)
    assert len(a) == len(p) == len(n)
    return list(zip(a, p, n, strict=True))


def all_triplets(labels) -> set[tuple[int, int, int]]:
    y = labels.tolist()
    m = len(y)
    return {
        (a, p, n)
        for a in range(m)
        for p in range(m)
        for n in range(m)
        if p != a and y[p] == y[a] and y[n] != y[a]
    }


def semihard_triplets(x, labels, margin) -> set[tuple[int, int, int]]:
    """PML's TripletMarginMiner("semihard"): 0 < d(a,n) - d(a,p) <= margin."""
    d = distances(x)
    return {(a, p, n) for a, p, n in all_triplets(labels) if 0 < d[a][n] - d[a][p] <= margin}


def easy_positive_triplets(x, labels) -> set[tuple[int, int, int]]:
    """PML's BatchEasyHardMiner(EASY, SEMIHARD): per anchor, its closest positive and the
    closest negative strictly farther than that positive; anchors lacking either are dropped."""
    d = distances(x)
    y = labels.tolist()
    out = set()
    for a in range(len(y)):
        positives = [j for j in range(len(y)) if j != a and y[j] == y[a]]
        if not positives:
            continue
        p = min(positives, key=lambda j: d[a][j])
        farther = [j for j in range(len(y)) if y[j] != y[a] and d[a][j] > d[a][p]]
        if not farther:
            continue
        out.add((a, p, min(farther, key=lambda j: d[a][j])))
    return out


def mine(name: str, margin: float, x, labels) -> list[tuple[int, int, int]]:
    triplets = as_triplets(build_miner(name, margin=margin)(x, labels))
    assert len(triplets) == len(set(triplets))  # no duplicates
    return triplets


def test_miner_names():
    assert miner_names() == [
        "all", "batch-hard", "centroid-hard-negative", "easy-positive", "hdc", "semihard"
    ]  # fmt: skip


def test_unknown_miner_lists_valid_names():
    with pytest.raises(ValueError) as err:
        build_miner("hardest", margin=0.2)
    message = str(err.value)
    assert "hardest" in message
    for name in ("all", "easy-positive", "semihard"):
        assert name in message


# --------------------------------------------------------------------------------------------
# semihard
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_semihard_matches_brute_force(seed):
    x, y = random_batch(seed)
    got = set(mine("semihard", 0.2, x, y))
    expected = semihard_triplets(x, y, 0.2)
    assert 0 < len(expected) < len(all_triplets(y))
    assert got == expected
    # The margin matters on this batch: a smaller one keeps fewer triplets, and is honoured.
    smaller = semihard_triplets(x, y, 0.05)
    assert smaller < expected
    assert set(mine("semihard", 0.05, x, y)) == smaller


def test_semihard_margin_is_passed_on_a_constructed_example():
    # Anchor 0 and positive 1 at chord distance 0.5; negative 2 at 0.6 from the anchor: a
    # semi-hard triplet for margin 0.2 (gap 0.1) but not for margin 0.05.
    angle = [2 * math.degrees(math.asin(c / 2)) for c in (0.5, 0.6)]
    x = on_circle([0.0, angle[0], -angle[1], 180.0])
    y = torch.tensor([0, 0, 1, 1])
    d = distances(x)
    assert d[0][1] == pytest.approx(0.5) and d[0][2] == pytest.approx(0.6)
    wide, narrow = set(mine("semihard", 0.2, x, y)), set(mine("semihard", 0.05, x, y))
    assert (0, 1, 2) in wide
    assert (0, 1, 2) not in narrow
    assert wide == semihard_triplets(x, y, 0.2)
    assert narrow == semihard_triplets(x, y, 0.05)


# --------------------------------------------------------------------------------------------
# easy-positive
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_easy_positive_matches_brute_force(seed):
    x, y = random_batch(seed, labels=LABELS + [5])  # 5: a singleton, never an anchor
    got = mine("easy-positive", 0.2, x, y)
    expected = easy_positive_triplets(x, y)
    assert set(got) == expected
    anchors = [a for a, _, _ in got]
    assert len(anchors) == len(set(anchors))  # one triplet per anchor
    assert 12 not in anchors


def test_easy_positive_constructed_example():
    # Angles (degrees) and classes:
    #   0: 0 (c0)   1: 10 (c1)   2: 25 (c1)   3: 100 (c0)   4: 150 (c2, singleton)
    # anchor 0: closest positive 3 (100 deg); negatives farther than that: 4 (150) -> (0, 3, 4)
    # anchor 1: positive 2 (15); negative 0 (10) is closer, then 3 (90) -> (1, 2, 3)
    # anchor 2: positive 1 (15); closest farther negative 0 (25) -> (2, 1, 0)
    # anchor 3: positive 0 (100) but every negative is closer (90, 75, 50) -> dropped
    # anchor 4: no positive -> dropped
    x = on_circle([0.0, 10.0, 25.0, 100.0, 150.0])
    y = torch.tensor([0, 1, 1, 0, 2])
    expected = {(0, 3, 4), (1, 2, 3), (2, 1, 0)}
    assert easy_positive_triplets(x, y) == expected
    assert set(mine("easy-positive", 0.2, x, y)) == expected


def test_easy_positive_negative_must_be_strictly_farther_than_the_positive():
    # Positive 1 and negative 2 are mirror images around the anchor: the same distance.
    x = on_circle([0.0, 30.0, -30.0, 60.0])
    y = torch.tensor([0, 0, 1, 1])
    d = distances(x)
    assert d[0][1] == d[0][2]
    got = {t for t in mine("easy-positive", 0.2, x, y) if t[0] == 0}
    assert got == {(0, 1, 3)}
    assert got == {t for t in easy_positive_triplets(x, y) if t[0] == 0}


# --------------------------------------------------------------------------------------------
# all
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("labels", [LABELS, [0, 0, 1, 2, 2, 2, 3, 1, 1, 0, 4, 2]])
def test_all_returns_every_triplet(labels):
    x, y = random_batch(4, labels=labels)
    got = mine("all", 0.2, x, y)
    expected = all_triplets(y)
    assert set(got) == expected
    count = sum(
        (labels.count(labels[a]) - 1) * (len(labels) - labels.count(labels[a]))
        for a in range(len(labels))
    )
    assert len(got) == count
    # The selection ignores distances and the margin.
    assert set(mine("all", 0.05, torch.randn(len(labels), 4, dtype=F64), y)) == expected
