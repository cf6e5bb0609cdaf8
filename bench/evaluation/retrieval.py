"""The common evaluator's retrieval metrics: Recall@K, R-Precision and MAP@R from exact faiss kNN
search.

Queries are searched and scored in chunks (`query_scores`, `gallery_scores`): a chunk's search
asks for as many neighbours as its own queries need (the largest R among them, at least the
largest K), and only each query's scores are kept, so memory is set by the chunk and the
largest class, never by N x N or N x (largest class). The Ks are the data set's own
(`bench.data.recall_ks`), R@1/2/4/8 where it declares none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from bench.evaluation.device_retrieval import device_scores
from bench.protocols import DEFAULT_RECALL_KS
from bench.util.knn import (
    GPU_MAX_K,
    QUERY_BLOCK,
    ExactRanking,
    FlatSearch,
    drop_self_ids,
    query_chunks,
)
from bench.util.torch_knn import nearest_others

RECALL_KS = DEFAULT_RECALL_KS
R_PRECISION = "r_precision"  # Musgrave et al. 2020, beside MAP@R
MPREC_MAX_K = 50  # Sharma et al. 2015 reports mprec@K for K = 1..50
MPREC_KS = (1, 10, 50)  # the ones a run's metrics.json keeps
PROGRESS_FROM = 50_000  # queries: a progress bar while searching this many
# Queries per chunk: faiss's own query block, so that chunks get the distances one search of
# every query gets (bench.util.knn.FlatSearch) ...
CHUNK_ROWS = QUERY_BLOCK
# ... unless rows x neighbours searched would pass this (~300 MB with faiss's buffers: a
# class of more than 2,048 items makes chunks of fewer queries).
CHUNK_CELLS = 2**23
# Queries with more matches than this get their AP@R from ExactRanking (see docs/metrics.md):
# every faiss search then asks for at most 2,048 neighbours, so chunks stay whole 4,096-query
# blocks and on a GPU within faiss-gpu's k-selection.
LARGE_R = GPU_MAX_K - 1
# ExactRanking's chunks: rows x (base items + 6 x the largest R) 4-byte cells (128 MB): the
# distances, then each row's ranked indices and AP@R terms. More rows a chunk read the base
# fewer times (at a million items with R = 100,000: 20 rows, 5,000 reads of the base).
LARGE_CELLS = 2**25


def recall_at_k(neighbour_labels: np.ndarray, labels: np.ndarray, ks=RECALL_KS) -> dict:
    """Fraction of queries with at least one same-label item among their K nearest neighbours."""
    return {
        f"recall@{k}": float(hits.mean())
        for k, hits in query_hits(neighbour_labels, labels, ks).items()
    }


def query_hits(neighbour_labels: np.ndarray, labels: np.ndarray, ks=RECALL_KS) -> dict:
    """recall@K of each query (1.0 or 0.0): whether a same-label item is among its K nearest."""
    return hits_at(neighbour_labels == labels[:, None], ks)


def hits_at(same: np.ndarray, ks: Sequence[int] = RECALL_KS) -> dict[int, np.ndarray]:
    """recall@K of each row of `same` (whether each neighbour, nearest first, is a match)."""
    return {k: same[:, :k].any(axis=1).astype(np.float64) for k in ks}


def map_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> float:
    """MAP@R (Musgrave et al. 2020): R = the number of other items of the query's class."""
    return float(np.nanmean(average_precision_at_r(neighbour_labels, labels)))


def average_precision_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AP@R of each query; NaN for a query whose class has no other item (R = 0)."""
    classes, counts = np.unique(labels, return_counts=True)
    r = counts[np.searchsorted(classes, labels)] - 1
    max_r = int(r.max())
    if neighbour_labels.shape[1] < max_r:
        raise ValueError(
            f"MAP@R needs {max_r} neighbours per query, got {neighbour_labels.shape[1]}"
        )
    return ap_at_r(neighbour_labels[:, :max_r] == labels[:, None], r, max_r)


def ap_at_r(same: np.ndarray, r: np.ndarray, width: int) -> np.ndarray:
    """AP@R of each row of `same` (at least r.max() columns) with its own R; NaN where R = 0.

    The sum runs over `width` >= r.max() columns, zeros past each row's R: numpy adds in pairs,
    so the length of the row it sums decides the last bit, and a chunk sums over the whole
    set's largest R, as one evaluation of every query does."""
    w = int(r.max(initial=0))
    ranks = np.arange(1, w + 1)
    hits = (same[:, :w] & (ranks[None, :] <= r[:, None])).astype(np.float64)
    terms = np.zeros((len(r), width))
    precision = terms[:, :w]
    np.cumsum(hits, axis=1, out=precision)
    precision /= ranks
    precision *= hits
    ap = np.full(len(r), np.nan)
    valid = r > 0
    ap[valid] = terms.sum(axis=1)[valid] / r[valid]
    return ap


def r_precision(same: np.ndarray, r: np.ndarray) -> np.ndarray:
    """R-Precision of each row of `same` (at least r.max() columns): its share of matches among
    its R nearest (Musgrave et al. 2020); NaN where R = 0. A count over R, so exact."""
    w = int(r.max(initial=0))
    hits = same[:, :w] & (np.arange(1, w + 1)[None, :] <= r[:, None])
    precision = np.full(len(r), np.nan)
    valid = r > 0
    precision[valid] = hits.sum(axis=1)[valid] / r[valid]
    return precision


def score_names(ks: Sequence[int]) -> list[str]:
    """The per-query scores' names, in order: R@K for each K, R-Precision, MAP@R."""
    return [*(f"recall@{k}" for k in ks), R_PRECISION, "map@r"]


def chunk_rows(searched: int) -> int:
    """Queries per chunk when each is searched for `searched` neighbours."""
    return max(1, min(CHUNK_ROWS, CHUNK_CELLS // max(searched, 1)))


def _codes(*label_sets: np.ndarray) -> list[np.ndarray]:
    """Each set's labels as small integers, shared by all sets (equal labels, equal codes)."""
    arrays = [np.asarray(labels) for labels in label_sets]
    _, codes = np.unique(np.concatenate(arrays), return_inverse=True)
    codes = codes.astype(np.int32 if codes.size and codes.max() < 2**31 else np.int64)
    return np.split(codes, np.cumsum([len(a) for a in arrays])[:-1])


def _chunked_scores(
    queries: np.ndarray,
    query_codes: np.ndarray,
    base: np.ndarray,
    base_codes: np.ndarray,
    r: np.ndarray,
    exclude_self: bool,
    chunk: int | None,
    ks: Sequence[int] = RECALL_KS,
) -> dict[str, np.ndarray]:
    """R@K (each K of `ks`), R-Precision and AP@R of each query searched in `base` chunk by
    chunk (with `exclude_self`, base row i is query i, left out of its results); R: each
    query's number of matches in the base. Every query's R@K comes from faiss's top-k search;
    its R-Precision and AP@R too, but for queries of more than LARGE_R matches, whose come
    from `_large_ap`."""
    extra = int(exclude_self)  # the query itself comes back among its neighbours
    large = r > LARGE_R
    top = min(max(ks), len(base) - extra)  # what R@K needs
    need = np.where(large, top, np.minimum(np.maximum(r, top), len(base) - extra))
    rows = chunk or chunk_rows(int(need.max(initial=0)) + extra)
    search = FlatSearch(base, len(queries))
    small_r = np.where(large, 0, r)
    width = int(small_r.max(initial=0))
    parts: list[tuple[dict[int, np.ndarray], np.ndarray, np.ndarray]] = []
    bar = searching_bar(len(queries))
    for start, stop in query_chunks(len(queries), rows):
        k = int(need[start:stop].max())
        idx = search(queries[start:stop], k + extra)[1]
        if exclude_self:
            idx = drop_self_ids(idx, np.arange(start, stop))
        same = base_codes[idx] == query_codes[start:stop, None]
        del idx  # the chunk's largest arrays go before the next chunk's search
        chunk_r = small_r[start:stop]
        parts.append((hits_at(same, ks), r_precision(same, chunk_r), ap_at_r(same, chunk_r, width)))
        del same
        bar.update(stop - start)
    bar.close()
    scores = {f"recall@{k}": np.concatenate([p[0][k] for p in parts]) for k in ks}
    scores[R_PRECISION] = np.concatenate([p[1] for p in parts])
    scores["map@r"] = np.concatenate([p[2] for p in parts])
    if large.any():
        which = np.flatnonzero(large)
        args = (queries, query_codes, base, base_codes, r, which, exclude_self, chunk)
        scores[R_PRECISION][which], scores["map@r"][which] = _large_ap(*args)
    return scores


def searching_bar(queries: int) -> tqdm:
    """A progress bar on stderr while `queries` queries are searched, if they are many."""
    return tqdm(
        total=queries,
        desc="searching",
        unit="queries",
        leave=False,
        mininterval=1.0,
        disable=queries < PROGRESS_FROM,
    )


def large_chunk_rows(items: int, largest_r: int) -> int:
    """Queries per ExactRanking chunk over `items` base rows, R up to `largest_r` (LARGE_CELLS)."""
    return max(1, LARGE_CELLS // (items + 6 * largest_r))


def _large_ap(
    queries: np.ndarray,
    query_codes: np.ndarray,
    base: np.ndarray,
    base_codes: np.ndarray,
    r: np.ndarray,
    which: np.ndarray,
    exclude_self: bool,
    chunk: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """R-Precision and AP@R of the queries `which` (in that order) from their whole ranked top
    R (`ExactRanking`), in chunks of about LARGE_CELLS cells."""
    ranking = ExactRanking(base)
    order = np.argsort(r[which], kind="stable")  # chunks of like R: little padding
    width = int(r.max())  # the sums' length of one evaluation of every query (see ap_at_r)
    rows = chunk or large_chunk_rows(len(base), width)
    ap, precision = np.empty(len(which)), np.empty(len(which))
    for start, stop in query_chunks(len(which), rows):
        picked = which[order[start:stop]]
        idx = ranking(queries[picked], r[picked], picked if exclude_self else None)
        same = base_codes[idx] == query_codes[picked, None]
        del idx
        precision[order[start:stop]] = r_precision(same, r[picked])
        ap[order[start:stop]] = ap_at_r(same, r[picked], width)
    return precision, ap


def query_scores(
    embeddings: np.ndarray,
    labels: np.ndarray,
    chunk: int | None = None,
    device=None,
    ks: Sequence[int] = RECALL_KS,
) -> dict[str, np.ndarray]:
    """Each query's R@K (each K of `ks`), R-Precision and AP@R against every other item, in
    query order (`score_names`): what the report's bootstrap resamples; their means are the
    evaluator's metrics. A query whose class has no other item misses at every K and has no
    R-Precision or AP@R (NaN). `chunk`: queries per chunk (default `chunk_rows`). `device`:
    search with torch there (`device_retrieval`), not faiss."""
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    (codes,) = _codes(labels)
    r = np.bincount(codes)[codes] - 1
    return _scores(x, codes, x, codes, r, True, chunk, device, ks)


def _scores(
    queries, query_codes, base, base_codes, r, exclude_self: bool, chunk, device, ks
) -> dict[str, np.ndarray]:
    """faiss's chunked scores on the CPU, or torch's on `device` where one is given."""
    ks = tuple(sorted(set(ks)))
    for x in (queries,) if base is queries else (queries, base):
        fault = distance_fault(x)
        if fault:
            raise ValueError(f"cannot search these embeddings: {fault}")
    if device is None:
        args = (queries, query_codes, base, base_codes, r, exclude_self, chunk, ks)
        return _chunked_scores(*args)
    with searching_bar(len(queries)) as bar:
        args = (queries, query_codes, base, base_codes, r, exclude_self, device, ks, bar)
        return dict(zip(score_names(ks), device_scores(*args), strict=True))


def distance_fault(x: np.ndarray) -> str:
    """Why float32 distances between these rows cannot be trusted ('' where they can): a value
    that is not finite, or one so large that a squared distance overflows to infinity (a
    network that diverged without a NaN), where faiss's k-means aborts the process and every
    distance ties."""
    x = np.asarray(x)
    if not x.size:
        return ""
    lo, hi = float(x.min()), float(x.max())  # two passes, no copy: NaN and inf reach both
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "some values are NaN or infinite"
    largest = max(-lo, hi)
    # |a - b|^2 <= dims * (2 * largest)^2 must stay below float32's largest value.
    if largest >= np.sqrt(float(np.finfo(np.float32).max) / (4 * x.shape[-1])):
        return f"a value of {largest:.3g} overflows float32's squared distances"
    return ""


def gallery_scores(
    queries: np.ndarray,
    query_labels: np.ndarray,
    gallery: np.ndarray,
    gallery_labels: np.ndarray,
    chunk: int | None = None,
    device=None,
    ks: Sequence[int] = RECALL_KS,
) -> dict[str, np.ndarray]:
    """Each query's scores (as `query_scores`') searched in the gallery only (In-Shop's
    protocol), R = the gallery's items of its class. A query whose class has none has no score
    (NaN), as PML's AccuracyCalculator leaves such queries out. `device`, `ks`: as
    `query_scores`'."""
    q_codes, g_codes = _codes(query_labels, gallery_labels)
    r = np.bincount(g_codes, minlength=int(q_codes.max(initial=-1)) + 1)[q_codes]
    q = np.ascontiguousarray(queries, dtype=np.float32)
    g = np.ascontiguousarray(gallery, dtype=np.float32)
    scores = _scores(q, q_codes, g, g_codes, r, False, chunk, device, ks)
    for values in scores.values():
        values[r == 0] = np.nan
    return scores


def mprec_from_neighbours(neighbour_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """mprec@K for K = 1..neighbours: precision@K of every query, averaged over the queries of
    each class, then over the classes (Sharma et al. 2015 §4)."""
    hits = (neighbour_labels == labels[:, None]).astype(np.float64)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    classes = np.unique(labels)
    per_class = [precision[labels == c].mean(axis=0) for c in classes]
    return np.mean(per_class, axis=0)


def mprec_at_k(
    embeddings: np.ndarray, labels: np.ndarray, max_k: int = MPREC_MAX_K, device=None
) -> np.ndarray:
    """mprec@K for K = 1..max_k (at most N - 1): every item a query against the rest; searched
    by faiss on the CPU, or by torch on `device` (`torch_knn.search_device`)."""
    labels = np.asarray(labels)
    return mprec_from_neighbours(labels[nearest_others(embeddings, max_k, device)], labels)
