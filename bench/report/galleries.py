"""Retrieval galleries: query images each followed by their nearest test images, framed green
where of the query's class and red where not; two runs side by side on the same queries; for
the pairs protocol, the hardest false accepts and false rejects at the run's threshold.

The figures are pure functions of images, embeddings and labels; `visualize_galleries`
(`nngk-bench visualize`) and `gallery_files` (the report) read them from run folders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.evaluation.pairs import pair_distances
from bench.protocols import VERIFICATION, get_protocol
from bench.report.gallery_images import (
    DISAGREE_FRAME,
    QUERY_FRAME,
    ImagesOf,
    answer_cells,
    credited,
    grid_figure,
    has_images,
    load_splits,
    pair_cells,
    query_cell,
    run_config,
    saved_test,
    split_images,
)
from bench.report.gallery_queries import (
    compare_queries,
    fixed_queries,
    frame_decisions,
    gallery_items,
    lowest,
    pair_errors,
    query_ap,
    retrieved,
    scored_pairs,
    top1_correct,
)
from bench.report.run_files import DamagedRun
from bench.report.runs import embedded_trained_runs
from bench.runs import store
from bench.util.atomic import atomic_write_bytes
from bench.util.names import safe_name

SPACER = 0.25  # width of the gap between two blocks of images, in cells
REPORT_QUERIES, REPORT_K = 10, 5

# ---------------------------------------------------------------- figures


# What a gallery's frames mean, said above it.
FRAMES = (
    "each row: a query (blue frame), then its {k} nearest {searched} images, framed green where of "
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
    gallery: np.ndarray | None = None,
) -> bytes:
    """PNG: a row per query, the query image then its top-k retrieved test images (itself
    left out; with a `gallery`, of its items), green-framed where of its class, red where not;
    `notes`: a line per query."""
    found = retrieved(embeddings, queries, k, gallery)
    right = frame_decisions(labels, queries, found)
    searched = "test" if gallery is None else "gallery"
    rows = [
        [
            query_cell(images_of, labels, names, int(q), notes[row] if notes else ""),
            *answer_cells(images_of, labels, names, found[row], right[row]),
        ]
        for row, q in enumerate(queries)
    ]
    return grid_figure(
        rows,
        f"{title}\n{FRAMES.format(k=found.shape[1], searched=searched)}".strip(),
        [1.0] * (found.shape[1] + 1),
    )


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
    gallery: np.ndarray | None = None,
) -> bytes:
    """The gallery of the n queries of lowest AP@R, each with its AP@R (every query's AP@R
    searched by faiss on the CPU, or by torch on `device`; with a `gallery`, as the run scored
    its queries: in the gallery's items)."""
    ap = query_ap(emb, labels, device, gallery)
    worst = lowest(ap, n)
    notes = [f"AP@R {ap[q]:.2f}" for q in worst]
    return gallery_figure(images_of, emb, labels, worst, k, title, names, notes, gallery)


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
    gallery: np.ndarray | None = None,
    credits: str = "",
) -> bytes:
    """PNG: two runs side by side on n fixed queries, their top-1 disagreements first (every
    test item's top-1 searched by faiss on the CPU, or by torch on `device`; with a `gallery`,
    the queries' in it): per query, run A's top-k (left) and run B's (right); an orange query
    frame and a note where one run's top-1 is right and the other's wrong; `credits` under the
    title."""
    queries = compare_queries(
        labels, *(top1_correct(emb, labels, device, gallery) for emb in embs), n, dataset, gallery
    )
    found = [retrieved(emb, queries, k, gallery) for emb in embs]
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
    shown = found[0].shape[1]
    title = "\n".join(filter(None, (f"left: {run_names[0]}", f"right: {run_names[1]}", credits)))
    return grid_figure(rows, title, [1.0] * (shown + 1) + [SPACER] + [1.0] * shown)


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
    device=None, only_compare: bool = False,
) -> list[Path]:  # fmt: skip
    """gallery-fixed.png, gallery-worst.png, gallery-vs-<other run>.png (with `compare`) and,
    for a pairs-protocol run, pair-errors.png; with `only_compare`, the comparison alone (what
    `visualize --compare` asks for). A one-line ValueError for a run on feature vectors (no
    images) or a comparison of runs of different data. `device`: where the worst queries and
    the top-1 disagreements are searched (None: faiss on the CPU)."""
    if compare is not None:
        check_comparable(run_dir, compare)
    cfg = run_config(run_dir)
    data = load_splits(cfg)
    emb, labels = saved_test(run_dir, data.test)
    show, names, name = split_images(data.test), data.class_names, Path(run_dir).name
    gallery = gallery_items(data.test)
    # Each figure drawn only where asked for: the worst queries search every test item.
    draws = {} if only_compare else {
        "gallery-fixed.png": lambda: gallery_figure(
            show, emb, labels, fixed_queries(labels, queries, cfg.dataset, gallery), k,
            credited(f"{name}: fixed queries", data), names, gallery=gallery,
        ),
        "gallery-worst.png": lambda: worst_figure(
            show, emb, labels, queries, k, credited(f"{name}: worst queries (AP@R)", data),
            names, device, gallery,
        ),
    }  # fmt: skip
    if compare is not None:
        other, _ = saved_test(compare, data.test)  # a damaged run refused before any drawing
        draws[f"gallery-vs-{Path(compare).name}.png"] = lambda: comparison_figure(
            show, (emb, other), labels, queries, k, cfg.dataset,
            (name, Path(compare).name), names, device, gallery, data.credits,
        )  # fmt: skip
    if get_protocol(cfg.protocol).evaluates(VERIFICATION) and not only_compare:
        draws["pair-errors.png"] = lambda: pair_errors_of(
            show, run_dir, emb, labels, queries, names
        )
    for file_name, draw in draws.items():
        atomic_write_bytes(Path(out) / file_name, draw())
    return [Path(out) / file_name for file_name in draws]


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
    labels, gallery = np.asarray(data.test.labels), gallery_items(data.test)
    queries = fixed_queries(labels, REPORT_QUERIES, cfg.dataset, gallery)
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
            show,
            emb,
            labels,
            queries,
            REPORT_K,
            credited(f"{title}: fixed queries", data),
            data.class_names,
            gallery=gallery,
        )
    return files
