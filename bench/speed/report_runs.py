"""`report` over many runs against reading their metrics.json files alone (issue 26).

`write_runs` generates finished run folders of today's format, as a learning-rate sweep over
several losses, sizes and seeds leaves them, without training: each trained run's test
embeddings are class centres plus noise (small: `queries` x its size), scored by the evaluator,
with the per-query scores the trainer saves beside them; two untrained baselines stand beside
them. `report_benchmark` times a report over them (the function is handed in: `bench.report` is
on this package's floor) against reading their metrics.json files.

The data set is one of feature vectors (`features:`), so that the report draws no image gallery
and loads no data: what is timed is what grows with the runs.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Sequence
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd

from bench.data.names import FEATURES_PREFIX
from bench.evaluation.health import embedding_health
from bench.evaluation.metrics import evaluate
from bench.runs import store
from bench.speed.benchmarks import timed
from bench.util.atomic import atomic_save_npz, atomic_write_json, atomic_write_text

DATASET = f"{FEATURES_PREFIX}sweep"
LOSSES = (
    "contrastive",
    "triplet",
    "npair",
    "lifted",
    "nca",
    "nngk",
    "softmax",
    "proxy-anchor",
    "multi-similarity",
    "arcface",
)
DIMS = (16, 64)
LRS = (0.1, 0.03, 0.01, 0.003, 0.001)
CLASSES = 10
BASELINES = (("raw inputs", "none", 32), ("untrained resnet18 (imagenet)", "resnet18", 512))
Report = Callable[[Path, Path], object]  # (results, out): bench.report.write.write_report
Load = Callable[[Path], object]  # (results): bench.report.runs.load_runs, the report's reading


def sweep(count: int) -> list[tuple[str, int, float, int]]:
    """(loss, dims, lr, seed) of `count` trained runs: every loss, size and learning rate with
    seed 0, then every one with seed 1, and so on (any first runs cover the most rows)."""
    rows = len(LOSSES) * len(DIMS) * len(LRS)
    grid = product(range(math.ceil(count / rows)), LOSSES, DIMS, LRS)
    return [(loss, dims, lr, seed) for seed, loss, dims, lr in grid][:count]


def test_split(queries: int) -> np.ndarray:
    """The test labels every run shares: `queries` items of CLASSES classes."""
    return np.arange(queries) % CLASSES


def noisy_embeddings(labels: np.ndarray, dims: int, spread: float, seed: int) -> np.ndarray:
    """Unit class centres (the same for every run of a size) plus Gaussian noise of `spread`."""
    centres = np.random.default_rng(dims).normal(size=(CLASSES, dims)) / math.sqrt(dims)
    noise = np.random.default_rng(seed).normal(0, spread / math.sqrt(dims), (len(labels), dims))
    return (centres[labels] + noise).astype(np.float32)


def run_metrics(emb: np.ndarray, labels: np.ndarray, seed: int) -> tuple[dict, dict]:
    """metrics.json's measured part (test and training metrics, health) and the per-query
    scores, from the one search the trainer makes; the training split is the test split
    again, and NMI is R@1's stand-in (k-means would take most of the time to write)."""
    metrics, scores = evaluate(emb, labels, clustering=False)
    metrics.update(nmi=metrics["recall@1"], nmi_best_of_5=metrics["recall@1"])
    metrics.update(embedding_health(emb, labels, seed=seed))
    metrics.update({f"train_{k}": v for k, v in metrics.items() if not k.startswith("health")})
    return metrics, scores


def write_run(results: Path, name: str, emb: np.ndarray, labels: np.ndarray, record: dict) -> Path:
    """A finished run folder as the trainer leaves it (but its checkpoint, which no report
    reads): config.json, history.csv, both splits' embeddings, the test queries' scores, and
    metrics.json last."""
    run_dir = Path(results) / name
    seed = int(record["seed"])
    config = {k: record[k] for k in ("dataset", "protocol", "loss", "dims", "seed", "lr")}
    atomic_write_json(run_dir / store.CONFIG, {**config, "run_id": name})
    history = pd.DataFrame({"epoch": [1, 2], "train_loss": [1.0, 0.5], "seconds": [0.1, 0.1]})
    atomic_write_text(run_dir / store.HISTORY, history.to_csv(index=False))
    atomic_save_npz(run_dir / store.EMBEDDINGS, embeddings=emb, labels=labels)
    atomic_save_npz(run_dir / store.TRAIN_EMBEDDINGS, embeddings=emb, labels=labels)
    measured, scores = run_metrics(emb, labels, seed)
    store.save_query_scores(run_dir, scores, store.EMBEDDINGS)
    atomic_write_json(run_dir / store.METRICS, {**measured, **record})
    return run_dir


def summary(loss: str, dims: int, lr: float, seed: int) -> dict:
    """What the trainer records beside the metrics (`run_summary`), for a generated run."""
    return {
        "dataset": DATASET,
        "protocol": "metric",
        "loss": loss,
        "miner": None,
        "dims": dims,
        "seed": seed,
        "lr": lr,
        "epochs": 2,
        "batch_size": 64,
        "backbone": "resnet18",
        "pretrained": "imagenet",
        "weights": "imagenet",
        "embedding": "fc",
        "freeze_backbone": False,
        "train_per_class": 0,
        "val_split": "images",
        "preset": "",
        "data_location": "",
        "data_fingerprint": "",
        "best_epoch": 2,
        "val_score": 0.5,
        "optimizer": "SGD (momentum 0.9, weight decay 0.0005)",
        "sampler": "16 classes x 4",
        "input_size": "512",
        "loss_params": {},
        "untrained_network": {"map@r": 0.1, "recall@1": 0.3},
        "warnings": [],
    }


def write_runs(results: Path, count: int, queries: int = 100) -> list[Path]:
    """`count` finished run folders in `results`: the two baselines and `count` - 2 trained
    runs of `sweep` (a loss's noise grows with its place in LOSSES and its distance from lr
    0.01, so rows differ), each with `queries` test items."""
    if count < 3 or queries < 2 * CLASSES:
        raise ValueError(f"need 3 runs or more and {2 * CLASSES} queries or more, got {count}")
    labels = test_split(queries)
    folders = []
    for name, backbone, dims in BASELINES:
        record = {**summary("untrained", dims, 0.01, 0), "features": name, "backbone": backbone}
        emb = noisy_embeddings(labels, dims, 3.0, seed=dims)
        folders.append(write_run(results, f"sweep-untrained-{backbone}", emb, labels, record))
    for i, (loss, dims, lr, seed) in enumerate(sweep(count - len(BASELINES))):
        spread = 1.0 + 0.1 * LOSSES.index(loss) + 0.2 * abs(math.log10(lr / 0.01))
        emb = noisy_embeddings(labels, dims, spread, seed=1000 + i)
        name = f"sweep-{loss}-d{dims}-lr{lr:g}-s{seed}"
        folders.append(write_run(results, name, emb, labels, summary(loss, dims, lr, seed)))
    return folders


def read_all_metrics(folders: Sequence[Path]) -> list[dict]:
    """Every folder's metrics.json, parsed: the least any report must do."""
    return [json.loads((Path(f) / store.METRICS).read_text()) for f in folders]


def report_benchmark(
    report: Report, load: Load, count: int = 1000, queries: int = 100, repeats: int = 3
) -> list[dict]:
    """Seconds of one `report(results, out)` over `write_runs(count)`, and over its first
    fifth (at least 3 runs: the same rows, fewer seeds), each against reading their
    metrics.json files, and the report's own reading of the runs, `load(results)` (both the
    best of `repeats`, on files the system has cached); and what one more run costs each,
    between the two. What a report costs beyond reading is mostly fixed (figures and tables
    grow with rows, not runs); what grows with the runs is the last row's. The runs are
    generated in a temporary folder, removed after."""
    sizes = sorted({max(3, count // 5), count})
    with tempfile.TemporaryDirectory(prefix="nngk-report-runs-", ignore_cleanup_errors=True) as tmp:
        rows = [timed_report(report, load, Path(tmp) / str(n), n, queries, repeats) for n in sizes]
    return [*rows, added_run_row(*rows)] if len(rows) == 2 else rows


def timed_report(
    report: Report, load: Load, folder: Path, runs: int, queries: int, repeats: int
) -> dict:
    """One row of the benchmark: `report` over `write_runs(runs)` in `folder`, and its reading
    of them, against reading their metrics.json files."""
    folders = write_runs(folder / "results", runs, queries)
    read_s = best_time(lambda: read_all_metrics(folders), repeats)
    load_s = best_time(lambda: load(folder / "results"), repeats)
    report_s = best_time(lambda: report(folder / "results", folder / "report"), 1)
    table_rows = len({run[:3] for run in sweep(runs - len(BASELINES))})
    return {
        "runs": runs,
        "rows": table_rows,
        "queries": queries,
        "metrics.json_s": read_s,
        "reading_s": load_s,
        "reading / metrics.json": load_s / read_s,
        "report_s": report_s,
        "report / metrics.json": report_s / read_s,
    }


def added_run_row(fewer: dict, more: dict) -> dict:
    """Seconds one more run adds to each, between two rows of the benchmark."""
    added = more["runs"] - fewer["runs"]
    read_s, load_s, report_s = (
        (more[key] - fewer[key]) / added for key in ("metrics.json_s", "reading_s", "report_s")
    )
    return {
        "runs": f"each of {fewer['runs']}-{more['runs']}",
        "rows": more["rows"],
        "queries": more["queries"],
        "metrics.json_s": read_s,
        "reading_s": load_s,
        "reading / metrics.json": load_s / read_s if read_s > 0 else float("nan"),
        "report_s": report_s,
        "report / metrics.json": report_s / read_s if read_s > 0 else float("nan"),
    }


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """The least wall time of `repeats` calls."""
    return min(timed(fn)[0] for _ in range(max(repeats, 1)))
