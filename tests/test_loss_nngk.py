"""NNGK (Meyer et al. 2018, Eq. 1-3) against a hand-written loop on a small batch: its neighbour
lists, value and gradients, its fallback for a list without a same-class centre, its IVF index, its
checkpoint, its class probabilities and its epoch statistics (tests/loss_reference.py)."""

from __future__ import annotations

import math

import pytest
import torch

import losses
from losses.nngk import NNGKLoss, nngk_class_probabilities
from tests.loss_reference import F64, close, grad_of, log_sum_exp, rows, sq_dist, val

N_TRAIN, DIMS, K, SIGMA = 12, 4, 5, 1.3  # sigma != 1 so that sigma vs sigma^2 shows


def brute_neighbours(centres: torch.Tensor, labels: torch.Tensor, k: int) -> list[list[int]]:
    """Each centre's k nearest other centres (ascending), with the documented fallback: when
    none has its label, the last entry becomes its nearest centre of its own class (if any)."""
    c = rows(centres.to(F64))
    n = len(c)
    out = []
    for i in range(n):
        by_dist = sorted((float(sq_dist(c[i], c[j])), j) for j in range(n) if j != i)
        lst = [j for _, j in by_dist[:k]]
        if not any(int(labels[j]) == int(labels[i]) for j in lst):
            same = [j for _, j in by_dist if int(labels[j]) == int(labels[i])]
            if same:
                lst[-1] = same[0]
        out.append(lst)
    return out


def nngk_reference(x, labels, idx, centres, centre_labels, log_w, nbrs, sigma, log_space=False):
    """Eq. 3 by loops: the mean over the batch of -ln(sum_same w f / sum_all w f), over each
    example's neighbour list; examples without a same-label neighbour are skipped."""
    xs = rows(x)
    cs = rows(centres)
    total, count = 0.0, 0
    for b, i in enumerate(idx.tolist()):
        y = int(labels[b])
        logits_all, logits_same, num, den = [], [], 0.0, 0.0
        for j in nbrs[i]:
            d2 = sq_dist(xs[b], cs[j])
            if log_space:
                logit = log_w[j] - d2 / (2 * sigma**2)
                logits_all.append(logit)
                if int(centre_labels[j]) == y:
                    logits_same.append(logit)
            else:
                term = torch.exp(log_w[j]) * torch.exp(-d2 / (2 * sigma**2))  # w_j f(x, c_j)
                den = den + term
                if int(centre_labels[j]) == y:
                    num = num + term
        if log_space:
            if not logits_same:
                continue
            total = total - (log_sum_exp(logits_same) - log_sum_exp(logits_all))
        else:
            if not any(int(centre_labels[j]) == y for j in nbrs[i]):
                continue
            total = total - torch.log(num / den)
        count += 1
    return total / count


def make_nngk(dtype=torch.float32, seed=0, **params):
    torch.manual_seed(seed)
    centres = torch.randn(N_TRAIN, DIMS)  # float32 values, exact in float64 too
    centre_labels = torch.arange(N_TRAIN) % 3
    params = {"sigma": SIGMA, "k": K, **params}
    loss = losses.build_loss("nngk", params, num_train=N_TRAIN, num_classes=3, dims=DIMS)
    loss = loss.to(dtype)
    with torch.no_grad():
        loss.log_weights.copy_(0.7 * torch.randn(N_TRAIN))
    assert val(loss.log_weights.abs().min()) > 0
    loss.refresh(centres, centre_labels)
    return loss, centres.to(F64), centre_labels


def test_nngk_neighbour_lists_are_the_k_nearest_other_centres():
    loss, centres, centre_labels = make_nngk()
    expected = brute_neighbours(centres, centre_labels, K)
    assert loss.neighbours.tolist() == expected
    assert all(i not in expected[i] for i in range(N_TRAIN))
    assert loss.neighbours.shape == (N_TRAIN, K)


def test_nngk_lists_found_on_a_device_are_the_same(monkeypatch):
    # On a GPU the refresh searches with torch there (issue 44); here on CPU tensors.
    searched = []
    monkeypatch.setattr(NNGKLoss, "searches_on", lambda self, device: searched.append(device) or 1)
    loss, centres, centre_labels = make_nngk()
    assert searched and loss.neighbours.tolist() == brute_neighbours(centres, centre_labels, K)


def test_torch_knn_gives_faiss_s_neighbours():
    from bench.util.knn import knn
    from bench.util.torch_knn import torch_knn

    x = torch.randn(500, 16)
    assert torch.equal(torch_knn(x, 7), torch.from_numpy(knn(x.numpy(), 7)[1]))


def test_nngk_k_is_capped_at_the_other_training_examples():
    loss = losses.build_loss("nngk", {"k": 100}, num_train=4, num_classes=2, dims=2)
    assert loss.k == 3
    torch.manual_seed(5)
    centres, labels = torch.randn(4, 2), torch.tensor([0, 1, 0, 1])
    loss.refresh(centres, labels)
    assert loss.neighbours.tolist() == brute_neighbours(centres, labels, 3)
    assert [sorted(r) for r in loss.neighbours.tolist()] == [
        [j for j in range(4) if j != i] for i in range(4)
    ]


@pytest.mark.parametrize(
    "params", [{"k": 0}, {"sigma": 0.0}, {"sigma": -1.0}, {"update_interval": 0}]
)
def test_nngk_rejects_parameters_out_of_range(params):
    with pytest.raises(ValueError, match="NNGK needs sigma > 0, k >= 1 and update_interval >= 1"):
        losses.build_loss("nngk", params, num_train=10, num_classes=2, dims=2)


def test_nngk_says_when_k_exceeds_the_training_set(caplog):
    with caplog.at_level("WARNING", logger="nngk-bench"):
        loss = losses.build_loss("nngk", {"k": 100}, num_train=10, num_classes=2, dims=2)
    assert loss.k == 9
    assert caplog.messages == ["NNGK: k=100 exceeds the 9 other training items; using k=9"]


def ivf_nngk(nprobe: int, dims: int = 16, n: int = 400, k: int = 10, seed: int = 3):
    """NNGK with the IVF index refreshed on clustered centres, and their neighbour lists under
    exact search as plain Python sets (at dims 16, no near-tie at the 10th neighbour: the
    distances to the 10th and 11th differ by more than 3e-4 of theirs, far above float32's
    error)."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=gen)
    means = torch.randn(10, dims, generator=gen)
    centres = means[labels] + 0.3 * torch.randn(n, dims, generator=gen)
    params = {"k": k, "index": "ivf", "nprobe": nprobe}
    loss = losses.build_loss("nngk", params, num_train=n, dims=dims)
    loss.refresh(centres, labels)
    d = torch.cdist(centres.double(), centres.double()).fill_diagonal_(float("inf"))
    exact = [set(row) for row in d.topk(k, largest=False).indices.tolist()]
    return loss, exact


def test_nngk_ivf_index_probing_every_list_gives_the_exact_lists():
    loss, exact = ivf_nngk(nprobe=10**6)
    # Lists without a same-class neighbour would have their last one replaced: there are none.
    assert [set(row) for row in loss.neighbours.tolist()] == exact
    assert loss.epoch_stats() == {"neighbour_recall": 1.0} and loss.warnings() == []


def test_nngk_ivf_index_with_low_recall_says_so():
    loss, exact = ivf_nngk(nprobe=1, dims=32)
    pairs = zip(loss.neighbours.tolist(), exact, strict=True)
    found = [len(set(row) & e) / len(e) for row, e in pairs]
    recall = loss.epoch_stats()["neighbour_recall"]
    assert recall == pytest.approx(sum(found) / len(found), abs=0.01) and recall < 0.95
    assert loss.warnings() == [
        f"NNGK neighbour lists from the IVF index have recall@10 {recall:.3f} (below 0.95): "
        "raise nprobe (now 1) or use index exact"
    ]


def test_nngk_index_choice():
    from losses.nngk import ANN_MIN_BANK

    def approximate(index: str, num_train: int) -> bool:
        return NNGKLoss(num_train, 2, k=1, index=index).approximate

    assert not approximate("auto", ANN_MIN_BANK - 1) and approximate("auto", ANN_MIN_BANK)
    assert approximate("ivf", 10) and not approximate("exact", ANN_MIN_BANK)
    with pytest.raises(ValueError, match="NNGK index is one of exact, ivf, auto"):
        NNGKLoss(10, 2, index="hnsw")
    assert make_nngk()[0].epoch_stats() == {}  # exact lists: no recall to report


def test_on_a_gpu_auto_searches_a_large_bank_exactly(monkeypatch):
    """From ANN_MIN_BANK on, "auto" uses the IVF index on the CPU, and torch's exact search on
    a GPU (the CPU taken for one here); "ivf" stays the IVF index there."""
    from losses import nngk

    n = 1200
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(n) % 10
    exact = NNGKLoss(n, 8, k=5, index="exact")
    exact.refresh(x, labels)  # faiss's exact lists, on the CPU
    monkeypatch.setattr(nngk, "ANN_MIN_BANK", 1000)
    monkeypatch.setattr(nngk, "search_device", lambda device: torch.device("cpu"))
    auto = NNGKLoss(n, 8, k=5, index="auto")
    auto.refresh(x, labels)

    def distances(neighbours):  # float32 rounding may order two nearly equal ones either way
        return (x[neighbours] - x[:, None]).square().sum(-1).sort(dim=1).values

    assert auto.approximate and torch.allclose(
        distances(auto.neighbours), distances(exact.neighbours)
    )
    assert (auto.neighbours == exact.neighbours).float().mean() > 0.99
    assert auto.epoch_stats() == {}  # exact lists: no recall
    ivf = NNGKLoss(n, 8, k=5, index="ivf", nprobe=1)
    ivf.refresh(x, labels)
    assert "neighbour_recall" in ivf.epoch_stats()


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_nngk_value_and_gradients_match_eq3_loop(dtype, tol):
    loss, centres, centre_labels = make_nngk(dtype)
    nbrs = brute_neighbours(centres, centre_labels, K)
    torch.manual_seed(1)
    idx = torch.tensor([0, 3, 5, 7, 10, 11])
    labels = centre_labels[idx]
    x0 = centres[idx] + 0.4 * torch.randn(len(idx), DIMS, dtype=F64)

    x = x0.clone().to(dtype).requires_grad_()
    value = loss(x, labels, idx)
    value.backward()

    x_ref = x0.clone().requires_grad_()
    lw_ref = loss.log_weights.detach().to(F64).clone().requires_grad_()
    ref = nngk_reference(x_ref, labels, idx, centres, centre_labels, lw_ref, nbrs, SIGMA)
    gx, gw = grad_of(ref, x_ref, lw_ref)

    close(value.detach(), ref.detach(), tol)
    close(x.grad, gx, tol)
    close(loss.log_weights.grad, gw, tol)
    # The weights of centres outside every neighbour list get no gradient; others do.
    used = sorted({j for i in idx.tolist() for j in nbrs[i]})
    assert (loss.log_weights.grad[used] != 0).all()
    unused = [j for j in range(N_TRAIN) if j not in used]
    assert (loss.log_weights.grad[unused] == 0).all()


def test_nngk_gathered_a_few_rows_at_a_time_or_all_at_once_agree(monkeypatch):
    idx = torch.tensor([0, 3, 5, 7])

    def value_and_grad(floats):
        monkeypatch.setattr(losses.nngk, "GATHER_FLOATS", floats)
        loss, centres, centre_labels = make_nngk(torch.float64)
        x = (centres[idx] + 0.3).requires_grad_()
        value = loss(x, centre_labels[idx], idx)
        value.backward()
        return value.detach(), x.grad, loss.log_weights.grad

    for whole, gathered in zip(value_and_grad(10**9), value_and_grad(0), strict=True):
        close(whole, gathered, 1e-12)


def test_nngk_loaded_from_a_checkpoint_gives_the_same_loss():
    loss, centres, centre_labels = make_nngk(torch.float64)
    idx = torch.tensor([1, 2, 8])
    x = centres[idx] + 0.2
    context = {"num_train": N_TRAIN, "num_classes": 3, "dims": DIMS}
    fresh = losses.build_loss("nngk", {"sigma": SIGMA, "k": K}, **context).double()
    fresh.refresh(3 * torch.randn(N_TRAIN, DIMS, dtype=F64), centre_labels)
    before = fresh(x, centre_labels[idx], idx)  # its own bank's norms, now cached
    fresh.load_state_dict(loss.state_dict())
    assert abs(val(before) - val(loss(x, centre_labels[idx], idx))) > 1e-3
    close(fresh(x, centre_labels[idx], idx), loss(x, centre_labels[idx], idx), 1e-12)


def test_nngk_rows_without_a_positive_leave_the_mean_and_the_gradient():
    loss, centres, labels = fallback_case()
    x = torch.tensor([[0.1, 0.2], [9.5, 10.2]], requires_grad=True)
    both = loss(x, labels[[0, 6]], torch.tensor([0, 6]))
    both.backward()
    alone = loss(x[:1].detach(), labels[[0]], torch.tensor([0]))
    assert val(both) == pytest.approx(val(alone), rel=1e-6)
    assert torch.isfinite(x.grad).all() and float(x.grad[1].abs().max()) == 0.0


def test_nngk_centres_are_a_buffer_and_log_weights_the_only_parameter():
    loss, centres, centre_labels = make_nngk(torch.float64)
    assert [name for name, _ in loss.named_parameters()] == ["log_weights"]
    assert loss.centres.requires_grad is False
    assert "centres" in dict(loss.named_buffers())
    torch.testing.assert_close(loss.centres, centres)
    idx = torch.tensor([1, 2, 4])
    x = (centres[idx] + 0.1).requires_grad_()
    loss(x, centre_labels[idx], idx).backward()
    assert loss.centres.grad is None
    assert loss.log_weights.grad is not None


def test_nngk_needs_refresh_and_indices():
    loss = losses.build_loss("nngk", {"k": 3}, num_train=5, num_classes=2, dims=2)
    x = torch.zeros(2, 2)
    with pytest.raises(RuntimeError):
        loss(x, torch.tensor([0, 1]), torch.tensor([0, 1]))
    loss.refresh(torch.randn(5, 2), torch.tensor([0, 1, 0, 1, 0]))
    with pytest.raises(RuntimeError):
        loss(x, torch.tensor([0, 1]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nngk_is_stable_far_from_every_centre(dtype):
    loss, centres, centre_labels = make_nngk(dtype, sigma=1.0)
    nbrs = brute_neighbours(centres, centre_labels, K)
    torch.manual_seed(2)
    idx = torch.tensor([0, 1, 2, 6, 9])
    labels = centre_labels[idx]
    direction = torch.nn.functional.normalize(torch.randn(len(idx), DIMS, dtype=F64), dim=1)
    x0 = 1e3 * direction
    far = torch.cdist(x0, centres)
    assert float(far.min()) > 990 and float(far.max()) < 1010

    x = x0.to(dtype).requires_grad_()
    value = loss(x, labels, idx)
    value.backward()
    assert torch.isfinite(value)
    assert torch.isfinite(x.grad).all()
    assert torch.isfinite(loss.log_weights.grad).all()

    # The direct formula underflows here (0/0), so compare with the same sum in log space.
    lw = loss.log_weights.detach().to(F64)
    direct = nngk_reference(x0, labels, idx, centres, centre_labels, lw, nbrs, 1.0)
    assert not torch.isfinite(direct)
    ref = nngk_reference(x0, labels, idx, centres, centre_labels, lw, nbrs, 1.0, log_space=True)
    assert val(ref) > 10  # a real, large loss, not a degenerate 0
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    close(value.detach(), ref, tol)


def fallback_case():
    """2-D centres: centre 0 (class 0) has classes 1, 2, 1 as its three nearest centres; its
    nearest class-0 centre is 4, then 5. Centre 6 is alone in class 3."""
    centres = torch.tensor(
        [
            [0.0, 0.0],  # 0, class 0
            [0.5, 0.0],  # 1, class 1
            [0.0, 0.6],  # 2, class 2
            [-0.7, 0.0],  # 3, class 1
            [4.0, 0.0],  # 4, class 0
            [0.0, -6.0],  # 5, class 0
            [10.0, 10.0],  # 6, class 3 (singleton)
            [0.0, -0.8],  # 7, class 2
        ]
    )
    labels = torch.tensor([0, 1, 2, 1, 0, 0, 3, 2])
    loss = losses.build_loss("nngk", {"k": 3, "sigma": 1.0}, num_train=8, num_classes=4, dims=2)
    loss.refresh(centres, labels)
    return loss, centres, labels


def test_nngk_fallback_replaces_last_neighbour_by_nearest_same_class_centre():
    loss, centres, labels = fallback_case()
    nbrs = brute_neighbours(centres, labels, 3)
    assert loss.neighbours.tolist() == nbrs
    # By brute force: the plain 3 nearest of centre 0 are 1, 2, 3 (no class 0) and its
    # nearest class-0 centre is 4, which takes the last (farthest) place.
    plain = sorted(range(1, 8), key=lambda j: float(sq_dist(rows(centres)[0], rows(centres)[j])))
    assert plain[:3] == [1, 2, 3]
    same = [j for j in plain if int(labels[j]) == 0]
    assert same[0] == 4
    assert loss.neighbours[0].tolist() == [1, 2, 4]
    # The singleton keeps its plain list: it has no centre of its class to fall back on.
    assert not any(int(labels[j]) == 3 for j in loss.neighbours[6].tolist())

    idx = torch.tensor([0, 6])
    x0 = torch.tensor([[0.1, 0.05], [9.5, 10.2]], dtype=F64)
    x = x0.clone().float().requires_grad_()
    value = loss(x, labels[idx], idx)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(x.grad).all()
    # Only the example with a (fallback) same-class neighbour counts in the mean.
    lw = loss.log_weights.detach().to(F64)
    ref = nngk_reference(x0, labels[idx], idx, centres.to(F64), labels, lw, nbrs, 1.0)
    close(value.detach(), ref, 1e-5)
    assert float(x.grad[1].abs().max()) == 0.0

    # A gradient step on x moves example 0 toward its class-0 centre.
    before = float(torch.dist(x[0].detach(), centres[4]))
    stepped = x[0].detach() - 0.1 * x.grad[0]
    after = float(torch.dist(stepped, centres[4]))
    assert after < before - 1e-3


def test_nngk_example_whose_class_has_no_other_member_contributes_nothing():
    loss, centres, labels = fallback_case()
    x = torch.tensor([[9.5, 10.2]], requires_grad=True)
    value = loss(x, labels[[6]], torch.tensor([6]))
    assert torch.isfinite(value) and val(value) == 0.0
    value.backward()
    assert float(x.grad.abs().max()) == 0.0


def test_nngk_fixed_weights():
    loss = losses.build_loss(
        "nngk", {"k": 3, "learn_weights": False}, num_train=6, num_classes=2, dims=3
    )
    assert loss.log_weights.requires_grad is False
    assert not [p for p in loss.parameters() if p.requires_grad]
    torch.manual_seed(3)
    loss.refresh(torch.randn(6, 3), torch.tensor([0, 1, 0, 1, 0, 1]))
    x = torch.randn(3, 3, requires_grad=True)
    loss(x, torch.tensor([0, 1, 0]), torch.tensor([0, 1, 2])).backward()
    assert loss.log_weights.grad is None
    assert x.grad is not None and float(x.grad.abs().sum()) > 0


def test_nngk_class_probabilities_match_eq3_loop():
    torch.manual_seed(4)
    n, d, k, sigma, num_classes = 12, 3, 4, 0.8, 5  # classes 3 and 4 have no centre
    centres = torch.randn(n, d)
    centre_labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 2, 1])
    log_w = 0.5 * torch.randn(n)
    queries = torch.randn(6, d)

    probs = nngk_class_probabilities(queries, centres, centre_labels, log_w, sigma, k, num_classes)

    c, q = rows(centres.to(F64)), rows(queries.to(F64))
    expected = torch.zeros(len(q), num_classes, dtype=F64)
    for a in range(len(q)):
        nearest = sorted(range(n), key=lambda j: float(sq_dist(q[a], c[j])))[:k]
        den = sum(
            math.exp(float(log_w[j])) * math.exp(-float(sq_dist(q[a], c[j])) / (2 * sigma**2))
            for j in nearest
        )
        for j in nearest:
            w_f = math.exp(float(log_w[j])) * math.exp(-float(sq_dist(q[a], c[j])) / (2 * sigma**2))
            expected[a, int(centre_labels[j])] += w_f / den

    assert probs.shape == (len(q), num_classes)
    close(probs, expected, 1e-5)
    close(probs.sum(dim=1), torch.ones(len(q)), 1e-5)
    zeros = expected == 0
    assert zeros[:, :3].any()  # a present class missing from some neighbourhood
    assert (probs[zeros] == 0).all()
    assert (probs[:, 3:] == 0).all()


def test_nngk_refresh_interval_is_its_update_interval():
    loss = losses.build_loss("nngk", {"update_interval": 3}, num_train=20, num_classes=4, dims=4)
    assert loss.refresh_interval == 3
    assert losses.loss_defaults("nngk")["update_interval"] == 10
    assert isinstance(loss, NNGKLoss)


def test_nngk_epoch_stats_are_mean_distance_and_kernel_to_the_neighbour_centres():
    torch.manual_seed(0)
    loss = losses.build_loss("nngk", {"k": 3, "sigma": 1.5}, num_train=8, dims=2)
    centres = torch.randn(8, 2, dtype=torch.float64)
    loss.refresh(centres, torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    x = torch.randn(4, 2, dtype=torch.float64)
    idx = torch.tensor([0, 2, 5, 7])
    loss(x, torch.tensor([0, 0, 1, 1]), idx)
    dists = [
        math.dist(x[b].tolist(), centres[j].tolist())
        for b in range(4)
        for j in loss.neighbours[idx[b]].tolist()
    ]
    stats = loss.epoch_stats()
    assert stats["mean_centre_distance"] == pytest.approx(sum(dists) / len(dists))
    kernels = [math.exp(-(d**2) / (2 * 1.5**2)) for d in dists]
    assert stats["mean_kernel_value"] == pytest.approx(sum(kernels) / len(kernels))
    assert loss.epoch_stats() == {}  # reset for the next epoch
