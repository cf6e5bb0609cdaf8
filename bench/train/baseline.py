"""The untrained baseline of a data set: its test split embedded before any metric training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bench.data.datasets import DataSplits
from bench.evaluation.metrics import evaluate
from bench.models.embed import embed
from bench.models.embedding import build_model
from bench.runs import store
from bench.runs.config import RunConfig
from bench.train.loaders import load_data
from bench.util.atomic import atomic_save_npz, atomic_write_json
from bench.util.progress import log
from bench.util.runtime import default_device, package_versions, seed_everything


def run_summary(cfg: RunConfig, **extra) -> dict:
    return {
        "dataset": cfg.dataset,
        "protocol": cfg.protocol,
        "loss": cfg.loss,
        "miner": cfg.loss_params.get("miner"),
        "dims": cfg.dims,
        "seed": cfg.seed,
        "backbone": cfg.backbone,
        "pretrained": cfg.pretrained,
        "embedding": cfg.embedding,
        "freeze_backbone": cfg.freeze_backbone,
        "train_per_class": cfg.train_per_class,
        "val_split": cfg.val_split,
        "preset": cfg.preset,
        "epochs": cfg.epochs,
        **extra,
    }


def baseline_features(cfg: RunConfig, data: DataSplits, device: torch.device):
    """The untrained embedding of the test split: raw inputs where they are small vectors,
    else the backbone's features (with its pretrained weights) before any metric training."""
    if hasattr(data.test, "inputs"):
        return data.test.inputs(), "raw inputs", "none", "none"
    seed_everything(cfg.seed)
    model = build_model(cfg.backbone, cfg.dims, cfg.pretrained, data.in_channels).to(device)
    features, _ = embed(model, data.test, device, features=True, workers=cfg.workers)
    return features.numpy(), f"{cfg.backbone} features", cfg.backbone, cfg.pretrained


def run_baseline(cfg: RunConfig, results: Path, device: torch.device | None = None) -> Path:
    """The untrained baseline of a run's data set and backbone, evaluated like any run."""
    device = device or default_device()
    data = load_data(cfg)
    features, kind, backbone, pretrained = baseline_features(cfg, data, device)
    base = RunConfig(
        dataset=cfg.dataset,
        protocol=cfg.protocol,
        loss="untrained",
        dims=features.shape[1],
        backbone=backbone,
        pretrained=pretrained,
        epochs=0,
        resize=cfg.resize,
        crop=cfg.crop,
        val_fraction=cfg.val_fraction,
        data_root=cfg.data_root,
    )
    run_dir = Path(results) / base.run_id()
    if store.is_finished(run_dir):
        return run_dir
    log.info(f"{run_dir.name}: the baseline, {kind} of the {cfg.dataset} test split")
    labels = np.asarray(data.test.labels)
    record = {**base.to_dict(), "features": kind, "versions": package_versions()}
    atomic_write_json(run_dir / store.CONFIG, record)
    metrics = evaluate(features, labels, seed=base.seed)
    atomic_save_npz(run_dir / store.EMBEDDINGS, embeddings=features, labels=labels)
    metrics.update(run_summary(base, features=kind))
    atomic_write_json(run_dir / store.METRICS, metrics)
    return run_dir
