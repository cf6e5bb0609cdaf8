"""The histogram loss (Ustinova and Lempitsky 2016) and Smooth-AP (Brown et al. 2020) against
hand-written loops on a small batch, value and embedding gradient; tests/loss_reference.py."""

from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning.losses import HistogramLoss as PMLHistogramLoss
from pytorch_metric_learning.losses import SmoothAPLoss as PMLSmoothAPLoss

import losses
from losses import histogram, smooth_ap  # noqa: F401
from tests.loss_reference import F64, batch, close, dot, matches_reference, unit_rows, val

# Classes 5 and 7 are singletons: anchors without positives, negatives for the others, and
# a negative pair that PML's histogram loss leaves out.
HISTOGRAM_LABELS = [0, 1, 2, 0, 1, 2, 0, 7, 1, 5, 2]
# Three classes of four, shuffled: as many classes as examples of each would hide PML's
# reading of the batch layout (losses/smooth_ap.py).
SMOOTH_AP_LABELS = [2, 0, 1, 1, 0, 2, 2, 1, 0, 0, 1, 2]


@pytest.fixture(autouse=True)
def float64_by_default():
    """PML works partly in the default dtype (the histogram's nodes r * delta, the tensor
    that gathers the APs): float64 here, so that the references can match exactly."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    yield
    torch.set_default_dtype(before)


def check(name, params, labels, reference, *args, seed=21):
    """The registered loss against `reference(x, y, *args)`: value and embedding gradient."""
    loss = losses.build_loss(name, params, num_train=100, num_classes=8, dims=4)
    matches_reference(loss, labels, lambda x, y: reference(x, y, *args), seed, 1e-6)


# --------------------------------------------------------------------------------------------
# Histogram loss (Ustinova and Lempitsky 2016)
# --------------------------------------------------------------------------------------------


def histogram_reference(x, labels, bins, every_negative=False):
    """Cosine similarities of the unordered pairs, kept below 1 - delta / 1000, each shared by
    the triangular kernel max(0, 1 - |s - t_r| / delta) among the nodes t_r = -1 + r delta,
    delta = 2 / bins; h+ and h- the mean kernels over the positive and the negative pairs;
    the loss is sum_r h-_r sum_{q <= r} h+_q. As PML, a negative pair counts only where one
    of its two has a positive (unless `every_negative`, the paper's)."""
    u, y = unit_rows(x), labels.tolist()
    has_positive = [y.count(c) > 1 for c in y]
    delta = 2 / bins
    pos, neg = [], []
    for i in range(len(y)):
        for j in range(i + 1, len(y)):
            s = torch.clamp(dot(u[i], u[j]), max=1 - delta / 1000)
            if y[i] == y[j]:
                pos.append(s)
            elif has_positive[i] or has_positive[j] or every_negative:
                neg.append(s)

    def hist(sims):
        nodes = [-1 + r * delta for r in range(bins + 1)]
        return [sum(torch.clamp(1 - abs(s - t) / delta, min=0) for s in sims) / len(sims)
                for t in nodes]  # fmt: skip

    h_pos, h_neg = hist(pos), hist(neg)
    return sum(h_neg[r] * sum(h_pos[: r + 1]) for r in range(bins + 1))


@pytest.mark.parametrize("bins", [100, 10])
def test_histogram_matches_pair_loop(bins):
    assert losses.loss_defaults("histogram") == {"num_bins": 100}
    check("histogram", {} if bins == 100 else {"num_bins": bins}, HISTOGRAM_LABELS,
          histogram_reference, bins)  # fmt: skip


def test_histogram_leaves_out_negative_pairs_of_two_without_positives():
    loss = losses.build_loss("histogram", {"num_bins": 10})
    x, y = batch(21, HISTOGRAM_LABELS)
    paper = val(histogram_reference(x, y, 10, every_negative=True))
    assert abs(val(loss(x, y)) - paper) > 1e-4


def test_histogram_takes_an_example_drawn_twice():
    """A class with fewer examples than the batch wants repeats one (MPerClassSampler): a
    similarity of 1, outside PML's histogram."""
    x0, y = batch(22, [0, 0, 1, 1, 2, 2, 3, 3])
    x0[1] = x0[0]
    with pytest.raises(RuntimeError, match="out of bounds"):
        PMLHistogramLoss()(x0, y)
    check_value = losses.build_loss("histogram", {})(x0, y)
    close(check_value, histogram_reference(x0, y, 100))


def test_histogram_is_zero_when_every_positive_pair_is_more_similar():
    # Each class at one point, the classes orthogonal: h+ in the top bin, h- at similarity 0.
    loss = losses.build_loss("histogram", {})
    x = torch.eye(3, dtype=F64).repeat_interleave(3, dim=0)
    assert float(loss(x, torch.arange(3).repeat_interleave(3))) == pytest.approx(0, abs=1e-12)


# --------------------------------------------------------------------------------------------
# Smooth-AP (Brown et al. 2020)
# --------------------------------------------------------------------------------------------


def smooth_ap_reference(x, labels, temperature):
    """Per query q, over its positives i (q itself included, as PML and the authors' code):
    (1 + sum over the other positives j of G(s_qj - s_qi)) / (1 + sum over every j != i of
    G(s_qj - s_qi)), G(d) = sigmoid(d / temperature), s cosine similarities (s_qq = 1); AP_q
    their mean; the loss is the mean of 1 - AP_q."""
    u, y = unit_rows(x), labels.tolist()
    n = len(y)
    s = [[dot(u[q], u[j]) for j in range(n)] for q in range(n)]
    per_query = []
    for q in range(n):
        positives = [i for i in range(n) if y[i] == y[q]]

        def rank(i, among, q=q):
            return 1 + sum(torch.sigmoid((s[q][j] - s[q][i]) / temperature)
                           for j in among if j != i)  # fmt: skip

        ap = sum(rank(i, positives) / rank(i, range(n)) for i in positives) / len(positives)
        per_query.append(1 - ap)
    return sum(per_query) / n


@pytest.mark.parametrize("temperature", [None, 0.1])
def test_smooth_ap_matches_ranking_loop(temperature):
    assert losses.loss_defaults("smooth-ap") == {"temperature": 0.01}
    params = {} if temperature is None else {"temperature": temperature}
    check("smooth-ap", params, SMOOTH_AP_LABELS, smooth_ap_reference, temperature or 0.01)


def test_pml_alone_takes_blocks_of_the_class_count_for_classes():
    """Why the registered loss relabels the batch: PML 2.9's class, given the batch sorted by
    class (3 classes of 4), ranks each query among blocks of 3. Should this fail after an
    upgrade of PML, `class_blocks` is to go."""
    x, _ = batch(23, SMOOTH_AP_LABELS)
    y = torch.arange(3).repeat_interleave(4)
    value = PMLSmoothAPLoss(temperature=0.1)(x, y)
    close(value, smooth_ap_reference(x, torch.arange(12) // 3, 0.1))
    assert abs(val(value) - val(smooth_ap_reference(x, y, 0.1))) > 1e-3


def test_smooth_ap_needs_as_many_examples_of_each_class():
    loss = losses.build_loss("smooth-ap", {})
    x, y = batch(24, [0, 0, 1, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="same number of examples"):
        loss(x, y)
