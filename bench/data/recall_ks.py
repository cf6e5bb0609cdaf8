"""Each data set's own Recall@K, as its source module declares it (`RECALL_KS`), the way a loss
declares what it needs: the evaluator computes R@K at these Ks from its one search, and a run's
metrics.json and tables hold them. A data set that declares none (CUB-200-2011, Cars196, the
built-in sets, folders) has R@1/2/4/8 (`bench.protocols.DEFAULT_RECALL_KS`); runs of earlier
versions recorded R@1/2/4/8 for every data set, and are reported as they are."""

from __future__ import annotations

from bench.data import emoji
from bench.data.sources import inshop, sop
from bench.protocols import DEFAULT_RECALL_KS

DECLARED: dict[str, tuple[int, ...]] = {
    source.NAME: source.RECALL_KS for source in (sop, inshop, emoji)
}


def recall_ks(dataset: str) -> tuple[int, ...]:
    """The Ks of a data set's Recall@K, by its `--dataset` name (a set's parameters aside)."""
    return DECLARED.get(dataset.partition(":")[0], DEFAULT_RECALL_KS)
