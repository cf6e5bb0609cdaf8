"""The baselines of a data set: its raw test inputs, and its test split through the untrained
network, each evaluated like a run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.data.datasets import DataSplits, query_flags
from bench.data.recall_ks import recall_ks
from bench.evaluation.health import embedding_health
from bench.models.embed import embed
from bench.models.embedding import build_model
from bench.protocols import get_protocol
from bench.runs import store
from bench.runs.config import BASELINE_LOSS, RunConfig, without_unused
from bench.runs.weights import (
    changed_weights,
    current_weights_label,
    untrained_label,
    weights_record,
)
from bench.train.compute import Compute
from bench.train.evaluations import evaluations_of, retrieval_scores
from bench.train.loaders import input_size, item_size, load_data
from bench.train.optimizers import optimizer_text
from bench.train.option_checks import unused
from bench.util.arrays import l2_normalised
from bench.util.atomic import atomic_write_json
from bench.util.progress import log
from bench.util.runtime import package_versions, seed_everything
from losses import loss_family


def run_summary(cfg: RunConfig, **extra) -> dict:
    """What metrics.json records of a run's settings (`extra` added or replacing), with its
    weights' label as their provenance gives it now (`weights`; the report reads it), and a
    weights file's sha256 and format (`weights_record`)."""
    weights = extra.pop("weights", None) or current_weights_label(cfg.pretrained)
    return {
        "dataset": cfg.dataset,
        "protocol": cfg.protocol,
        "loss": cfg.loss,
        "family": loss_family(cfg.loss),
        "miner": cfg.loss_params.get("miner"),
        "dims": cfg.dims,
        "seed": cfg.seed,
        "backbone": cfg.backbone,
        "pretrained": cfg.pretrained,
        "weights": weights,
        **weights_record(cfg.pretrained),
        "embedding": cfg.embedding,
        "freeze_backbone": cfg.freeze_backbone,
        "train_per_class": cfg.train_per_class,
        "val_split": cfg.val_split,
        "clustering": cfg.clustering,
        "preset": cfg.preset,
        "epochs": cfg.epochs,
        "batch_size": cfg.batch_size,
        "optimizer": optimizer_text(cfg),
        "lr": cfg.lr,
        "data_location": cfg.data_location,
        "data_fingerprint": cfg.data_fingerprint,
        **extra,
    }


def baseline_config(cfg: RunConfig, dims: int, **settings) -> RunConfig:
    """A baseline's identity: the run's data, split and the input settings it uses (`unused`:
    the raw glyphs of a timm run at --crop 32 are every glyphs run's); no training."""
    base = RunConfig(
        dataset=cfg.dataset,
        protocol=cfg.protocol,
        loss=BASELINE_LOSS,
        dims=dims,
        epochs=0,
        resize=cfg.resize,
        crop=cfg.crop,
        crop_mode=cfg.crop_mode,
        val_fraction=cfg.val_fraction,
        val_split=cfg.val_split,
        data_root=cfg.data_root,
        data_location=cfg.data_location,
        data_fingerprint=cfg.data_fingerprint,
        workers=cfg.workers,
        clustering=cfg.clustering,
        **settings,
    )
    return without_unused(base, unused(base))


def run_baseline(
    cfg: RunConfig, results: Path, compute: Compute, data: DataSplits | None = None
) -> list[Path]:
    """The two baseline rows of every table, L2-normalised and evaluated like any run: the raw
    test inputs (pixels or feature vectors, flattened), and the test split through the run's
    backbone before any metric training (its seeded random init, or its pretrained weights).
    `compute`: where the network embeds and the evaluator searches, as the command resolved
    --device. `data`: the run's data, when it is loaded already."""
    data = load_data(cfg) if data is None else data
    raw = data.test.inputs()
    raw_cfg = baseline_config(cfg, raw.shape[1], backbone="none", embedding="inputs")
    given = dict(data=data, results=results, search=compute.search)

    def inputs(split) -> np.ndarray:
        return raw if split is data.test else split.inputs()

    runs = [write_baseline(raw_cfg, "raw inputs", inputs, **given)]
    seed_everything(cfg.seed)
    model = build_model(
        cfg.backbone,
        cfg.dims,
        cfg.pretrained,
        data.in_channels,
        pooling=cfg.pooling,
        image_size=cfg.crop,
    ).to(compute.device)
    # its pooling names it where not the default (avg), as a run's: a baseline of each
    settings = dict(backbone=cfg.backbone, pretrained=cfg.pretrained, embedding="backbone")
    settings["pooling"] = cfg.pooling
    net_cfg = baseline_config(cfg, model.embed.in_features, seed=cfg.seed, **settings)
    label = untrained_label(cfg.backbone, cfg.pretrained, current_weights_label(cfg.pretrained))

    def features(split) -> np.ndarray:
        return embed(model, split, compute.device, features=True, workers=cfg.workers)[0].numpy()

    runs.append(write_baseline(net_cfg, label, features, **given))
    return runs


def write_baseline(
    base: RunConfig,
    label: str,
    features_of: Callable[[Any], np.ndarray],
    data: DataSplits,
    results: Path,
    search: torch.device | None = None,
) -> Path:
    """A baseline's run folder, evaluated unless it is finished already (`features_of(split)`:
    its features of a split of `data`), searched as its protocol searches, with what its
    protocol's evaluations give without a trained part (`Evaluation.baseline`: the pairs'
    verification); `search`: the evaluator's device (`Compute.search`; None: faiss on the
    CPU)."""
    run_dir = Path(results) / base.run_id()
    if store.is_finished(run_dir):
        changed = changed_weights(store.read_metrics(run_dir), base.pretrained)
        if not changed:
            return run_dir
        log.info(f"{run_dir.name}: {changed.split('; ')[0]}: evaluated again")
    log.info(f"{run_dir.name}: the baseline {label!r} on the {base.dataset} test split")
    embeddings = l2_normalised(features_of(data.test))
    labels, queries = np.asarray(data.test.labels), query_flags(data.test)
    record = {**base.to_dict(), "features": label, "versions": package_versions()}
    atomic_write_json(run_dir / store.CONFIG, record)
    protocol = get_protocol(base.protocol)
    metrics, scores = retrieval_scores(
        protocol,
        embeddings,
        labels,
        queries,
        base.seed,
        base.clustering,
        device=search,
        ks=recall_ks(base.dataset),
    )

    def normalised(split) -> np.ndarray:
        return embeddings if split is data.test else l2_normalised(features_of(split))

    for evaluation in evaluations_of(protocol.evaluations):
        metrics.update(evaluation.baseline(data, normalised))
    metrics.update(embedding_health(embeddings, labels, seed=base.seed, device=search))
    store.save_test_embeddings(run_dir, embeddings, labels, scores, queries)
    given = input_size(data) if base.backbone != "none" else item_size(data)  # raw: the items
    metrics.update(run_summary(base, features=label, input_size=given))
    atomic_write_json(run_dir / store.METRICS, metrics)
    return run_dir
