"""What a protocol's validation and test add to retrieval, by the names protocols declare
(`bench.protocols.Protocol.evaluations`): the trainer runs whichever its protocol names; and the
test's retrieval itself, every item among the others or, for a protocol with a gallery
(`Protocol.gallery`), the queries in the gallery (`retrieval_scores`).

Each evaluation takes the trainer as `run`: its data, `embed_split`, loss and run folder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bench.evaluation.classification import classification_scores
from bench.evaluation.clustering import NMI_LEFT_OUT, fitted_clustering, nmi, nmi_best_of
from bench.evaluation.metrics import BEST_OF, CLUSTERING, Scores, evaluate, evaluate_gallery
from bench.evaluation.pair_scoring import pair_report, pair_scores, validation_threshold
from bench.evaluation.retrieval import R_PRECISION, RECALL_KS
from bench.protocols import CLASSIFIER, VERIFICATION, Protocol
from bench.util.atomic import atomic_write_text
from bench.util.progress import log
from bench.util.registry import Registry

EVALUATIONS = Registry("evaluation")
register_evaluation = EVALUATIONS.register


class Evaluation:
    """Metrics beside retrieval's, on an epoch's validation embeddings and on the test's."""

    def validate(self, run: Any, emb: np.ndarray, labels: np.ndarray) -> dict:
        return {}

    def test(self, run: Any, emb: np.ndarray, labels: np.ndarray, write_tables: bool) -> dict:
        return {}

    def baseline(self, data: Any, features_of: Callable[[Any], np.ndarray]) -> dict:
        """The same metrics of a baseline (`features_of(split)`: its L2-normalised features
        of a split of `data`), where they need no trained part; else none."""
        return {}


def evaluations_of(names: tuple[str, ...]) -> list[Evaluation]:
    return [EVALUATIONS.get_class(name)() for name in names]


def retrieval_scores(
    protocol: type[Protocol],
    emb: np.ndarray,
    labels: np.ndarray,
    queries: np.ndarray | None,
    seed: int,
    clustering: str = "full",
    *,
    device: torch.device | None = None,
    ks: Sequence[int] = RECALL_KS,
) -> tuple[dict, Scores]:
    """(R@K, NMI, R-Precision and MAP@R, each query's scores) of a test split as the protocol
    searches it:
    every item among the others (`evaluate`), or, with a gallery, each query (`queries` flags
    them) among the gallery items only (`gallery_metrics`), the scores those of the queries.
    `clustering`: which NMI (`CLUSTERING`, a run's setting). `device`: the search's, by name
    (a run's `Compute.search`; None: faiss on the CPU). `ks`: the data set's Recall@K
    (`bench.data.recall_ks`)."""
    if not protocol.gallery:
        clustering, left_out = fitted_clustering(clustering, emb, labels, BEST_OF, device)
        found = CLUSTERING[clustering]
        metrics, scores = evaluate(emb, labels, seed=seed, device=device, ks=ks, **found)
        return noted(metrics, left_out), scores
    if queries is None or len(queries) != len(labels):
        raise ValueError(
            "a protocol with a gallery needs the test split's query flags, one per item; this "
            "test split has none (a data set without query and gallery images)"
        )
    flags = np.asarray(queries, dtype=bool)
    return gallery_metrics(emb, np.asarray(labels), flags, seed, clustering, device=device, ks=ks)


def gallery_metrics(
    emb: np.ndarray,
    labels: np.ndarray,
    queries: np.ndarray,
    seed: int,
    clustering: str = "full",
    *,
    device: torch.device | None = None,
    ks: Sequence[int] = RECALL_KS,
) -> tuple[dict, Scores]:
    """R@K, R-Precision and MAP@R of the queries searched in the gallery (`evaluate_gallery`),
    with their scores; NMI, of one k-means run and the best of 5 as `evaluate` gives them,
    over the gallery alone (the set a query is searched in: In-Shop's queries are a second
    view of the gallery's items)."""
    gallery, gallery_labels = emb[~queries], labels[~queries]
    clustering, left_out = fitted_clustering(clustering, gallery, gallery_labels, BEST_OF, device)
    found, scores = evaluate_gallery(
        emb[queries], labels[queries], gallery, gallery_labels, device=device, ks=ks
    )
    last = (R_PRECISION, "map@r")  # after NMI, as `evaluate` orders them
    metrics = {key: value for key, value in found.items() if key not in last}
    if CLUSTERING[clustering]["clustering"]:
        metrics["nmi"] = nmi(gallery, gallery_labels, device)
    if CLUSTERING[clustering]["best_of"]:
        metrics[f"nmi_best_of_{BEST_OF}"] = nmi_best_of(
            gallery, gallery_labels, seed, BEST_OF, device
        )
    metrics.update({key: found[key] for key in last})
    return noted(metrics, left_out), scores


def noted(metrics: dict, left_out: str) -> dict:
    """The metrics, with what the default's size cut left out (`NMI_LEFT_OUT`), said once."""
    if not left_out:
        return metrics
    log.info(f"NMI: {left_out}")
    return {**metrics, NMI_LEFT_OUT: left_out}


@register_evaluation(CLASSIFIER)
class Classifier(Evaluation):
    """Accuracy and NLL of the loss's classifier over the current training embeddings."""

    def validate(self, run: Any, emb: np.ndarray, labels: np.ndarray) -> dict:
        return classification_scores(class_probabilities(run, emb), labels)

    def test(self, run: Any, emb: np.ndarray, labels: np.ndarray, write_tables: bool) -> dict:
        return self.validate(run, emb, labels)


def class_probabilities(run: Any, emb: np.ndarray) -> torch.Tensor:
    train, train_labels = run.embed_split(run.data.train_eval)
    return run.loss.class_probabilities(
        torch.from_numpy(emb),
        torch.from_numpy(train),
        torch.from_numpy(train_labels),
        run.data.num_train_classes,
    )


@register_evaluation(VERIFICATION)
class Verification(Evaluation):
    """Pair accuracy at the threshold chosen on the validation pairs; on test, seen and unseen
    verification at the validation threshold, its tables (pairs, precision-recall curves,
    categories) written into the run folder."""

    def validate(self, run: Any, emb: np.ndarray, labels: np.ndarray) -> dict:
        scores, _, _ = pair_scores(emb, labels, validation_threshold(emb, labels))
        return {"pair_accuracy": scores["accuracy"]}

    def test(self, run: Any, emb: np.ndarray, labels: np.ndarray, write_tables: bool) -> dict:
        val_emb, val_labels = run.embed_split(run.data.val)
        splits = {"seen": (emb, labels), "unseen": run.embed_split(run.data.unseen)}
        scores, tables = pair_report(
            splits, validation_threshold(val_emb, val_labels), run.data.class_names
        )
        for name, table in tables.items() if write_tables else ():
            atomic_write_text(run.run_dir / f"{name}.csv", table.to_csv(index=False))
        return scores

    def baseline(self, data: Any, features_of: Callable[[Any], np.ndarray]) -> dict:
        """Seen and unseen verification of the raw inputs or the untrained network, at the
        threshold chosen on their validation pairs, as a trained run's."""
        splits = {"seen": (features_of(data.test), np.asarray(data.test.labels))}
        if data.unseen is not None:
            splits["unseen"] = (features_of(data.unseen), np.asarray(data.unseen.labels))
        threshold = validation_threshold(features_of(data.val), np.asarray(data.val.labels))
        return pair_report(splits, threshold, data.class_names)[0]
