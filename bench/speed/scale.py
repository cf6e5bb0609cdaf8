"""The evaluator at scale (issue 26): R@K and MAP@R of a large skewed set against PML's
AccuracyCalculator and against the bare faiss search that bounds any exact evaluator, and where
ExactRanking starts to beat faiss's top-k selection for a large class.

Each of the three is measured in a process of its own (multiprocessing's 'spawn': a fresh
interpreter), so that its peak memory (its resident set's high-water mark) is its own and not
what another left behind; the process makes its data itself (the same seeded set), and may be
held to an allowance of memory beyond what it holds when it starts (RLIMIT_DATA), so that an
evaluator that asks for more fails with its own error instead of calling the machine's OOM
killer.
"""

from __future__ import annotations

import importlib
import multiprocessing
import queue
import resource
import time
import traceback
from collections.abc import Callable, Sequence

import numpy as np

SMALL_SIZES = (2, 12)  # the other classes: 2 to 12 items, as Stanford Online Products'
SIGNAL = 0.5  # class centres' scale against unit noise: retrieval well above chance, not easy
GB = 1e9
# The bare faiss search times at most this many queries (a seeded sample) against every item
# and scales the time to all n: each query costs the same (a scan of the whole base), and a
# million queries would cost as long again as the evaluator it bounds.
FAISS_QUERIES = 100_000
PROGRESS_S = 60.0  # a line each minute while an evaluator runs


def skewed_set(n: int, dims: int, share: float = 0.1, seed: int = 0):
    """n points in `dims` dimensions, one class holding `share` of them and the rest in classes
    of 2 to 12 items, in a random order; each point its class centre (scaled by SIGNAL) plus
    unit Gaussian noise, in float32, made a block at a time."""
    rng = np.random.default_rng(seed)
    big = int(share * n)
    sizes = rng.integers(SMALL_SIZES[0], SMALL_SIZES[1] + 1, max(1, (n - big) // 2))
    small = np.repeat(np.arange(len(sizes)), sizes)[: n - big]
    labels = rng.permutation(np.concatenate([np.zeros(big, np.int64), 1 + small]))
    centres = SIGNAL * rng.standard_normal((int(labels.max()) + 1, dims), dtype=np.float32)
    x = np.empty((n, dims), np.float32)
    for start in range(0, n, 65536):
        block = slice(start, start + 65536)
        x[block] = rng.standard_normal((len(x[block]), dims), dtype=np.float32)
        x[block] += centres[labels[block]]
    return x, labels


def ours(x: np.ndarray, labels: np.ndarray, device: object = None) -> dict:
    """R@1 and MAP@R as the evaluator computes them, on `device` (None: as a run on the CPU)."""
    from bench.evaluation.retrieval import query_scores

    scores = query_scores(x, labels, device=device)
    return {"R@1": float(scores["recall@1"].mean()), "MAP@R": float(np.nanmean(scores["map@r"]))}


def pml(x: np.ndarray, labels: np.ndarray) -> dict:
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    include = ("precision_at_1", "mean_average_precision_at_r")
    calc = AccuracyCalculator(include=include, k="max_bin_count", device=torch.device("cpu"))
    found = calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(labels))
    return {"MAP@R": float(found["mean_average_precision_at_r"])}


def bare_faiss(x: np.ndarray, labels: np.ndarray) -> dict:
    """The least an exact evaluator must do: the 8 nearest neighbours of every item, timed on
    at most FAISS_QUERIES of them (a seeded sample, each searched among all items)."""
    from bench.util.knn import search

    rows = np.arange(len(x))
    if len(x) > FAISS_QUERIES:
        rows = np.sort(np.random.default_rng(1).choice(len(x), FAISS_QUERIES, replace=False))
    search(x, x[rows], 9)
    return {"timed queries": len(rows)}


EVALUATORS: dict[str, Callable[[np.ndarray, np.ndarray], dict]] = {
    "ours": ours,
    "pml": pml,
    "faiss": bare_faiss,
}
# What each imports, before its clock starts.
IMPORTS = {
    "ours": ("bench.evaluation.retrieval",),
    "pml": ("torch", "pytorch_metric_learning.utils.accuracy_calculator"),
    "faiss": ("bench.util.knn",),
}


def _status_kb(field: str) -> int:
    """A field of /proc/self/status in kB (Linux), 0 where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _peak_gb() -> float:
    """The process's peak resident memory: VmHWM, its own address space's since exec. (Linux's
    ru_maxrss keeps the parent's from before the exec of 'spawn': a child of a parent that
    held 0.8 GB reported 0.8 GB.)"""
    return (_status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024 / GB


def _measure(results, name: str, n: int, dims: int, share: float, allowance_gb: float | None):
    """In the child: make the set, cap the memory it may add, time the evaluator."""
    row: dict = {"items": n}
    limits = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        for module in IMPORTS[name]:
            importlib.import_module(module)
        x, labels = skewed_set(n, dims, share)
        row["start_gb"] = _status_kb("VmRSS") * 1024 / GB
        if allowance_gb is not None:
            cap = _status_kb("VmData") * 1024 + int(allowance_gb * GB)
            resource.setrlimit(resource.RLIMIT_DATA, (cap, limits[1]))
        start = time.perf_counter()
        row.update(EVALUATORS[name](x, labels))
        row["seconds"] = (time.perf_counter() - start) * n / row.get("timed queries", n)
    except Exception as err:  # a failure is the row's result (PML's may be)
        lines = traceback.format_exception_only(type(err), err)[-1].strip().splitlines()
        row["error"] = lines[0] if lines else type(err).__name__
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, limits)  # the queue's thread needs a stack
    row["peak_gb"] = _peak_gb()
    results.put(row)


def measured(
    name: str,
    n: int,
    dims: int,
    share: float,
    allowance_gb: float | None,
    timeout: float,
    say: Callable[[str], object] = lambda line: None,
) -> dict:
    """One evaluator's row, measured in a fresh process: seconds, peak resident memory (GB,
    data included), resident memory before it ran (the data and imports), or `error`. `say`
    is handed a line when it starts and each PROGRESS_S seconds after."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_measure, args=(results, name, n, dims, share, allowance_gb))
    say(f"{name}: {n:,} x {dims}, started")
    child.start()
    started = time.monotonic()
    deadline, told = started + timeout, started
    row = None
    while row is None and time.monotonic() < deadline:
        try:
            row = results.get(timeout=min(1.0, max(deadline - time.monotonic(), 0.0)))
        except queue.Empty:
            if not child.is_alive():
                break
        if time.monotonic() - told >= PROGRESS_S:
            told = time.monotonic()
            say(f"{name}: {n:,} x {dims}, {told - started:.0f} s so far")
    if row is None and child.is_alive():
        child.kill()
        row = {"error": f"stopped after {timeout:.0f} s (--scale-timeout)"}
    child.join()
    if row is None and child.exitcode is not None and child.exitcode < 0:
        row = {"error": f"killed by signal {-child.exitcode} (the OOM killer's is 9)"}
    elif row is None:  # OpenBLAS exits when it cannot allocate its buffers
        row = {"error": f"the process ended with exit code {child.exitcode} and no result"}
    return row


def scale_benchmark(
    sizes: Sequence[int] = (20_000,),
    dims: int = 128,
    share: float = 0.1,
    allowance_gb: float | None = 8.0,
    timeout: float = 3600.0,
    say: Callable[[str], object] = lambda line: None,
) -> list[dict]:
    """Per size: our evaluator (R@K and MAP@R), PML's AccuracyCalculator (the same two) and
    faiss's 8 nearest neighbours of every item, each in its own process; ours against both.
    `say` is handed progress lines (see `measured`)."""
    table = []
    for n in sizes:
        rows = {
            name: measured(name, n, dims, share, allowance_gb, timeout, say) for name in EVALUATORS
        }
        table.append(scale_row(n, dims, share, rows))
    return table


def _cell(row: dict) -> str:
    if "error" in row:
        return f"failed: {row['error']}"
    grew = row["peak_gb"] - row["start_gb"]
    text = f"{row['seconds']:.4g} s, peak {row['peak_gb']:.2f} GB (+{grew:.2f})"
    timed = row.get("timed queries")
    if timed is not None and timed < row.get("items", timed):
        text += f" ({row['timed queries']:,} queries timed, scaled)"
    return text


def _ratio(top: dict, bottom: dict) -> float:
    if "seconds" in top and "seconds" in bottom:
        return top["seconds"] / bottom["seconds"]
    return float("nan")


def scale_row(n: int, dims: int, share: float, rows: dict[str, dict]) -> dict:
    """One printed row: each evaluator's seconds and peak resident memory, and in brackets how
    far that peak rose above the process with its data and imports (or its error), and the
    ratios."""
    ours_row, pml_row, faiss_row = rows["ours"], rows["pml"], rows["faiss"]
    return {
        "items": n,
        "dims": dims,
        "largest class": int(share * n),
        "ours at start GB": ours_row.get("start_gb", float("nan")),
        "ours": _cell(ours_row),
        "faiss 8-NN": _cell(faiss_row),
        "PML": _cell(pml_row),
        "ours / faiss": _ratio(ours_row, faiss_row),
        "PML / ours": _ratio(pml_row, ours_row),
        "R@1": ours_row.get("R@1", float("nan")),
        "MAP@R ours": ours_row.get("MAP@R", float("nan")),
        "MAP@R PML": pml_row.get("MAP@R", float("nan")),
    }


def crossover_benchmark(
    n: int = 20_000,
    dims: int = 128,
    rs: Sequence[int] | None = None,
    queries: int = 4096,
    repeats: int = 3,
) -> list[dict]:
    """Milliseconds per query of faiss's top-(R + 1) search against faiss's top-9 (what a
    large class's query still pays, for its R@K) plus ExactRanking's top R, side by side
    (interleaved, the median of `repeats`) on random points, for R of 256 to 4,096 and a tenth
    of the items (the scale rows' large class): above the R where the ratio passes 1, ranking
    a class's queries is cheaper even where every query of a chunk is one of them. faiss
    searches `queries` at once (its own block of 4,096 by default: fewer make it slower per
    query), the ranking its chunks (of LARGE_CELLS cells), as the evaluator does."""
    from bench.evaluation.retrieval import LARGE_CELLS
    from bench.util.arrays import chunk_rows
    from bench.util.knn import ExactRanking, FlatSearch

    x = np.random.default_rng(0).standard_normal((n, dims), dtype=np.float32)
    q = x[: min(queries, n)]
    search, ranking = FlatSearch(x, n), ExactRanking(x)

    def faiss_ms(k: int) -> float:
        start = time.perf_counter()
        search(q, k + 1)
        return (time.perf_counter() - start) * 1e3 / len(q)

    def ranking_ms(r: int) -> float:
        rows = chunk_rows(n + 6 * r, LARGE_CELLS)  # the evaluator's chunks for a largest R
        start = time.perf_counter()
        for a in range(0, len(q), rows):
            b = min(a + rows, len(q))
            ranking(q[a:b], np.full(b - a, r), np.arange(a, b))
        return (time.perf_counter() - start) * 1e3 / len(q)

    faiss_ms(8), ranking_ms(8)  # warm-up: the index, the threads
    rs = sorted({256, 512, 1024, 2048, 4096, n // 10}) if rs is None else rs
    table = []
    for r in (r for r in rs if 0 < r < n):
        times = [(faiss_ms(r), faiss_ms(8), ranking_ms(r)) for _ in range(repeats)]
        top, nine, ranked = np.median(times, axis=0)
        table.append(
            {
                "items": n,
                "R": r,
                "faiss top-(R+1) ms": top,
                "faiss top-9 ms": nine,
                "ranking ms": ranked,
                "faiss / (top-9 + ranking)": top / (nine + ranked),
            }
        )
    return table
