"""Retrieval galleries: query images each followed by their nearest test images, framed green
where of the query's class and red where not; two runs side by side on the same queries; for
the pairs protocol, the hardest false accepts and false rejects at the run's threshold.

The figures are pure functions of images, embeddings and labels; `visualize_galleries`
(`nngk-bench visualize`) and `gallery_files` (the report) read them from run folders.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.evaluation.pair_scoring import pairs_of
from bench.evaluation.pairs import pair_distances
from bench.evaluation.retrieval import query_scores
from bench.protocols import VERIFICATION, get_protocol
from bench.report.gallery_images import (
    DISAGREE_FRAME,
    QUERY_FRAME,
    ImagesOf,
    answer_cells,
    grid_figure,
    has_images,
    load_splits,
    pair_cells,
    query_cell,
    run_config,
    saved_test,
    split_images,
)
from bench.report.run_files import DamagedRun
from bench.report.runs import embedded_trained_runs
from bench.runs import store
from bench.util.atomic import atomic_write_bytes
from bench.util.knn import search
from bench.util.names import safe_name
from bench.util.torch_knn import nearest_others

SPACER = 0.25  # width of the gap between two blocks of images, in cells
REPORT_QUERIES, REPORT_K = 10, 5

# ---------------------------------------------------------------- which queries, which answers


def fixed_order(labels: np.ndarray, dataset: str) -> np.ndarray:
    """Every test item in an order that depends only on the labels and the data set's name:
    one item of each class first (classes in a shuffled order), then the rest shuffled."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(zlib.crc32(dataset.encode()))  # hash() differs per process
    items = rng.permutation(len(labels))
    _, first = np.unique(labels[items], return_index=True)  # each class's first in that order
    first = items[first[rng.permutation(len(first))]]
    return np.concatenate([first, items[~np.isin(items, first)]]).astype(np.int64)


def fixed_queries(labels: np.ndarray, n: int, dataset_name: str) -> np.ndarray:
    """n test queries, the same for every run of the data set: one per class where n allows."""
    return fixed_order(labels, dataset_name)[:n]


def lowest(ap: np.ndarray, n: int) -> np.ndarray:
    """The n queries of lowest AP (NaN: none), lowest first, ties in query order."""
    order = np.argsort(np.where(np.isnan(ap), np.inf, ap), kind="stable")
    return order[: min(n, int((~np.isnan(ap)).sum()))]


def retrieved(embeddings: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """(queries, k): each query's k nearest test items (squared L2), the query itself left out
    by index, as the evaluator's kNN leaves it out."""
    k = min(k, len(embeddings) - 1)
    queries = np.asarray(queries, dtype=np.int64)
    _, idx = search(embeddings, np.asarray(embeddings)[queries], k + 1)
    rows = [found[found != q][:k] for q, found in zip(queries, idx, strict=True)]
    return np.stack(rows).astype(np.int64) if rows else np.zeros((0, k), np.int64)


def frame_decisions(labels: np.ndarray, queries: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Green (True) where a retrieved item has its query's label, red (False) where not."""
    labels = np.asarray(labels)
    return labels[found] == labels[np.asarray(queries)][:, None]


def top1_correct(embeddings: np.ndarray, labels: np.ndarray, device=None) -> np.ndarray:
    """Whether each test item's nearest other item has its label (searched by faiss on the
    CPU, or by torch on `device`: `torch_knn.search_device`)."""
    labels = np.asarray(labels)
    return labels[nearest_others(embeddings, 1, device)[:, 0]] == labels


def compare_queries(
    labels: np.ndarray, right_a: np.ndarray, right_b: np.ndarray, n: int, dataset: str
) -> np.ndarray:
    """n queries in the data set's fixed order: first those where exactly one run's top-1 is
    right, then the fixed queries where the two agree."""
    order = fixed_order(labels, dataset)
    differ = right_a[order] != right_b[order]
    chosen = order[differ][:n]
    return np.concatenate([chosen, order[~differ][: n - len(chosen)]])


def pair_errors(
    distances: np.ndarray, same: np.ndarray, threshold: float, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(false accepts: different-class pairs at most `threshold` apart, closest first; false
    rejects: same-class pairs farther apart, farthest first), n of each at most."""
    d = np.asarray(distances, dtype=np.float64)
    same = np.asarray(same).astype(bool)
    accepts = np.flatnonzero(~same & (d <= threshold))
    rejects = np.flatnonzero(same & (d > threshold))
    accepts = accepts[np.argsort(d[accepts], kind="stable")]
    rejects = rejects[np.argsort(-d[rejects], kind="stable")]
    return accepts[:n], rejects[:n]


def scored_pairs(labels: np.ndarray) -> np.ndarray:
    """The test pairs (i, j, same) the run was scored on, each unordered pair once."""
    pairs = pairs_of(np.asarray(labels), 4)
    ends = np.sort(pairs[:, :2], axis=1)
    _, first = np.unique(ends, axis=0, return_index=True)
    return pairs[np.sort(first)]


# ---------------------------------------------------------------- figures


# What a gallery's frames mean, said above it.
FRAMES = (
    "each row: a query (blue frame), then its {k} nearest test images, framed green where of "
    "the query's class, red where of another"
)


def gallery_figure(
    images_of: ImagesOf,
    embeddings: np.ndarray,
    labels: np.ndarray,
    queries: np.ndarray,
    k: int = 5,
    title: str = "",
    names: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> bytes:
    """PNG: a row per query, the query image then its top-k retrieved test images (itself
    left out), green-framed where of its class, red where not; `notes`: a line per query."""
    found = retrieved(embeddings, queries, k)
    right = frame_decisions(labels, queries, found)
    rows = [
        [
            query_cell(images_of, labels, names, int(q), notes[row] if notes else ""),
            *answer_cells(images_of, labels, names, found[row], right[row]),
        ]
        for row, q in enumerate(queries)
    ]
    return grid_figure(
        rows, f"{title}\n{FRAMES.format(k=found.shape[1])}".strip(), [1.0] * (found.shape[1] + 1)
    )


def side_by_side_figure(
    images_of: ImagesOf,
    embeddings: tuple[np.ndarray, np.ndarray],
    labels: np.ndarray,
    queries: np.ndarray,
    k: int = 5,
    run_names: tuple[str, str] = ("A", "B"),
    names: Sequence[str] = (),
) -> bytes:
    """PNG: per query, run A's top-k (left) and run B's (right); an orange query frame and a
    note where one run's top-1 is right and the other's wrong."""
    found = [retrieved(emb, queries, k) for emb in embeddings]
    right = [frame_decisions(labels, queries, f) for f in found]
    notes = {(True, False): "top-1 right: left only", (False, True): "top-1 right: right only"}
    rows = []
    for row, q in enumerate(queries):
        note = notes.get((bool(right[0][row, 0]), bool(right[1][row, 0])), "")
        frame = DISAGREE_FRAME if note else QUERY_FRAME
        left, other = (
            answer_cells(images_of, labels, names, f[row], r[row])
            for f, r in zip(found, right, strict=True)
        )
        rows.append(
            [query_cell(images_of, labels, names, int(q), note, frame), *left, None, *other]
        )
    n = found[0].shape[1]
    title = f"left: {run_names[0]}\nright: {run_names[1]}"
    return grid_figure(rows, title, [1.0] * (n + 1) + [SPACER] + [1.0] * n)


def pair_errors_figure(
    images_of: ImagesOf,
    pairs: np.ndarray,
    distances: np.ndarray,
    labels: np.ndarray,
    threshold: float,
    n: int = 8,
    names: Sequence[str] = (),
    title: str = "",
) -> bytes:
    """PNG: the hardest false accepts (left: different classes, closest first) and false
    rejects (right: same class, farthest first) among `pairs` (i, j, same) at `threshold`."""
    accepts, rejects = pair_errors(distances, pairs[:, 2] == 1, threshold, n)
    rows = []
    for row in range(max(len(accepts), len(rejects), 1)):
        halves = [
            pair_cells(images_of, labels, names, pairs[part[row]], distances[part[row]])
            if row < len(part)
            else [None, None]
            for part in (accepts, rejects)
        ]
        rows.append([*halves[0], None, *halves[1]])
    heading = (
        f"{title}\nleft: {len(accepts)} hardest false accepts (other class, d <= {threshold:.3g})"
        f"\nright: {len(rejects)} hardest false rejects (same class, d > {threshold:.3g})"
    )
    return grid_figure(rows, heading.strip(), [1.0, 1.0, SPACER, 1.0, 1.0])


# ---------------------------------------------------------------- from run folders


def check_comparable(run_dir: Path, other_dir: Path) -> None:
    """A one-line ValueError unless the two runs are of the same data set and protocol."""
    a, b = run_config(run_dir), run_config(other_dir)
    if (a.dataset, a.protocol) != (b.dataset, b.protocol):
        raise ValueError(
            f"cannot compare {Path(run_dir).name} ({a.dataset}, {a.protocol} protocol) with "
            f"{Path(other_dir).name} ({b.dataset}, {b.protocol} protocol): the galleries of two "
            "runs need the same data set and protocol"
        )


def worst_figure(
    images_of: ImagesOf,
    emb: np.ndarray,
    labels: np.ndarray,
    n: int,
    k: int,
    title: str,
    names: Sequence[str],
    device=None,
) -> bytes:
    """The gallery of the n queries of lowest AP@R, each with its AP@R (every query's AP@R
    searched by faiss on the CPU, or by torch on `device`)."""
    ap = query_scores(emb, labels, device=device)["map@r"]
    worst = lowest(ap, n)
    notes = [f"AP@R {ap[q]:.2f}" for q in worst]
    return gallery_figure(images_of, emb, labels, worst, k, title, names, notes)


def comparison_figure(
    images_of: ImagesOf,
    embs: tuple[np.ndarray, np.ndarray],
    labels: np.ndarray,
    n: int,
    k: int,
    dataset: str,
    run_names: tuple[str, str],
    names: Sequence[str],
    device=None,
) -> bytes:
    """Two runs side by side on n fixed queries, their top-1 disagreements first (every test
    item's top-1 searched by faiss on the CPU, or by torch on `device`)."""
    right = [top1_correct(emb, labels, device) for emb in embs]
    queries = compare_queries(labels, *right, n, dataset)
    return side_by_side_figure(images_of, embs, labels, queries, k, run_names, names)


def pair_errors_of(
    images_of: ImagesOf,
    run_dir: Path,
    emb: np.ndarray,
    labels: np.ndarray,
    n: int,
    names: Sequence[str],
) -> bytes:
    """pair-errors.png of a pairs-protocol run: its seen test pairs (the unseen classes' test
    embeddings are not saved) at the threshold chosen on validation (metrics.json)."""
    threshold = float(store.read_metrics(run_dir)["threshold"])
    pairs = scored_pairs(labels)
    title = f"{Path(run_dir).name}: seen test pairs at the validation threshold"
    return pair_errors_figure(
        images_of, pairs, pair_distances(emb, pairs), labels, threshold, n, names, title
    )


def visualize_galleries(
    run_dir: Path, out: Path, compare: Path | None = None, queries: int = 10, k: int = 5,
    device=None,
) -> list[Path]:  # fmt: skip
    """gallery-fixed.png, gallery-worst.png, gallery-vs-<other run>.png (with `compare`) and,
    for a pairs-protocol run, pair-errors.png; a one-line ValueError for a run on feature
    vectors (no images) or a comparison of runs of different data. `device`: where the worst
    queries and the top-1 disagreements are searched (None: faiss on the CPU)."""
    if compare is not None:
        check_comparable(run_dir, compare)
    cfg = run_config(run_dir)
    data = load_splits(cfg)
    emb, labels = saved_test(run_dir, data.test)
    show, names, name = split_images(data.test), data.class_names, Path(run_dir).name
    fixed = fixed_queries(labels, queries, cfg.dataset)
    files = {
        "gallery-fixed.png": gallery_figure(
            show, emb, labels, fixed, k, f"{name}: fixed queries", names
        ),
        "gallery-worst.png": worst_figure(
            show, emb, labels, queries, k, f"{name}: worst queries (AP@R)", names, device
        ),
    }
    if compare is not None:
        other, _ = saved_test(compare, data.test)
        files[f"gallery-vs-{Path(compare).name}.png"] = comparison_figure(
            show, (emb, other), labels, queries, k, cfg.dataset, (name, Path(compare).name), names,
            device,
        )  # fmt: skip
    if get_protocol(cfg.protocol).evaluates(VERIFICATION):
        files["pair-errors.png"] = pair_errors_of(show, run_dir, emb, labels, queries, names)
    for file_name, data_bytes in files.items():
        atomic_write_bytes(Path(out) / file_name, data_bytes)
    return [Path(out) / file_name for file_name in files]


def best_runs(part: pd.DataFrame) -> pd.DataFrame:
    """Of each loss, the trained run with saved test embeddings of the highest test MAP@R, then
    the lowest seed."""
    runs = embedded_trained_runs(part)
    order = ["loss", "map@r", "seed", "run"]
    runs = runs.sort_values(order, ascending=[True, False, True, True], kind="stable")
    return runs.drop_duplicates("loss")


def gallery_files(runs: pd.DataFrame, name: str) -> dict[str, bytes]:
    """<table>-gallery-<loss>.png: the best run of each loss on the data set's fixed queries;
    the data set is loaded once. Nothing for feature vectors (no images), nor for a run whose
    saved test labels are not the split's as loaded now."""
    best = best_runs(runs)
    if not len(best) or not has_images(str(best["dataset"].iloc[0])):
        return {}
    cfg = run_config(best["path"].iloc[0])
    data = load_splits(cfg)
    labels = np.asarray(data.test.labels)
    queries = fixed_queries(labels, REPORT_QUERIES, cfg.dataset)
    show, files = split_images(data.test), {}
    for _, run in best.iterrows():
        try:
            emb, _ = saved_test(run["path"], data.test)
        except DamagedRun:
            raise
        except ValueError:  # the data changed since the run: its gallery would lie
            continue
        title = f"{run['name']}, d{run['dims']}, seed {run['seed']} (MAP@R {run['map@r']:.3f})"
        files[f"{name}-gallery-{safe_name(str(run['loss']))}.png"] = gallery_figure(
            show, emb, labels, queries, REPORT_K, f"{title}: fixed queries", data.class_names
        )
    return files
