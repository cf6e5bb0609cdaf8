"""The speed benchmarks time equal maths: the per-example loop the NNGK step is quoted against
gives the loss's value and gradients."""

import pytest
import torch

from bench.speed.nngk_step import nngk_case, per_example_nngk_loss, step_times


@pytest.mark.parametrize("dims", [8, 96])
def test_the_per_example_loop_is_the_nngk_loss(dims):
    loss, x, labels, idx = nngk_case(batch=12, dims=dims, bank=300, k=20, device="cpu")
    with torch.no_grad():
        loss.log_weights.normal_(0, 0.5)
    ours = loss(x, labels, idx)
    (gx, gw) = torch.autograd.grad(ours, (x, loss.log_weights))
    bank = (loss.centres, loss.centre_labels, loss.log_weights, loss.sigma)
    loop = per_example_nngk_loss(x, labels, loss.neighbours[idx], *bank)
    (lx, lw) = torch.autograd.grad(loop, (x, loss.log_weights))
    torch.testing.assert_close(ours, loop, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, lx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw, lw, rtol=1e-4, atol=1e-6)


def test_step_times_cover_the_three_steps():
    times = step_times(batch=8, dims=16, bank=100, k=10, device="cpu")
    assert set(times) == {"nngk", "loop", "softmax"} and all(t > 0 for t in times.values())


def test_the_loader_benchmark_reads_a_data_sets_images(tmp_path):
    from bench.cli.speed import loader_paths
    from tests.fixtures.folder import make_folder

    root = make_folder(tmp_path, classes=3, per_class=4)
    paths = loader_paths(f"folder:{root}", None, 5, tmp_path)
    assert len(paths) == 5 and all(p.startswith(str(root)) for p in paths)


def test_the_refresh_benchmark_times_an_nngk_refresh_and_an_inference_pass():
    from bench.speed.refresh import refresh_benchmark

    (row,) = refresh_benchmark(images=45, k=100)
    assert (row["images"], row["k"], row["index"]) == (45, 44, "exact")
    assert row["refresh / inference"] == row["refresh_s"] / row["inference_s"] > 0


def test_the_bank_search_benchmark_compares_ivf_lists_with_exact_ones():
    from bench.speed.refresh import ann_benchmark, bank_embeddings
    from bench.util.knn import ivf_knn, knn

    (row,) = ann_benchmark(n=800, dims=8, k=10, nprobe=2)
    _, exact = knn(bank_embeddings(800, 8), 10)
    _, found = ivf_knn(bank_embeddings(800, 8), 10, nprobe=2)
    share = sum(len(set(f) & set(e)) for f, e in zip(found.tolist(), exact.tolist(), strict=True))
    assert (row["items"], row["k"], row["nlist"]) == (800, 10, 20)
    assert row["recall@k"] == share / exact.size and row["exact_s"] > 0 and row["ivf_s"] > 0


def test_a_large_banks_exact_time_is_scaled_from_a_sample_of_queries(monkeypatch):
    import bench.speed.refresh as refresh
    from bench.util.knn import ivf_knn, knn

    monkeypatch.setattr(refresh, "EXACT_ALL_UP_TO", 500)
    (row,) = refresh.ann_benchmark(n=800, dims=8, k=10, nprobe=2, sample=800)
    _, exact = knn(refresh.bank_embeddings(800, 8), 10)
    _, found = ivf_knn(refresh.bank_embeddings(800, 8), 10, nprobe=2)
    share = sum(len(set(f) & set(e)) for f, e in zip(found.tolist(), exact.tolist(), strict=True))
    assert row["exact queries"] == "800, scaled" and row["recall@k"] == share / exact.size
    (half,) = refresh.ann_benchmark(n=800, dims=8, k=10, nprobe=2, sample=400)
    assert half["exact queries"] == "400, scaled" and 0 < half["recall@k"] <= 1
