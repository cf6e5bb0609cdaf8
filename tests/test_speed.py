"""The speed benchmarks time equal maths: the per-example loop the NNGK step is quoted against
gives the loss's value and gradients; the evaluator-at-scale rows measure each evaluator in a
process of its own."""

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from bench.evaluation.metrics import evaluate
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


def test_the_skewed_set_has_one_class_of_a_tenth_and_small_ones():
    from bench.speed.scale import skewed_set

    x, labels = skewed_set(1000, 6, seed=2)
    counts = np.bincount(labels)
    assert x.shape == (1000, 6) and x.dtype == np.float32 and counts[0] == 100
    assert counts[1:-1].min() >= 2 and counts[1:].max() <= 12  # the last may be cut short
    assert (labels[:100] == 0).sum() < 30  # in a random order, not first
    again, same = skewed_set(1000, 6, seed=2)
    assert np.array_equal(again, x) and np.array_equal(same, labels)


def test_the_scale_rows_run_each_evaluator_in_a_process_of_its_own():
    """Ours and PML agree on MAP@R; the ratios are the rows' own seconds; each peak is the
    child's, above what it held when it started."""
    from bench.speed.scale import scale_benchmark, skewed_set

    (row,) = scale_benchmark((300,), dims=8, allowance_gb=2.0, timeout=300)
    assert (row["items"], row["dims"], row["largest class"]) == (300, 8, 30)
    assert not any(str(row[k]).startswith("failed") for k in ("ours", "faiss 8-NN", "PML"))
    assert row["MAP@R ours"] == pytest.approx(row["MAP@R PML"], rel=1e-9)
    x, labels = skewed_set(300, 8)
    assert row["MAP@R ours"] == pytest.approx(
        evaluate(x, labels, clustering=False).metrics["map@r"]
    )
    seconds = {k: float(row[k].split(" s,")[0]) for k in ("ours", "faiss 8-NN", "PML")}
    assert row["ours / faiss"] == pytest.approx(seconds["ours"] / seconds["faiss 8-NN"], rel=1e-3)
    assert row["PML / ours"] == pytest.approx(seconds["PML"] / seconds["ours"], rel=1e-3)
    # The peak is at least the memory at the start; it is printed rounded to 0.01 GB (a start
    # of 0.0526 GB beside a printed peak of 0.05 GB failed the strict comparison).
    peak = float(row["ours"].split("peak ")[1].split(" GB")[0])
    assert 0 < row["ours at start GB"] <= peak + 0.005


def test_the_bare_faiss_row_times_a_sample_of_queries_and_scales_to_every_item(monkeypatch):
    """Above FAISS_QUERIES items, the yardstick searches a seeded sample of queries among all
    items and its seconds are scaled by items / queries; the cell says so."""
    import bench.util.knn
    from bench.speed import scale

    searched = []
    monkeypatch.setattr(scale, "FAISS_QUERIES", 50)
    monkeypatch.setattr(bench.util.knn, "search", lambda base, q, k: searched.append((base, q, k)))
    clock = iter([10.0, 12.0])
    monkeypatch.setattr(scale.time, "perf_counter", lambda: next(clock))
    found = []
    scale._measure(SimpleNamespace(put=found.append), "faiss", 200, 8, 0.1, None)
    (base, queries, k), row = searched[0], found[0]
    assert base.shape == (200, 8) and k == 9 and len(queries) == 50
    assert len({q.tobytes() for q in queries} & {b.tobytes() for b in base}) == 50
    assert row["timed queries"] == 50 and row["seconds"] == pytest.approx(2.0 * 200 / 50)
    assert scale._cell(row).endswith("(50 queries timed, scaled)")
    whole = {"items": 40, "timed queries": 40, "seconds": 1.0, "peak_gb": 1.0, "start_gb": 0.5}
    assert "scaled" not in scale._cell(whole)


def test_a_failed_or_stopped_evaluator_row_says_why(monkeypatch):
    from bench.speed import scale

    def refused(x, labels):
        raise MemoryError("Unable to allocate 7.45 GiB for an array\nsecond line")

    monkeypatch.setitem(scale.EVALUATORS, "pml", refused)
    found = []
    monkeypatch.setattr(scale, "skewed_set", lambda *args: (np.zeros((4, 2), np.float32), None))
    scale._measure(SimpleNamespace(put=found.append), "pml", 4, 2, 0.1, None)
    assert found[0]["error"] == "MemoryError: Unable to allocate 7.45 GiB for an array"
    row = scale.scale_row(4, 2, 0.1, {"ours": {"seconds": 2.0, "peak_gb": 1.0, "start_gb": 0.5},
                                      "faiss": {"seconds": 1.0, "peak_gb": 1.0, "start_gb": 0.5},
                                      "pml": found[0]})  # fmt: skip
    assert row["PML"] == "failed: MemoryError: Unable to allocate 7.45 GiB for an array"
    assert row["ours / faiss"] == 2.0 and np.isnan(row["PML / ours"])
    stopped = scale.measured("faiss", 300, 8, 0.1, None, timeout=0.001)
    assert stopped == {"error": "stopped after 0 s (--scale-timeout)"}


def test_the_crossover_rows_time_faiss_and_the_ranking_side_by_side():
    from bench.speed.scale import crossover_benchmark

    rows = crossover_benchmark(n=300, dims=8, rs=(16, 64, 300), queries=32, repeats=1)
    assert [row["R"] for row in rows] == [16, 64]  # R below the set's size only
    for row in rows:
        ratio = row["faiss top-(R+1) ms"] / (row["faiss top-9 ms"] + row["ranking ms"])
        assert row["faiss / (top-9 + ranking)"] == pytest.approx(ratio) and ratio > 0


def test_speed_runs_only_the_benchmarks_it_is_given():
    from click.testing import CliRunner

    from bench.cli import main
    from bench.cli.speed import chosen_benchmarks

    assert chosen_benchmarks("start, crossover") == ["crossover", "start"]  # in their order
    out = CliRunner().invoke(main, ["speed", "--only", "crossover", "--crossover-items", "300"])
    assert out.exit_code == 0, out.output
    assert "large-class ranking vs faiss top-k" in out.output and "lifted" not in out.output
    for bad, message in (
        (["--only", "crossover,fast"], "--only 'crossover,fast': expected some of nngk-step"),
        (["--scale-sizes", "10"], "--scale-sizes '10': each size needs at least 20 items"),
    ):
        out = CliRunner().invoke(main, ["speed", *bad])
        assert out.exit_code == 1 and message in out.output


def test_a_long_evaluator_row_says_it_started_and_how_long_it_has_run(monkeypatch):
    from bench.speed import scale

    monkeypatch.setattr(scale, "PROGRESS_S", 0.0)
    lines = []
    row = scale.measured("faiss", 300, 8, 0.1, None, timeout=300, say=lines.append)
    assert "seconds" in row and lines[0] == "faiss: 300 x 8, started"
    assert all(line.startswith("faiss: 300 x 8, ") for line in lines)


def test_a_loaders_rate_leaves_out_its_first_batch():
    from bench.speed.loader import rate_after_first

    now = [0.0]

    def batches():  # the first batch takes 5 s (the workers' start), then 0.5 s a batch of 4
        for delay in (5.0, 0.5, 0.5, 0.5, 0.5):
            now[0] += delay
            yield [0] * 4

    first, rate = rate_after_first(batches(), len, 4, torch.device("cpu"), lambda: now[0])
    assert (first, rate) == (5.0, 12 / 1.5)  # 3 batches of 4 after the first, the 5th not read
    with pytest.raises(ValueError, match="at least 2 batches"):
        rate_after_first(iter([[0]]), len, 1, torch.device("cpu"), lambda: now[0])
    with pytest.raises(ValueError, match="gave 1 batches of the 4"):
        rate_after_first(iter([[0]]), len, 4, torch.device("cpu"), lambda: now[0])


def test_a_loader_reads_whole_rounds_of_its_workers_after_the_first_batch():
    from bench.speed.loader import batches_read

    assert [batches_read(10, w) for w in (0, 1, 2, 8, 12)] == [10, 10, 9, 9, 13]
    assert [batches_read(4, w) for w in (0, 2, 8)] == [4, 3, 9]


def test_a_loaders_rate_counts_whole_rounds_of_its_workers():
    """Two workers take 1 s a batch of 4 each (8 images/s): the second worker's first batch is
    made beside the first, so it arrives with it, and counting it over the first round's time
    would give 12/s."""
    from bench.speed.loader import rate_after_first

    now = [0.0]

    def batches():
        for delay in (5.0, 0.0, 1.0, 0.0, 1.0, 0.0):
            now[0] += delay
            yield [0] * 4

    cpu, clock = torch.device("cpu"), lambda: now[0]
    for limit in (4, 5, 6):  # one round (batches 2-3), then two (batches 2-5)
        now[0] = 0.0
        assert rate_after_first(batches(), len, limit, cpu, clock, workers=2) == (5.0, 8.0)
    with pytest.raises(ValueError, match="at least 9 batches .*; got 4"):
        rate_after_first(batches(), len, 4, cpu, clock, workers=8)
    with pytest.raises(ValueError, match="gave 6 batches of the 9"):  # the loader ran out
        rate_after_first(batches(), len, 9, cpu, clock, workers=8)


def test_the_loss_batch_is_bounded_by_the_bank_it_is_drawn_from():
    import inspect

    from click.testing import CliRunner

    from bench.cli import main
    from bench.cli.speed import MAX_BATCH
    from bench.speed.nngk_step import nngk_step_benchmark

    bank = inspect.signature(nngk_step_benchmark).parameters["bank"].default
    assert MAX_BATCH == bank
    out = CliRunner().invoke(main, ["speed", "--batch", str(bank + 1)])
    # Was a RuntimeError's traceback: "The size of tensor a (5000) must match ... (100000)".
    assert out.exit_code == 2 and f"is not in the range 2<=x<={bank}" in out.output


def test_the_device_search_row_times_the_harness_against_a_bare_torch_search():
    from bench.speed.device_search import device_search_benchmark

    (row,) = device_search_benchmark([1500], "cpu")
    assert row["items"] == 1500 and row["harness / bare"] > 0
    assert row["harness / bare"] == pytest.approx(row["harness_s"] / row["bare_torch_s"])
    # Two searches written apart agree on what they find.
    assert row["R@1 harness"] == pytest.approx(row["R@1 bare"], abs=1e-9)
    assert row["MAP@R harness"] == pytest.approx(row["MAP@R bare"], abs=1e-6)


def test_the_device_kmeans_row_times_faiss_against_torch_with_both_nmis(monkeypatch):
    import bench.evaluation.clustering as clustering
    from bench.speed.device_search import device_kmeans_benchmark
    from bench.speed.scale import skewed_set

    calls = []
    real = clustering.torch_kmeans_assign
    monkeypatch.setattr(
        clustering, "torch_kmeans_assign", lambda *a, **k: calls.append(a[2]) or real(*a, **k)
    )
    (row,) = device_kmeans_benchmark([1500], "cpu")
    assert calls == [torch.device("cpu")] * 2  # the warm-up, then the timed run
    x, labels = skewed_set(1500, 128)
    assert row["clusters"] == len(np.unique(labels))
    assert row["NMI faiss"] == clustering.nmi(x, labels)
    assert row["NMI torch"] == clustering.nmi(x, labels, "cpu")
    assert row["faiss / torch"] == pytest.approx(row["faiss (CPU)_s"] / row["torch (cpu)_s"])


def test_the_device_health_row_times_the_cpus_health_against_torchs(monkeypatch):
    import bench.evaluation.health as health
    from bench.speed.device_search import RAW_DIMS, device_health_benchmark, largest_difference
    from bench.speed.scale import skewed_set

    made, spectrum = [], health.variance_spectrum

    def recorded(x):
        made.append(torch.is_tensor(x))  # a tensor: torch's parts, on the device
        return spectrum(x)

    monkeypatch.setattr(health, "variance_spectrum", recorded)
    (row,) = device_health_benchmark([300], "cpu")
    # torch's warm-up, the CPU's timed run (numpy's), then torch's
    assert made == [True, False, True]
    assert row["items"] == 300 and row["dims"] == RAW_DIMS == 3072
    assert row["CPU / torch"] == pytest.approx(row["CPU_s"] / row["torch (cpu)_s"])
    assert row["largest relative difference"] < 1e-9
    x, labels = skewed_set(300, RAW_DIMS)
    cpu = health.embedding_health(x, labels)
    shifted = {**cpu, "health_pca_first_share": cpu["health_pca_first_share"] * 1.5}
    assert largest_difference(cpu, shifted) == pytest.approx(0.5)
    assert largest_difference(cpu, cpu) == 0.0


def test_the_search_parts_rows_time_each_part_of_one_chunk():
    from click.testing import CliRunner

    from bench.cli import main
    from bench.speed.device_search import WIDER, search_parts_benchmark
    from bench.util.arrays import chunk_rows

    cells = 2**16  # chunks of 21 and 2 queries (and 8x that), as 2**26 gives at 1,000,000
    rows = search_parts_benchmark([3000, 30000], "cpu", repeats=1, cells=cells)
    parts = ["distances", "top-k, k 12", "top-k, k 300", "ordering 300", "scores of 300"]
    candidates = ["top-k, k 12, in two stages", "sorting whole rows"]
    candidates += ["distances, one addmm (before)"]
    assert [row["part"] for row in rows[:13]] == parts + parts + candidates
    assert rows[13]["part"] == "distances" and rows[15]["part"] == "top-k, k 3000"
    for row, chunk in zip(rows, ([cells] * 5 + [cells * WIDER] * 8) * 2, strict=True):
        assert row["queries a chunk"] == min(row["items"], chunk_rows(row["items"], chunk))
        assert row["ms a chunk"] > 0
        assert row["s a search"] == pytest.approx(row["ms a chunk"] * row["chunks a search"] / 1e3)
    chunks = {row["part"]: row["chunks a search"] for row in rows[:5]}  # 3000 by 21
    assert chunks == {
        "distances": 143,
        "top-k, k 12": 129,
        "top-k, k 300": 15,
        "ordering 300": 15,
        "scores of 300": 15,
    }  # 90 % and 10 % of the queries
    out = CliRunner().invoke(main, ["speed", "--only", "search-parts", "--scale-sizes", "500"])
    assert out.exit_code == 0 and "a chunk's parts" in out.output and "ordering 50" in out.output


def test_the_distances_timed_as_before_are_the_searchs_distances():
    from bench.speed.device_search import addmm_distances
    from bench.util.torch_knn import TorchSearch

    x = torch.randn(300, 128, generator=torch.Generator().manual_seed(0))
    search = TorchSearch(x, "cpu")
    before, now = addmm_distances(search, x[:40]), search.distances(x[:40])
    torch.testing.assert_close(before, now, rtol=1e-5, atol=1e-4)
    assert before.diagonal().max() < 1e-3  # its own: 0 but for cancellation near 2 x 128


@pytest.mark.parametrize("n, m, k", [(5, 3000, 12), (3, 2048, 7), (4, 500, 12), (2, 3000, 2000)])
def test_a_two_stage_top_k_finds_what_top_k_finds(n, m, k):
    from bench.speed.device_search import two_stage_topk

    dist = torch.rand(n, m, generator=torch.Generator().manual_seed(m))
    dist[0, :5] = 0.0  # ties
    dist[1, 1] = float("inf")  # a query's own column, left out
    values, idx = two_stage_topk(dist, k, segment=1024)
    expected = torch.topk(dist, k, dim=1, largest=False).values
    assert torch.equal(values.sort(1).values, expected)
    assert torch.equal(dist.gather(1, idx), values)  # each value at its column
    assert all(len(set(row.tolist())) == k for row in idx)  # k columns, none twice
    rows = slice(1, None)  # no ties there: the same columns as top-k
    same = torch.topk(dist[rows], k, dim=1, largest=False).indices.sort(1).values
    assert torch.equal(idx[rows].sort(1).values, same)


def test_the_train_step_rows_time_the_harness_against_a_bare_loop(tmp_path, monkeypatch):
    import os

    from bench.speed.train_step import train_step_benchmark
    from bench.train import loaders as train_loaders
    from bench.train.step_rates import step_rates

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "kept"))
    loaders = []
    real = train_loaders.split_loader
    spy = lambda *a, **k: loaders.append(a) or real(*a, **k)  # noqa: E731
    monkeypatch.setattr(train_loaders, "split_loader", spy)
    args = ("small_cnn", 8, ["fp32", "bf16"], "cpu", 2, tmp_path, 24, 16, 1)
    rows = train_step_benchmark(step_rates, *args)
    assert len(loaders) == 2 and all(a[2] == 1 for a in loaders)  # the run's workers, as given
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    for row in rows:
        assert row["harness img/s"] > 0 and row["bare img/s"] > 0
        assert row["harness / bare"] == pytest.approx(row["harness img/s"] / row["bare img/s"])
        assert row["first batch ms"] > 0
        assert row["harness / bare, less that wait"] > row["harness / bare"]
    assert rows[0]["bare / bare fp32"] == 1.0
    assert os.environ["NNGK_CACHE"] == str(tmp_path / "kept")  # as it was
    assert (tmp_path / "cache").is_dir() and not (tmp_path / "kept").exists()


def test_the_first_batch_timer_times_the_wait_and_passes_every_batch_on():
    import time

    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    from bench.train.step_rates import FirstBatchTimer

    class SlowFirst(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            time.sleep(0.3 if i == 0 else 0.1)
            return torch.tensor(i)

    loader = DataLoader(
        SlowFirst(), batch_sampler=BatchSampler(SequentialSampler(range(6)), 2, False)
    )
    timed = FirstBatchTimer(loader)
    assert timed.batch_sampler is loader.batch_sampler and len(timed) == 3
    assert [b.tolist() for b in timed] == [[0, 1], [2, 3], [4, 5]]
    assert 0.4 <= timed.waited < 0.75  # the first batch (0.4 s), not the epoch (0.8 s)
    assert list(FirstBatchTimer(DataLoader([], batch_size=2))) == []


def test_the_bare_loop_steps_with_the_runs_optimizer(monkeypatch):
    from bench.train import step_rates
    from bench.train.presets import make_configs

    made = []
    real = step_rates.optimizer_class
    monkeypatch.setattr(
        step_rates, "optimizer_class", lambda cfg: made.append(real(cfg)) or made[-1]
    )
    settings = dict(backbone="small_cnn", pretrained="none", batch_size=4, resize=16, crop=16)
    (cfg,) = make_configs("cub", "nngk", (8,), {}, optimizer="adamw", **settings)
    assert step_rates.bare_rate(cfg, torch.device("cpu"), steps=2) > 0
    assert made == [(torch.optim.AdamW, {"lr": cfg.lr, "weight_decay": cfg.weight_decay})]


def test_a_train_step_pair_that_is_not_backbone_batch_is_refused():
    from click.testing import CliRunner

    from bench.cli import main

    for bad in ("googlenet", "googlenet:1", "googlenet:x"):
        out = CliRunner().invoke(main, ["speed", "--only", "start", "--train-step", bad])
        assert out.exit_code == 1 and "expected BACKBONE:BATCH" in out.output
    out = CliRunner().invoke(
        main, ["speed", "--only", "start", "--train-step", "a:2", "--precisions", "fp8"]
    )
    assert out.exit_code == 1 and "--precisions 'fp8'" in out.output


@pytest.mark.parametrize(
    "args, says",
    [
        (["--device", "foo"], "Error: unknown --device 'foo'; expected cpu, cuda or cuda:N"),
        (["--threads", "-1"], "'--threads': -1 is not in the range x>=1"),
    ],
)
def test_a_device_or_thread_count_torch_refuses_is_one_line(args, says):
    # Before: torch's RuntimeError tracebacks (set_num_threads, torch.device).
    from click.testing import CliRunner

    from bench.cli import main

    out = CliRunner().invoke(main, ["speed", "--only", "lifted", *args])
    assert out.exit_code in (1, 2) and says in out.output and "Traceback" not in out.output


def test_speed_uses_the_cpus_the_process_may_use_by_default(monkeypatch):
    # A container or a job's share of a machine: os.cpu_count() counts all of the machine's.
    from click.testing import CliRunner

    from bench.cli import main

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    before = torch.get_num_threads()
    try:
        args = ["speed", "--only", "search-parts", "--scale-sizes", "300"]
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0 and out.output.startswith("device cpu, 1 CPU threads")
        out = CliRunner().invoke(main, [*args, "--threads", "2"])
        assert out.exit_code == 0 and out.output.startswith("device cpu, 2 CPU threads")
    finally:
        torch.set_num_threads(before)


def test_the_run_wall_row_sets_a_commands_seconds_against_its_epochs(tmp_path):
    from bench.cli.run_wall import run_wall_rows
    from bench.speed.run_wall import run_wall_row

    def invoke(args):  # two runs of 2 and 1 epochs, then a baseline without a history
        results = Path(args[args.index("--results") + 1])
        for name, seconds in (("a", [0.5, 0.25]), ("b", [0.25]), ("baseline", None)):
            (results / name).mkdir(parents=True)
            if seconds:
                pd.DataFrame({"epoch": range(1, len(seconds) + 1), "seconds": seconds}).to_csv(
                    results / name / "history.csv", index=False
                )

    row = run_wall_row(invoke, ["--dataset", "x"], tmp_path / "r")
    assert (row["runs"], row["epochs"], row["sum of epochs_s"]) == (2, 3, 1.0)
    assert row["wall / epochs"] == pytest.approx(row["wall_s"] / 1.0)
    assert (row["first epoch_s"], row["median epoch_s"]) == (0.5, 0.25)
    options = "--dataset glyphs:classes=12,instances=12 --dims 8 --epochs 2 --batch-size 16"
    real = run_wall_rows(options.split(), "cpu")
    assert real["runs"] == 1 and real["epochs"] == 2 and real["wall / epochs"] > 1
    parts = real["before_s"] + real["between_s"] + real["after_s"] + real["sum of epochs_s"]
    assert parts == pytest.approx(real["wall_s"]) and min(real["before_s"], real["after_s"]) > 0
    assert np.isnan(row["before_s"])  # two runs (and no epoch logged): not one run's parts


def test_a_runs_seconds_outside_its_epochs_fall_before_between_and_after():
    from bench.speed.run_wall import outside_epochs

    # Started at 10, epochs of 2 s and 3 s logged at 15 and 18.5, done at 20.
    found = outside_epochs([15.0, 18.5], [2.0, 3.0], start=10.0, stop=20.0)
    assert found == pytest.approx({"before_s": 3.0, "between_s": 0.5, "after_s": 1.5})


def test_a_runs_seconds_before_and_after_its_epochs_are_named_by_its_log_lines():
    from bench.speed.run_wall import phases

    # Started at 10; logged "load" at 11 and "cache" at 12; epochs of 2 s and 3 s logged at 15
    # and 18.5, "test" at 19; done at 20.
    lines = [(11.0, "load"), (12.0, "cache"), (15.0, "r: epoch 1/2 x"), (18.5, "r: epoch 2/2 x")]
    lines += [(19.0, "r-s0: test it"), (19.5, "NNGK: a warning")]
    found = phases(lines, [15.0, 18.5], [2.0, 3.0], start=10.0, stop=20.0)
    assert [(p["when"], p["from the line"]) for p in found] == [
        ("before", "(the command's start)"),
        ("before", "load"),
        ("before", "cache"),
        ("after", "r: epoch 2/2 x"),
        ("after", "test it"),
        ("after", "NNGK: a warning"),
    ]  # fmt: skip  (a run's id, hyphenated, left out)
    assert [p["seconds"] for p in found] == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    assert phases(lines, [15.0, 18.5], [2.0], start=10.0, stop=20.0) == []  # not one run's


def test_the_run_wall_row_writes_its_own_folder_of_jpegs(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from bench.cli import main
    from bench.cli.run_wall import run_wall_rows

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "user-cache"))
    options = "--backbone small_cnn --pretrained none --resize 32 --crop 32 --dims 8 --epochs 2"
    options += " --batch-size 16"
    row = run_wall_rows(options.split(), "cpu", images=240)  # 6 classes of 40
    assert row["runs"] == 1 and row["epochs"] == 2 and row["wall / epochs"] > 1
    spans = {p["when"]: 0.0 for p in row["phases"]}
    for p in row["phases"]:
        spans[p["when"]] += p["seconds"]
    assert spans == pytest.approx({"before": row["before_s"], "after": row["after_s"]})
    assert any(p["from the line"].startswith("caching 240 images") for p in row["phases"])
    assert not (tmp_path / "user-cache").exists()  # its images cached in its own folder
    for wrong in (
        ["--run-wall-images", "240"],
        ["--run-wall", "--dataset glyphs", "--run-wall-images", "240"],
    ):
        out = CliRunner().invoke(main, ["speed", "--only", "start", *wrong])
        assert out.exit_code == 1 and "--run-wall" in out.output.splitlines()[-1], out.output


@pytest.mark.parametrize(
    "options, named",
    [
        ("--epochs 0", "--epochs"),
        ("--no-such-option 1", "--no-such-option"),
        ("--dataset glyphs --device cpu", "--device"),
    ],
)
def test_wrong_run_wall_options_are_refused_before_any_row_runs(options, named, monkeypatch):
    # Before: found by `run` itself, after every other row had taken its minutes.
    from click.testing import CliRunner

    from bench.cli import main

    ran = []
    monkeypatch.setattr("bench.speed.report_runs.report_benchmark", lambda *a, **k: ran.append(1))
    out = CliRunner().invoke(main, ["speed", "--only", "report", "--run-wall", options])
    assert out.exit_code == 1 and not ran, out.output
    assert named in out.output.splitlines()[-1] and "--run-wall" in out.output, out.output
