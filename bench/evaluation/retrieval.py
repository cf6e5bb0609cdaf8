"""The common evaluator's retrieval metrics: Recall@K, R-Precision and MAP@R from an exact kNN
search, by faiss on the CPU or by torch on a run's device (bench.util.torch_knn).

The search is the one part that differs: each hands back, chunk by chunk, which of a query's
neighbours (nearest first) share its label, and the scores are computed from those once
(`hits_at`, `r_precision`, `ap_at_r`), in numpy on the CPU and in torch on the device
(`bench.util.arrays.namespace`), in float64. A chunk asks for as many neighbours as its own
queries need (the largest R among them, at least the largest K), and only each query's scores
are kept, so memory is set by the chunk and the largest class, never by N x N or N x (largest
class). The Ks are the data set's own (`bench.data.recall_ks`), R@1/2/4/8 where it declares
none.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from tqdm import tqdm

from bench.protocols import DEFAULT_RECALL_KS
from bench.util.arrays import Array, chunk_rows, host, namespace
from bench.util.knn import (
    GPU_MAX_K,
    QUERY_BLOCK,
    ExactRanking,
    FlatSearch,
    drop_self_ids,
    query_chunks,
)
from bench.util.torch_knn import TorchSearch, nearest_chunks, nearest_others

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
# Queries with more matches than this get their R-Precision and AP@R from a second search of
# their whole top R (on the CPU ExactRanking's, see docs/metrics.md): every faiss search then
# asks for at most 2,048 neighbours, so chunks stay whole 4,096-query blocks and on a GPU
# within faiss-gpu's k-selection; and the first search's AP@R sums stay that short.
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


def hits_at(same: Array, ks: Sequence[int] = RECALL_KS) -> dict[int, Array]:
    """recall@K of each row of `same` (whether each neighbour, nearest first, is a match)."""
    xp = namespace(same)
    return {k: xp.asarray(same[:, :k].any(axis=1), dtype=xp.float64) for k in ks}


def average_precision_at_r(neighbour_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AP@R of each query (its mean over the queries is MAP@R, Musgrave et al. 2020), R = the
    number of other items of the query's class; NaN where it has none (R = 0)."""
    classes, counts = np.unique(labels, return_counts=True)
    r = counts[np.searchsorted(classes, labels)] - 1
    max_r = int(r.max())
    if neighbour_labels.shape[1] < max_r:
        raise ValueError(
            f"MAP@R needs {max_r} neighbours per query, got {neighbour_labels.shape[1]}"
        )
    return ap_at_r(neighbour_labels[:, :max_r] == labels[:, None], r, max_r)


def ap_at_r(same: Array, r: Array, width: int) -> Array:
    """AP@R of each row of `same` (at least r.max() columns) with its own R; NaN where R = 0.
    numpy's arrays or torch's tensors (`namespace`), r among them.

    The sum runs over `width` >= r.max() columns, zeros past each row's R: numpy adds in pairs,
    so the length of the row it sums decides the last bit, and a chunk sums over the whole
    set's largest R, as one evaluation of every query does."""
    xp, on = namespace(same), same.device
    w = int(r.max()) if len(r) else 0
    ranks = xp.arange(1, w + 1, device=on)
    hits = xp.asarray(same[:, :w] & (ranks[None, :] <= r[:, None]), dtype=xp.float64)
    terms = xp.zeros((len(r), width), dtype=xp.float64, device=on)
    precision = terms[:, :w]
    xp.cumsum(hits, axis=1, out=precision)
    precision /= ranks
    precision *= hits
    return per_r(terms.sum(axis=1), r)


def r_precision(same: Array, r: Array) -> Array:
    """R-Precision of each row of `same` (at least r.max() columns): its share of matches among
    its R nearest (Musgrave et al. 2020); NaN where R = 0. A count over R, so exact."""
    xp = namespace(same)
    w = int(r.max()) if len(r) else 0
    hits = same[:, :w] & (xp.arange(1, w + 1, device=same.device)[None, :] <= r[:, None])
    return per_r(xp.asarray(hits.sum(axis=1), dtype=xp.float64), r)


def per_r(totals: Array, r: Array) -> Array:
    """Each row's total over its R (float64); NaN where R = 0."""
    xp = namespace(totals)
    out = xp.full((len(r),), xp.nan, dtype=xp.float64, device=totals.device)
    valid = r > 0
    out[valid] = totals[valid] / r[valid]
    return out


def score_names(ks: Sequence[int]) -> list[str]:
    """The per-query scores' names, in order: R@K for each K, R-Precision, MAP@R."""
    return [*(f"recall@{k}" for k in ks), R_PRECISION, "map@r"]


def _codes(*label_sets: np.ndarray) -> list[np.ndarray]:
    """Each set's labels as small integers, shared by all sets (equal labels, equal codes)."""
    arrays = [np.asarray(labels) for labels in label_sets]
    _, codes = np.unique(np.concatenate(arrays), return_inverse=True)
    codes = codes.astype(np.int32 if codes.size and codes.max() < 2**31 else np.int64)
    return np.split(codes, np.cumsum([len(a) for a in arrays])[:-1])


class FaissSearch:
    """The CPU's search: faiss's exact search in chunks of whole query blocks, in query order,
    to the bit one search of every query (`FlatSearch`); the large classes' top R ranked by
    `ExactRanking`. `chunk`: queries a chunk (default: about CHUNK_CELLS neighbours)."""

    def __init__(self, queries, query_codes, base, base_codes, exclude_self, chunk=None) -> None:
        self.queries, self.query_codes, self.base = queries, query_codes, base
        self.base_codes, self.exclude_self, self.chunk = base_codes, exclude_self, chunk

    def to(self, a: np.ndarray) -> np.ndarray:
        return a

    def nearest(self, need: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
        """(rows, whether each of their `need` nearest base items is a match) by chunks."""
        extra = int(self.exclude_self)  # the query itself comes back among its neighbours
        rows = self.chunk or chunk_rows(int(need.max(initial=0)) + extra, CHUNK_CELLS, CHUNK_ROWS)
        search = FlatSearch(self.base, len(self.queries))
        for start, stop in query_chunks(len(self.queries), rows):
            idx = search(self.queries[start:stop], int(need[start:stop].max()) + extra)[1]
            if self.exclude_self:
                idx = drop_self_ids(idx, np.arange(start, stop))
            same = self.base_codes[idx] == self.query_codes[start:stop, None]
            del idx  # a chunk's largest arrays go before the next chunk's search
            yield slice(start, stop), same
            del same

    def ranked(self, which: np.ndarray, r: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """As `nearest`, for the queries `which`, each's R nearest, in chunks of like R of
        about LARGE_CELLS cells (ExactRanking's distances, each row's order and AP@R terms)."""
        ranking = ExactRanking(self.base)
        order = np.argsort(r[which], kind="stable")  # chunks of like R: little padding
        rows = self.chunk or chunk_rows(len(self.base) + 6 * int(r.max()), LARGE_CELLS)
        for start, stop in query_chunks(len(which), rows):
            picked = which[order[start:stop]]
            idx = ranking(self.queries[picked], r[picked], picked if self.exclude_self else None)
            same = self.base_codes[idx] == self.query_codes[picked, None]
            del idx
            yield picked, same
            del same


class DeviceSearch:
    """The search in torch on `device` (issue 44: on a GPU, faiss on the CPU took 36 s where
    torch on the GPU took 0.4 s): queries in chunks of like need (`nearest_chunks`), their
    matches and scores left on the device until the end (a copy to the host in each chunk
    would wait for the GPU to finish). A query is excluded from its own results by index, so
    its duplicates still count, as on the CPU. `chunk`: queries a chunk (default: as many as
    `device_cells` distances)."""

    def __init__(self, queries, query_codes, base, base_codes, exclude_self, chunk, device):
        self.search = TorchSearch(base, device)
        self.queries, self.query_codes = self.to(queries), self.to(query_codes)
        self.base_codes, self.exclude_self, self.chunk = self.to(base_codes), exclude_self, chunk

    def to(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(a)).to(self.search.device)

    @torch.no_grad()
    def nearest(self, need, which=None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        args = (self.search, self.queries, need, self.exclude_self, which, self.chunk)
        for rows, (_, idx) in nearest_chunks(*args):
            yield rows, self.base_codes[idx] == self.query_codes[rows, None]

    def ranked(
        self, which: np.ndarray, r: np.ndarray
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.nearest(r, which)


def _scores(
    queries, query_codes, base, base_codes, r, exclude_self: bool, chunk, device, ks
) -> dict[str, np.ndarray]:
    """R@K (each K of `ks`), R-Precision and AP@R of each query searched in `base` (with
    `exclude_self`, base row i is query i, left out of its results), by faiss on the CPU or by
    torch on `device`; R: each query's number of matches in the base. Every query's R@K comes
    from a top-k search; its R-Precision and AP@R too, but for queries of more than LARGE_R
    matches, whose come from a second search of their top R (`ranked`)."""
    ks = tuple(sorted(set(ks)))
    for x in (queries,) if base is queries else (queries, base):
        fault = distance_fault(x)
        if fault:
            raise ValueError(f"cannot search these embeddings: {fault}")
    args = (queries, query_codes, base, base_codes, exclude_self, chunk)
    search = FaissSearch(*args) if device is None else DeviceSearch(*args, device)
    large = r > LARGE_R
    top = min(max(ks), len(base) - exclude_self)  # what R@K needs
    need = np.where(large, top, np.minimum(np.maximum(r, top), len(base) - exclude_self))
    passes = [(np.where(large, 0, r), search.nearest(need))]
    if large.any():
        passes.append((r, search.ranked(np.flatnonzero(large), r)))
    found = search.to(np.zeros((len(ks) + 2, len(queries))))
    with searching_bar(len(queries)) as bar:
        for i, (pass_r, matches) in enumerate(passes):
            width, pass_r = int(pass_r.max(initial=0)), search.to(pass_r)
            for rows, same in matches:
                if i == 0:  # R@K from the first search alone
                    for j, hits in enumerate(hits_at(same, ks).values()):
                        found[j, rows] = hits
                    bar.update(len(same))
                chunk_r = pass_r[rows]
                found[-2, rows] = r_precision(same, chunk_r)
                found[-1, rows] = ap_at_r(same, chunk_r, width)
                del same  # the chunk's largest array goes before the next chunk's search
    return dict(zip(score_names(ks), host(found), strict=True))


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
    R-Precision or AP@R (NaN). `chunk`: queries per chunk (default: as many as a chunk's
    memory holds). `device`: search with torch there (`DeviceSearch`), not faiss."""
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    (codes,) = _codes(labels)
    r = np.bincount(codes)[codes] - 1
    return _scores(x, codes, x, codes, r, True, chunk, device, ks)


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
    return mprec_from_neighbours(labels[nearest_others(embeddings, max_k, device)[1]], labels)
