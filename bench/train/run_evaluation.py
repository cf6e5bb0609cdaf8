"""A training run's evaluation: its validation after each epoch (which selects the checkpoint), its
test as its protocol searches it, and, at its end, the chosen checkpoint's test with the
embedding's health, its embeddings kept, and the training split's retrieval beside it.

The evaluator gets the run's search by name (`device=run.compute.search`: None for faiss on the
CPU) and the data set's Recall@K (`ks=run.ks`). Each function takes the trainer as `run`
(`bench.train.trainer.Trainer`), as the protocol's evaluations do."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.data.datasets import query_flags
from bench.evaluation.health import embedding_health
from bench.evaluation.metrics import Scores, evaluate
from bench.evaluation.retrieval import distance_fault
from bench.runs import store
from bench.train.evaluations import retrieval_scores
from bench.train.guards import Diverged


def validation_metrics(run: Any, epoch: int) -> dict:
    """Validation metrics with what the protocol's evaluations add, and `score` (higher is
    better) to select the checkpoint by, as the protocol declares it; the epoch itself
    without a validation split."""
    if not len(run.data.val):  # --val-fraction 0: every epoch beats the one before
        return {"score": float(epoch)}
    emb, labels = run.embed_split(run.data.val)
    fault = distance_fault(emb)
    if fault:
        raise Diverged(epoch, f"validation embeddings: {fault}", float("nan"))
    metrics = unclustered_metrics(run, emb, labels)
    for evaluation in run.evaluations:
        metrics.update(evaluation.validate(run, emb, labels))
    metrics["score"] = run.protocol.score_of(metrics)
    return metrics


def searched_test(
    run: Any, write_tables: bool = False, clustering: str = ""
) -> tuple[dict, np.ndarray, np.ndarray, Scores]:
    """Test metrics, searched as the protocol searches (with a gallery: the test split's
    queries in its gallery), with what the protocol's evaluations add (`write_tables`: their
    tables into the run folder); the test embeddings and labels, and each query's scores.
    `clustering`: which NMI (default: the run's)."""
    emb, labels = run.embed_split(run.data.test)
    metrics, scores = scored_test(run, emb, labels, clustering or run.cfg.clustering)
    for evaluation in run.evaluations:
        metrics.update(evaluation.test(run, emb, labels, write_tables))
    return metrics, emb, labels, scores


def checkpoint_metrics(run: Any, epoch: int) -> dict:
    """The test of the checkpoint the run holds (that of `epoch`), with its embedding's
    health, written to the experiment log; its test embeddings with each query's scores,
    and its training split's embeddings, kept in the run folder; R@K and MAP@R on the
    training split beside the test's, as `train_*`: how far test falls from it (Liu et al.
    2019, Table 1)."""
    metrics, emb, labels, scores = searched_test(run, write_tables=True)
    metrics.update(embedding_health(emb, labels, run.cfg.seed, device=run.compute.search))
    run.run_log.test(metrics, epoch)
    store.save_test_embeddings(run.run_dir, emb, labels, scores, query_flags(run.data.test))
    train, train_labels = run.embed_split(run.data.train_eval)  # for the visualisations
    store.save_train_embeddings(run.run_dir, train, train_labels)
    found = unclustered_metrics(run, train, train_labels)
    metrics.update({f"train_{key}": value for key, value in found.items()})
    return metrics


def scored_test(
    run: Any, emb: np.ndarray, labels: np.ndarray, clustering: str
) -> tuple[dict, Scores]:
    """`retrieval_scores` of embeddings of the run's test split (its query flags), searched as
    its protocol searches, at its seed, by its search and with its data set's Recall@K;
    `clustering`: which NMI."""
    return retrieval_scores(
        run.protocol,
        emb,
        labels,
        query_flags(run.data.test),
        run.cfg.seed,
        clustering,
        device=run.compute.search,
        ks=run.ks,
    )


def unclustered_metrics(run: Any, emb: np.ndarray, labels: np.ndarray) -> dict:
    """R@K, R-Precision and MAP@R of `emb` among themselves without k-means (an epoch's
    validation, the training split), at the run's seed, by its search, at its Recall@K."""
    found = evaluate(
        emb, labels, seed=run.cfg.seed, clustering=False, device=run.compute.search, ks=run.ks
    )
    return found.metrics
